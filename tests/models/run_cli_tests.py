#!/usr/bin/env python3
"""run_cli_tests.py - tests of the `kiln` command line itself on the bundled
example model (examples/tiny_cnn.onnx): help and version, clear errors for bad
flags and values, build/save/load, the plan header, the performance summary,
the JSON exports, dynamic batch through a profile, and `kiln inspect`.
Needs only the Python standard library."""

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "examples", "tiny_cnn.onnx")

passed = 0
failed = []


def run(kiln, *args):
    p = subprocess.run([kiln] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=240)
    return p.returncode, p.stdout, p.stderr


def check(what, cond, detail=""):
    global passed
    if cond:
        passed += 1
    else:
        failed.append(what + (": " + detail[-2000:] if detail else ""))
        print("FAIL: " + what)


def expect_error(kiln, what, args, text):
    """The command must fail (non-zero exit) and say `text` on stderr."""
    rc, out, err = run(kiln, *args)
    check(what, rc != 0 and text in err,
          "exit %d, expected %r in stderr:\n%s%s" % (rc, text, out, err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    k = args.kiln
    shutil.rmtree(args.work, ignore_errors=True)  # no stale exports from an earlier run
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731

    # ---- version and help ----
    rc, out, _ = run(k, "--version")
    check("--version", rc == 0 and out.startswith("kiln "), out)
    rc, out, _ = run(k, "help")
    check("help", rc == 0 and "exec" in out and "inspect" in out, out)
    rc, out, _ = run(k, "help", "exec")
    check("help exec", rc == 0 and "--loadInputs" in out and "--memPoolSize" in out, out)
    rc, out, _ = run(k, "exec", "--help")
    check("exec --help", rc == 0 and "--exportProfile" in out, out)
    rc, _, err = run(k)
    check("no command", rc != 0 and "Usage" in err, err)

    # ---- bad flags and values ----
    m = "--onnx=" + MODEL
    expect_error(k, "unknown command", ["frobnicate"], "frobnicate")
    expect_error(k, "unknown flag", ["exec", m, "--bogusFlag=1"], "--bogusFlag")
    expect_error(k, "bad integer", ["exec", m, "--iterations=abc"], "--iterations")
    expect_error(k, "zero iterations", ["exec", m, "--iterations=0"], "--iterations")
    expect_error(k, "bad duration", ["exec", m, "--duration=-1"], "--duration")
    expect_error(k, "bad warmUp", ["exec", m, "--warmUp=x"], "--warmUp")
    expect_error(k, "bad size suffix", ["exec", m, "--memPoolSize=workspace:12Q"], "--memPoolSize")
    expect_error(k, "unknown pool", ["exec", m, "--memPoolSize=bogus:12"], "bogus")
    expect_error(k, "bad shapes", ["exec", m, "--shapes=input"], "--shapes")
    expect_error(k, "bad dims", ["exec", m, "--shapes=input:1xAx3"], "--shapes")
    expect_error(k, "bad threads", ["exec", m, "--threads=-2"], "--threads")
    expect_error(k, "flag without value", ["exec", "--onnx"], "--onnx")
    expect_error(k, "value on a switch", ["exec", m, "--skipInference=yes"], "--skipInference")
    expect_error(k, "nothing to run", ["exec"], "--onnx")
    expect_error(k, "both sources", ["exec", m, "--loadEngine=x.plan"], "--loadEngine")
    expect_error(k, "version only needs a plan", ["exec", m, "--getPlanVersionOnly"],
                 "--getPlanVersionOnly")
    expect_error(k, "missing model file", ["exec", "--onnx=" + w("missing.onnx")], "missing.onnx")
    expect_error(k, "missing plan file", ["exec", "--loadEngine=" + w("missing.plan")],
                 "missing.plan")
    expect_error(k, "unknown input in --shapes",
                 ["exec", m, "--shapes=nosuch:1x3x64x64", "--skipInference"], "nosuch")
    expect_error(k, "an ONNX file is not a plan",
                 ["exec", "--loadEngine=" + MODEL, "--getPlanVersionOnly"], "KILN_ERR_")
    expect_error(k, "inspect without file", ["inspect"], "inspect")
    expect_error(k, "inspect unknown flag", ["inspect", MODEL, "--bogus"], "--bogus")

    # ---- build, save, header ----
    plan = w("tiny.plan")
    rc, out, err = run(k, "exec", m, "--saveEngine=" + plan, "--minShapes=input:1x3x64x64",
                       "--optShapes=input:2x3x64x64", "--maxShapes=input:4x3x64x64",
                       "--skipInference", "--exportLayerInfo=" + w("layers.json"))
    check("build and save", rc == 0 and "Engine built in" in out and os.path.exists(plan),
          out + err)
    if rc != 0:
        return finish()
    try:
        with open(w("layers.json")) as f:
            info = json.load(f)
        check("layer info has layers", len(info.get("layers", [])) > 0, str(info)[:500])
    except (OSError, ValueError) as e:
        check("layer info parses", False, str(e))

    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--getPlanVersionOnly")
    check("getPlanVersionOnly", rc == 0 and "Plan format version" in out and "Backend" in out
          and "Target" in out and "Libraries" in out, out + err)

    # a damaged plan is reported as a plan error, not parsed as ONNX
    with open(plan, "rb") as f:
        head = f.read(100)
    with open(w("trunc.plan"), "wb") as f:
        f.write(head)
    expect_error(k, "inspect truncated plan", ["inspect", w("trunc.plan")], "KILN_ERR_PLAN")
    expect_error(k, "load truncated plan", ["exec", "--loadEngine=" + w("trunc.plan")],
                 "KILN_ERR_PLAN")

    # ---- inference and summary ----
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--shapes=input:3x3x64x64",
                       "--iterations=20", "--warmUp=0", "--duration=0",
                       "--exportProfile=" + w("prof.json"), "--exportOutput=" + w("out.json"))
    check("run loaded plan", rc == 0, out + err)
    for text in ("Throughput:", "Latency: min =", "median =", "percentile(90%)",
                 "percentile(99%)", "Total Host Walltime", "Iterations: 20", "Warm-up: 1 "):
        check("summary shows " + text, text in out, out)
    try:
        with open(w("out.json")) as f:
            outs = json.load(f)
        check("output at batch 3", outs[0]["name"] == "output" and outs[0]["shape"] == [3, 10]
              and len(outs[0]["values"]) == 30, str(outs)[:500])
        check("output is float and finite", outs[0]["dtype"] == "float"
              and all(abs(v) < 1e30 for v in outs[0]["values"]), str(outs)[:500])
        with open(w("prof.json")) as f:
            prof = json.load(f)
        check("profile counts runs", prof[0].get("count") == 20 and len(prof) > 1
              and "timeMs" in prof[1], str(prof)[:500])
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("exports parse", False, str(e))

    # trtexec's timing: every part of an iteration, several streams, the
    # per-iteration export, running averages, no transfers
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--shapes=input:3x3x64x64",
                       "--iterations=12", "--warmUp=0", "--duration=0", "--infStreams=3",
                       "--avgRuns=4", "--exportTimes=" + w("times.json"),
                       "--exportOutput=" + w("out_streams.json"))
    check("three streams", rc == 0, out + err)
    for text in ("Enqueue Time: min =", "H2D Latency: min =", "Compute Time: min =",
                 "D2H Latency: min =", "Total Compute Time", "Iterations: 36 (all streams)",
                 "Stream 2: Average on 4 runs - Compute latency:"):
        check("three streams show " + text, text in out, out)
    check("three averages a stream", out.count("Average on 4 runs") == 9, out)
    try:
        with open(w("times.json")) as f:
            times = json.load(f)
        check("times: one entry an iteration", len(times) == 36, str(len(times)))
        check("times: 12 a stream", sorted(t["stream"] for t in times) == sorted(list(range(3)) * 12),
              str([t["stream"] for t in times]))
        eps = 1e-3
        order_ok = all(t["startH2dMs"] <= t["endH2dMs"] + eps
                       and t["endH2dMs"] == t["startComputeMs"]
                       and t["startComputeMs"] <= t["endComputeMs"] + eps
                       and t["endComputeMs"] == t["startD2hMs"]
                       and t["startD2hMs"] <= t["endD2hMs"] + eps
                       and abs(t["latencyMs"] - (t["h2dMs"] + t["computeMs"] + t["d2hMs"])) < eps
                       and t["computeMs"] > 0 and t["startEnqMs"] <= t["endEnqMs"]
                       for t in times)
        check("times: the parts in order and adding up", order_ok, str(times[:2]))
        starts = [t["startEnqMs"] for t in times]
        check("times: in the order they started", starts == sorted(starts), str(starts[:5]))
        with open(w("out.json")) as a, open(w("out_streams.json")) as b:
            check("outputs the same with three streams", json.load(a) == json.load(b))
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("times export parses", False, str(e))
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--shapes=input:3x3x64x64",
                       "--iterations=5", "--warmUp=0", "--duration=0", "--noDataTransfers",
                       "--useSpinWait", "--idleTime=1", "--streams=2",
                       "--exportTimes=" + w("times2.json"))
    check("no transfers, spin wait, idle time, --streams", rc == 0 and "Iterations: 10" in out,
          out + err)
    try:
        with open(w("times2.json")) as f:
            times = json.load(f)
        check("no transfers: no copy time", len(times) == 10 and all(
            t["h2dMs"] == 0 and t["d2hMs"] == 0 and t["latencyMs"] == t["computeMs"]
            for t in times), str(times[:2]))
        by = [[t for t in times if t["stream"] == s] for s in (0, 1)]
        gaps = [b["startEnqMs"] - a["endEnqMs"] for s in by for a, b in zip(s, s[1:])]
        check("idle time between iterations", gaps and min(gaps) >= 0.9, str(gaps))
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("times export parses (no transfers)", False, str(e))
    check("averages only when asked", "Average on" not in out, out)
    expect_error(k, "zero streams", ["exec", m, "--infStreams=0"], "--infStreams")
    expect_error(k, "zero avgRuns", ["exec", m, "--avgRuns=0"], "--avgRuns")
    expect_error(k, "negative idle time", ["exec", m, "--idleTime=-1"], "--idleTime")
    expect_error(k, "times into a missing folder",
                 ["exec", "--loadEngine=" + plan, "--shapes=input:1x3x64x64", "--iterations=1",
                  "--warmUp=0", "--duration=0", "--exportTimes=" + w("nodir/t.json")],
                 "nodir/t.json")

    # more trtexec flags: plan load timing, device choice, accepted and refused ones
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--timeDeserialize")
    check("--timeDeserialize", rc == 0 and "Total deserialization time = " in out
          and "Timing trace" not in out, out + err)
    rc, out, err = run(k, "exec", m, "--timeDeserialize", "--profilingVerbosity=detailed",
                       "--sparsity=disable")
    check("--timeDeserialize after a build", rc == 0 and "Total deserialization time" in out,
          out + err)
    expect_error(k, "--timeDeserialize on a damaged plan",
                 ["exec", "--loadEngine=" + w("trunc.plan"), "--timeDeserialize"], "KILN_ERR_PLAN")
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--device=0", "--shapes=input:1x3x64x64",
                       "--iterations=1", "--warmUp=0", "--duration=0")
    check("--device=0", rc == 0 and "CUDA_VISIBLE_DEVICES=0" in out, out + err)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="3,7")
    p = subprocess.run([k, "exec", "--loadEngine=" + plan, "--device=1", "--shapes=input:1x3x64x64",
                        "--iterations=1", "--warmUp=0", "--duration=0"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    check("--device counts within CUDA_VISIBLE_DEVICES", p.returncode == 0
          and "CUDA_VISIBLE_DEVICES=7" in p.stdout, p.stdout + p.stderr)
    env["CUDA_VISIBLE_DEVICES"] = "3"
    p = subprocess.run([k, "exec", m, "--device=1"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=240)
    check("--device beyond CUDA_VISIBLE_DEVICES", p.returncode != 0
          and "lists no device 1" in p.stderr, p.stdout + p.stderr)
    expect_error(k, "negative device", ["exec", m, "--device=-1"], "--device")
    # a float model under --fp8 without --calib: FP8 needs scales
    expect_error(k, "fp8 without scales refused", ["exec", m, "--fp8"], "needs scales")
    expect_error(k, "int4 refused", ["exec", m, "--int4"], "not supported yet")
    p = subprocess.run([k, "exec", m, "--int8", "--skipInference"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=240)
    check("--int8 accepted (explicit quantization), --calib pointed to for a float model",
          p.returncode == 0 and "--calib" in p.stderr, p.stdout + p.stderr)
    expect_error(k, "sparsity refused", ["exec", m, "--sparsity=enable"], "not supported")
    expect_error(k, "bad profiling verbosity", ["exec", m, "--profilingVerbosity=loud"], "loud")

    # fixed seed: the same random inputs give the same outputs
    run(k, "exec", "--loadEngine=" + plan, "--shapes=input:3x3x64x64", "--iterations=1",
        "--warmUp=0", "--duration=0", "--exportOutput=" + w("out2.json"))
    try:
        with open(w("out.json")) as a, open(w("out2.json")) as b:
            check("random inputs are reproducible", json.load(a) == json.load(b))
    except (OSError, ValueError) as e:
        check("second export parses", False, str(e))

    # --channelsLast: the same outputs from NHWC convolutions (oneDNN's NHWC
    # tactics or the reference), reformats at the edges
    rc, out, err = run(k, "exec", m, "--channelsLast", "--shapes=input:3x3x64x64",
                       "--iterations=1", "--warmUp=0", "--duration=0",
                       "--exportOutput=" + w("out_cl.json"), "--saveEngine=" + w("cl.plan"))
    check("build and run channels-last", rc == 0, out + err)
    try:
        with open(w("out.json")) as a, open(w("out_cl.json")) as b:
            va, vb = json.load(a)[0]["values"], json.load(b)[0]["values"]
            worst = max(abs(x - y) for x, y in zip(va, vb)) if va else 1.0
            check("channels-last outputs match", len(va) == len(vb) and worst < 1e-4,
                  "max difference %g" % worst)
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("channels-last export parses", False, str(e))
    rc, out, err = run(k, "inspect", w("cl.plan"))
    check("inspect shows the reformat", rc == 0 and "reformat NCHW->NHWC" in out, out + err)
    expect_error(k, "strongly typed refuses --fp16",
                 ["exec", m, "--stronglyTyped", "--fp16", "--skipInference"], "strongly typed")
    expect_error(k, "optimization level out of range",
                 ["exec", m, "--builderOptimizationLevel=7", "--skipInference"],
                 "--builderOptimizationLevel")

    # loaded inputs: zeros in, and a file of the wrong size refused
    with open(w("zeros.bin"), "wb") as f:
        f.write(bytes(4 * 2 * 3 * 64 * 64))
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--shapes=input:2x3x64x64",
                       "--loadInputs=input:" + w("zeros.bin"), "--iterations=1", "--warmUp=0",
                       "--duration=0", "--exportOutput=" + w("zeros.json"))
    check("loadInputs", rc == 0 and "Loaded input 'input'" in out, out + err)
    expect_error(k, "loadInputs size mismatch",
                 ["exec", "--loadEngine=" + plan, "--shapes=input:1x3x64x64",
                  "--loadInputs=input:" + w("zeros.bin"), "--iterations=1", "--duration=0"],
                 "bytes")
    expect_error(k, "loadInputs unknown name",
                 ["exec", "--loadEngine=" + plan, "--loadInputs=nosuch:" + w("zeros.bin"),
                  "--iterations=1", "--duration=0"], "nosuch")
    expect_error(k, "profile index out of range",
                 ["exec", "--loadEngine=" + plan, "--profile=3", "--iterations=1",
                  "--duration=0"], "--profile")
    rc, out, err = run(k, "exec", "--loadEngine=" + plan, "--shapes=input:8x3x64x64",
                       "--iterations=1", "--warmUp=0", "--duration=0")
    check("batch outside the profile refused", rc != 0, out + err)

    # build and run in one go, with --duration as the bound
    rc, out, err = run(k, "exec", m, "--shapes=input:1x3x64x64", "--duration=0.2",
                       "--iterations=1", "--warmUp=50", "--threads=1", "--percentile=50,99.9")
    check("build+run with duration", rc == 0 and "percentile(99.9%)" in out, out + err)

    # two profiles; run with the second one, inside it and outside the first
    plan2 = w("tiny2.plan")
    rc, out, err = run(k, "exec", m, "--saveEngine=" + plan2, "--skipInference",
                       "--minShapes=input:1x3x64x64", "--optShapes=input:1x3x64x64",
                       "--maxShapes=input:2x3x64x64",
                       "--minShapes=input:4x3x64x64", "--optShapes=input:6x3x64x64",
                       "--maxShapes=input:8x3x64x64",
                       "--memPoolSize=workspace:64M,dlaSRAM:1")
    check("build two profiles", rc == 0 and "dlaSRAM" in err, out + err)
    rc, out, err = run(k, "inspect", plan2)
    check("inspect lists two profiles", rc == 0 and "Optimization profiles (2)" in out, out + err)
    rc, out, err = run(k, "exec", "--loadEngine=" + plan2, "--profile=1", "--iterations=2",
                       "--warmUp=0", "--duration=0")
    check("run profile 1 at its opt shape", rc == 0 and "6x3x64x64" in out, out + err)
    rc, out, err = run(k, "exec", "--loadEngine=" + plan2, "--profile=1",
                       "--shapes=input:1x3x64x64", "--iterations=1", "--duration=0")
    check("profile 1 refuses batch 1", rc != 0, out + err)

    # timing cache: written by the first build, read by the second
    cache = w("timing.cache")
    rc, out, err = run(k, "exec", m, "--shapes=input:1x3x64x64", "--skipInference",
                       "--timingCacheFile=" + cache)
    check("timing cache written", rc == 0 and os.path.exists(cache), out + err)
    rc, out, err = run(k, "exec", m, "--shapes=input:1x3x64x64", "--skipInference",
                       "--timingCacheFile=" + cache)
    check("timing cache reused", rc == 0, out + err)
    # reference tactics, layer precisions, graph switches
    rc, out, err = run(k, "exec", m, "--shapes=input:1x3x64x64", "--refTactics",
                       "--dumpLayerInfo", "--noCudaGraph", "--iterations=1", "--warmUp=0",
                       "--duration=0", "--layerPrecisions=fc:fp32",
                       "--precisionConstraints=obey")
    check("refTactics picks ref everywhere", rc == 0 and " ref " in out
          and "dnnl" not in out, out + err)
    expect_error(k, "bad layer precision", ["exec", m, "--layerPrecisions=fc:fp8"], "fp8")
    expect_error(k, "bad precision constraint", ["exec", m, "--precisionConstraints=maybe"],
                 "--precisionConstraints")

    # I/O types as trtexec's --inputIOFormats / --outputIOFormats: float16 in
    # and out of an FP16 plan (no casts at the edges), the output exported
    rc, out, err = run(k, "exec", m, "--shapes=input:1x3x64x64", "--fp16",
                       "--layerPrecisions=*:fp16",
                       "--inputIOFormats=fp16:chw", "--outputIOFormats=fp16:chw",
                       "--dumpLayerInfo", "--iterations=1", "--warmUp=0", "--duration=0",
                       "--exportOutput=" + w("io16.json"))
    try:
        with open(w("io16.json")) as f:
            exp = json.load(f)
        check("fp16 I/O formats build and run without edge casts",
              rc == 0 and "Cast" not in out and exp[0]["shape"] == [1, 10], out + err)
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("fp16 I/O export parses", False, str(e) + out + err)
    # one float entry for all inputs leaves the shape-tensor input as int64
    rc, out, err = run(k, "exec", "--onnx=" + os.path.join(HERE, "shape_tensor.onnx"),
                       "--minShapes=target_shape:1x24", "--optShapes=target_shape:4x6",
                       "--maxShapes=target_shape:24x1", "--inputIOFormats=fp16:chw",
                       "--outputIOFormats=fp16", "--iterations=1", "--warmUp=0", "--duration=0",
                       "--saveEngine=" + w("st16.plan"))
    rc2, out2, err2 = run(k, "inspect", w("st16.plan"))
    check("one float I/O entry for all leaves int64 inputs alone",
          rc == 0 and rc2 == 0 and "float16  2x12" in out2 and "int64    2" in out2,
          out + err + out2 + err2)
    expect_error(k, "I/O format other than chw", ["exec", m, "--outputIOFormats=fp16:hwc8"],
                 "linear tensors only")
    expect_error(k, "I/O formats count", ["exec", m, "--inputIOFormats=fp16,fp16"],
                 "the network has 1 input")
    expect_error(k, "I/O type a float input cannot take", ["exec", m, "--inputIOFormats=int64"],
                 "input 'input' is float")
    expect_error(k, "unknown I/O type", ["exec", m, "--outputIOFormats=fp17:chw"], "fp17")

    # a shape-tensor input: the shapes given for it are its values (trtexec's rule)
    st_model = os.path.join(HERE, "shape_tensor.onnx")
    st_plan = w("shape_tensor.plan")
    rc, out, err = run(k, "exec", "--onnx=" + st_model, "--saveEngine=" + st_plan,
                       "--minShapes=target_shape:1x24", "--optShapes=target_shape:4x6",
                       "--maxShapes=target_shape:24x1", "--iterations=1", "--warmUp=0",
                       "--duration=0", "--exportOutput=" + w("st_opt.json"))
    check("shape tensor built and run at its opt values",
          rc == 0 and "shape tensor with values 4x6" in out, out + err)
    rc, out, err = run(k, "exec", "--loadEngine=" + st_plan, "--shapes=target_shape:3x8",
                       "--iterations=1", "--warmUp=0", "--duration=0",
                       "--exportOutput=" + w("st_run.json"))
    try:
        with open(w("st_opt.json")) as f:
            a = json.load(f)
        with open(w("st_run.json")) as f:
            b = json.load(f)
        check("shape tensor values decide the output shape",
              rc == 0 and a[0]["shape"] == [4, 6] and b[0]["shape"] == [3, 8], out + err)
    except (OSError, ValueError, KeyError, IndexError) as e:
        check("shape tensor exports parse", False, str(e) + out + err)

    # ---- inspect ----
    rc, out, err = run(k, "inspect", plan)
    for text in ("Plan ", "I/O tensors", "input", "output", "Optimization profiles",
                 "Layers after fusion", "tactic", "precision", "activation arena",
                 "all activations", "workspace"):
        check("inspect plan shows " + text, rc == 0 and text in out, out + err)
    rc, out, err = run(k, "inspect", MODEL, "--shapes=input:1x3x64x64")
    check("inspect onnx builds in memory", rc == 0 and "in memory" in out
          and "Layers after fusion" in out, out + err)
    rc, out, err = run(k, "inspect", plan, "--json")
    try:
        check("inspect --json", rc == 0 and "layers" in json.loads(out), out[:500] + err)
    except ValueError:
        check("inspect --json parses", False, out[:500])
    return finish()


def finish():
    print("%d passed, %d failed" % (passed, len(failed)))
    for f in failed:
        print("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
