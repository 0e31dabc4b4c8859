#!/usr/bin/env python3
"""run_calib_test.py - built-in INT8 calibration end to end (kiln exec --int8
--calib): the float models of gen_quant.py (a small CNN; a MatMul block with
an activation-activation MatMul), calibrated by kiln on fixed random batches
with each calibrator (percentile at 99.9), against kiln's FP32 plan of the same model.

Checks per model and calibrator (minmax, percentile, entropy):
  - the plan has the expected number of quantized layers (kiln::QConv /
    kiln::QMatMul, kiln inspect --json);
  - every output is within REL_TOL of the FP32 plan's, relative to the
    output's largest magnitude;
  - the cache file has one 'tensor: scale' line per quantized input, and
    min-max's scale of the network input is max|x| / 127 of the batches;
  - rebuilding from the cache (--calib=FILE) gives the same outputs bit for
    bit and the same layers and scales;
  - --layerPrecisions=LAYER:fp32 keeps that layer in float (one quantized
    layer fewer).
gen_models' small ResNet-50 and BERT too, against twice the error of ONNX
Runtime's own quantize_static (s8 symmetric min-max) on the same input.
And --calib without --int8, or a folder without batches, is refused.

Data: numpy default_rng with fixed seeds (7: calibration, 11: the run).
Exit status: 0 pass, 1 fail, 77 skipped (no numpy / onnx).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

SKIP = 77
try:
    import numpy as np
    import onnx
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_quant  # noqa: E402

BATCH = 2
N_CALIB = 8
REL_TOL = 0.05
# model: (quantized layers, a layer to keep in float, its op there, .npz or .npy batches)
CASES = {"cnn": (8, "fc", "npz"), "mlp": (5, "scores", "npy")}
ALGOS = ("minmax", "percentile", "entropy")


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kiln_exec(kiln, path, shape, xfile, out, extra):
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=x:" + shape, "--loadInputs=x:" + xfile,
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0",
             "--threads=2"] + extra)
    if p.returncode != 0:
        return None, p.stdout[-3000:]
    z = np.load(out)
    return {k: z[k] for k in z.files}, p.stdout


def layers(kiln, path, shape, extra):
    p = run([kiln, "inspect", path, "--json", "--shapes=x:" + shape, "--threads=2"] + extra)
    if p.returncode != 0:
        return None, p.stdout[-2000:]
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    return rep["layers"], ""


def quantized(ls):
    return [l for l in ls if l["op"] in ("QConv", "QMatMul")]


def check(kiln, work, name):
    fails = []
    nq_want, keep, fmt = CASES[name]
    fn, dims = gen_quant.MODELS[name]
    path = os.path.join(work, name + ".onnx")
    onnx.save(fn(), path)
    shape = "x".join(str(d) for d in (BATCH,) + dims)
    data = os.path.join(work, name + "_calib")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    rng = np.random.default_rng(7)
    amax = 0.0
    for i in range(N_CALIB):
        x = rng.standard_normal((BATCH,) + dims).astype(np.float32)
        amax = max(amax, float(np.max(np.abs(x))))
        if fmt == "npz":
            np.savez(os.path.join(data, "batch%02d.npz" % i), x=x)
        else:
            np.save(os.path.join(data, "batch%02d.npy" % i), x)
    xfile = os.path.join(work, name + "_x.bin")
    np.random.default_rng(11).standard_normal((BATCH,) + dims).astype(np.float32).tofile(xfile)
    ref, err = kiln_exec(kiln, path, shape, xfile, os.path.join(work, name + "_fp32.npz"), [])
    if ref is None:
        return ["%s: FP32 exec failed:\n%s" % (name, err)]
    for algo in ALGOS:
        tag = "%s/%s" % (name, algo)
        cache = os.path.join(work, "%s_%s.cache" % (name, algo))
        if os.path.exists(cache):
            os.remove(cache)
        got, err = kiln_exec(kiln, path, shape, xfile, os.path.join(work, name + "_q.npz"),
                             ["--int8", "--calib=" + data, "--calibAlgo=" + algo,
                              "--calibCache=" + cache] +
                             (["--calibPercentile=99.9"] if algo == "percentile" else []))
        if got is None:
            fails.append("%s: calibrated exec failed:\n%s" % (tag, err))
            continue
        # the cache
        scales = {}
        with open(cache) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    k, v = line.rsplit(":", 1)
                    scales[k] = float(v)
        if not scales or min(scales.values()) <= 0:
            fails.append("%s: bad cache %s: %r" % (tag, cache, scales))
        if algo == "minmax" and abs(scales.get("x", 0) - np.float32(amax / 127)) > 1e-6 * amax / 127:
            fails.append("%s: scale of x %r, max|x|/127 = %r" % (tag, scales.get("x"), amax / 127))
        # accuracy against FP32
        for o, r in ref.items():
            r64 = r.astype(np.float64)
            rel = float(np.max(np.abs(got[o].astype(np.float64) - r64))) / float(np.max(np.abs(r64)))
            ok = rel <= REL_TOL
            print("%-16s %-8s max|int8 - fp32| / max|fp32| = %.4f  %s" % (tag, o, rel, "ok" if ok else "FAIL"))
            if not ok:
                fails.append("%s %s: relative error %.4f > %.2f" % (tag, o, rel, REL_TOL))
        # the plan's layers, from the cache
        ls, err = layers(kiln, path, shape, ["--int8", "--calib=" + cache])
        if ls is None:
            fails.append("%s: inspect from the cache failed:\n%s" % (tag, err))
            continue
        q = quantized(ls)
        print("%-16s %d layers, %d quantized; %d cache entries" % (tag, len(ls), len(q), len(scales)))
        if len(q) < nq_want:
            fails.append("%s: %d quantized layers, %d expected" % (tag, len(q), nq_want))
        if any("quant" not in l or " zp 0" not in l["quant"] for l in q):
            fails.append("%s: a quantized layer without its scales in inspect" % tag)
        # reuse: the same bits
        again, err = kiln_exec(kiln, path, shape, xfile, os.path.join(work, name + "_q2.npz"),
                               ["--int8", "--calib=" + cache])
        if again is None:
            fails.append("%s: exec from the cache failed:\n%s" % (tag, err))
        elif any(not np.array_equal(again[o], got[o]) for o in got):
            fails.append("%s: the cache's plan differs from the calibrated plan" % tag)
        # per-layer fallback
        ls2, err = layers(kiln, path, shape, ["--int8", "--calib=" + cache,
                                              "--layerPrecisions=%s:fp32" % keep])
        if ls2 is None:
            fails.append("%s: inspect with a float layer failed:\n%s" % (tag, err))
        else:
            q2 = quantized(ls2)
            kept = [l for l in q2 if keep in l["name"].split(" + ")]
            if len(q2) != len(q) - 1 or kept:
                fails.append("%s: --layerPrecisions=%s:fp32 left %d quantized layers (of %d)%s"
                             % (tag, keep, len(q2), len(q), ", itself among them" if kept else ""))
    return fails


# gen_models' small ResNet-50 and BERT (int64 ids and mask: .npz batches of
# several inputs), each calibrator against the FP32 plan; the bound is twice
# the error of ONNX Runtime's own quantize_static (s8 symmetric, min-max,
# per-channel weights: TensorRT's scheme) on the same model and input, or
# ZOO_FLOOR when that is smaller
ZOO = {"resnet50": 21, "bert": 17}  # and the quantized layers each must reach
ZOO_FLOOR = 0.05


def check_zoo(kiln, work, name):
    try:
        import onnxruntime as ort
    except ImportError:
        print("zoo %s: skipped (no onnxruntime)" % name)
        return []
    fails = []
    qpath, m = gen_quant.make_zoo(work, name, "s8sym")
    path = os.path.join(work, "zoo_%s.onnx" % name)
    data = os.path.join(work, "zoo_%s_calib" % name)
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    for k in range(4):
        np.savez(os.path.join(data, "b%d.npz" % k), **gen_quant.zoo_feeds(m, 100 + k))
    feeds = gen_quant.zoo_feeds(m, 5)
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    files = []
    for k, v in feeds.items():
        f = os.path.join(work, "zoo_%s.%s.bin" % (name, k))
        v.tofile(f)
        files.append("%s:%s" % (k, f))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ort_q = dict(zip(names, sess.run(names, feeds)))
    outs = {}
    for tag, extra in [("fp32", [])] + [(a, ["--int8", "--calib=" + data, "--calibAlgo=" + a,
                                             "--calibCache=" + os.path.join(work, "zoo_%s_%s.cache" % (name, a))])
                                        for a in ALGOS]:
        out = os.path.join(work, "zoo_%s_%s.npz" % (name, tag))
        p = run([kiln, "exec", "--onnx=" + path, "--shapes=" + shapes, "--loadInputs=" + ",".join(files),
                 "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0",
                 "--threads=2"] + extra)
        if p.returncode != 0:
            return ["zoo %s/%s: kiln exec failed:\n%s" % (name, tag, p.stdout[-2000:])]
        z = np.load(out)
        outs[tag] = {k: z[k] for k in z.files}
    p = run([kiln, "inspect", path, "--json", "--shapes=" + shapes, "--threads=2", "--int8",
             "--calib=" + os.path.join(work, "zoo_%s_minmax.cache" % name)])
    if p.returncode != 0:
        return ["zoo %s: inspect from the cache failed:\n%s" % (name, p.stdout[-2000:])]
    nq = len(quantized(json.loads(p.stdout[p.stdout.index("{"):])["layers"]))
    print("zoo %-9s %d quantized layers" % (name, nq))
    if nq < ZOO[name]:
        fails.append("zoo %s: %d quantized layers, %d expected" % (name, nq, ZOO[name]))
    for o in names:
        f = outs["fp32"][o].astype(np.float64)
        mag = float(np.max(np.abs(f)))
        ort_rel = float(np.max(np.abs(ort_q[o] - f))) / mag
        lim = max(2 * ort_rel, ZOO_FLOOR)
        for a in ALGOS:
            rel = float(np.max(np.abs(outs[a][o].astype(np.float64) - f))) / mag
            ok = rel <= lim
            print("zoo %-9s %-10s %-18s rel. error %.4f (ORT quantize_static %.4f, limit %.4f)  %s"
                  % (name, a, o, rel, ort_rel, lim, "ok" if ok else "FAIL"))
            if not ok:
                fails.append("zoo %s/%s %s: relative error %.4f > %.4f" % (name, a, o, rel, lim))
    return fails


def refusals(kiln, work):
    fails = []
    path = os.path.join(work, "cnn.onnx")
    empty = os.path.join(work, "empty_calib")
    os.makedirs(empty, exist_ok=True)
    for extra, text in ((["--calib=" + empty], "--calib needs --int8"),
                        (["--int8", "--calib=" + empty], "no .npy or .npz")):
        p = run([kiln, "exec", "--onnx=" + path, "--shapes=x:2x3x16x16", "--iterations=1",
                 "--warmUp=0", "--duration=0"] + extra)
        if p.returncode == 0 or text not in p.stdout:
            fails.append("%s: expected a failure with %r, got rc %d:\n%s"
                         % (" ".join(extra), text, p.returncode, p.stdout[-1000:]))
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    fails = []
    for name in CASES:
        fails += check(args.kiln, args.work, name)
    for name in ZOO:
        fails += check_zoo(args.kiln, args.work, name)
    fails += refusals(args.kiln, args.work)
    for f in fails:
        print("FAIL: " + f)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
