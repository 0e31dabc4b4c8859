#!/usr/bin/env python3
"""run_cli_flags_tests.py - the command-line flags of issue 34, meaning what
TensorRT's and Polygraphy's mean. Parts (--part, default all):

  precision  --fp16/--bf16/--best allow, the builder keeps the faster per
             layer and records why (kiln inspect); --layerPrecisions with
             --precisionConstraints=obey and "*" force; timing off: the rule
  plugins    compare and debug take --plugins/--staticPlugins, every tool
             takes --pluginNamespace, plugin layers take FP16
  exit       every exit status docs/cli.md lists, per command; doctor's header
             row fails a truncated plan naming the offset
  shapes     shape-tensor values for every input kind through --shapes and
             --loadInputs; inputs that decide no shape are not shape tensors;
             messages name the flag that fixes them
  polygraphy Polygraphy's spellings in kiln compare and its JSON results

Every check is deterministic: the precision checks read the times the plan
recorded (the choice must be the faster of them), never absolute timings.
Needs numpy and onnx (exit 77 without them)."""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

FAILS = []
PASSED = [0]
QUICK = ["--duration=0", "--iterations=1", "--warmUp=0"]


def run(*args, timeout=240):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(what, cond, detail=""):
    if cond:
        PASSED[0] += 1
    else:
        FAILS.append(what + (":\n" + detail[-2500:] if detail else ""))
        print("FAIL: " + what)


def save(path, nodes, ins, outs, inits=(), opset=17):
    g = h.make_graph(nodes, os.path.basename(path), ins, outs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def vi(name, t, shape):
    return h.make_tensor_value_info(name, t, shape)


def mlp(path, n=64, width=256):
    rng = np.random.default_rng(3)
    w1 = h.make_tensor("w1", T.FLOAT, [width, width], rng.standard_normal(width * width) * 0.05)
    w2 = h.make_tensor("w2", T.FLOAT, [width, width], rng.standard_normal(width * width) * 0.05)
    b = h.make_tensor("b", T.FLOAT, [width], rng.standard_normal(width) * 0.1)
    return save(path, [h.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
                       h.make_node("Add", ["h1", "b"], ["h2"], name="bias"),
                       h.make_node("Relu", ["h2"], ["h3"], name="act"),
                       h.make_node("MatMul", ["h3", "w2"], ["h4"], name="fc2"),
                       h.make_node("Sigmoid", ["h4"], ["y"], name="out")],
                [vi("x", T.FLOAT, [n, width])], [vi("y", T.FLOAT, [n, width])], [w1, w2, b])


def layers(k, *args):
    rc, out, err = run(k, "inspect", *args, "--json")
    try:  # the report follows the build's [I] lines
        return rc, json.loads(out[out.index("\n{") + 1:] if not out.startswith("{")
                              else out)["layers"], out + err
    except (ValueError, KeyError) as e:
        return rc, [], "%s\n%s%s" % (e, out, err)


# ---------------------------------------------------------------- precision
def part_precision(k, w):
    m = mlp(w("mlp.onnx"))
    for flags in (["--fp16"], ["--bf16"], ["--best"]):
        rc, ls, det = layers(k, m, *flags)
        timed = [l for l in ls if l.get("precision_choice", {}).get("why") == "timed"]
        check("%s: layers are timed (exit 0, a record per eligible layer)" % flags[0],
              rc == 0 and len(timed) >= 2, det)
        for l in timed:
            ms = l["precision_choice"]["ms"]
            mine = {"float": ms["float"], "float16": ms["float16"],
                    "bfloat16": ms["bfloat16"]}[l["precision"]]
            others = [v for v in ms.values() if v >= 0]
            check("%s: layer '%s' kept %s, the fastest of %s" % (flags[0], l["name"],
                                                                  l["precision"], ms),
                  mine >= 0 and mine <= min(others), det)
    # an FP16 plan on the CPU is never the slower choice per layer, so the
    # whole plan keeps FP32 wherever FP16 measured slower: the records say
    rc, ls, det = layers(k, m, "--fp16")
    slow16 = [l for l in ls if l.get("precision_choice", {}).get("ms", {}).get("float16", -1) >
              l.get("precision_choice", {}).get("ms", {}).get("float", 1e30)]
    check("--fp16: no layer runs in FP16 where FP16 measured slower",
          all(l["precision"] == "float" for l in slow16), det)
    # forcing: "*" with obey, a per-layer fp32 exception
    rc, ls, det = layers(k, m, "--fp16", "--layerPrecisions=*:fp16,act:fp32",
                         "--precisionConstraints=obey")
    fc2 = next((l for l in ls if "fc2" in l["name"]), {})
    act = next((l for l in ls if "act" in l["name"]), {})  # fused: fc1 + bias + act
    check("--layerPrecisions=*:fp16 --precisionConstraints=obey forces FP16",
          fc2.get("precision") == "float16" and
          fc2.get("precision_choice", {}).get("why") == "forced", det)
    check("--layerPrecisions=act:fp32 beats '*' (and keeps the layer act is fused into)",
          act.get("precision") == "float" and
          act.get("precision_choice", {}).get("why") == "forced", det)
    # --stronglyTyped: the network's types, nothing chosen
    rc, ls, det = layers(k, m, "--stronglyTyped")
    check("--stronglyTyped: no precision choices", rc == 0 and
          not any("precision_choice" in l for l in ls), det)
    # timing off: the rule (FP32 on the CPU), recorded as such
    rc, ls, det = layers(k, m, "--fp16", "--noTiming")
    rules = [l for l in ls if l.get("precision_choice", {}).get("why") == "rule"]
    check("--fp16 --noTiming: the rule keeps FP32 on the CPU",
          rc == 0 and rules and all(l["precision"] == "float" for l in rules), det)
    # the table shows the choice
    rc, out, err = run(k, "inspect", m, "--fp16")
    check("inspect shows 'chosen' with the timed candidates",
          rc == 0 and "chosen" in out and "timed fp32" in out, out + err)
    # a timing cache keeps the precision timings: the rebuild records the same
    tc = w("tc.cache")
    rc, ls1, det = layers(k, m, "--fp16", "--timingCacheFile=" + tc)
    rc, ls2, det2 = layers(k, m, "--fp16", "--timingCacheFile=" + tc)
    check("--timingCacheFile: the rebuild reuses the precision timings",
          [l.get("precision_choice") for l in ls1] == [l.get("precision_choice") for l in ls2],
          det + det2)


# ---------------------------------------------------------------- plugins
def part_plugins(k, w, plugins, models):
    act = os.path.join(plugins, "libkiln_plugin_custom_act.so")
    model = os.path.join(models, "custom_act.onnx")
    badns = os.path.join(models, "custom_act_badns.onnx")  # plugin_namespace "nope"
    if not (os.path.exists(act) and os.path.exists(model)):
        check("plugin library and models exist", False, act + " " + model)
        return
    shapes = "--shapes=x:3x17"
    rc, out, err = run(k, "compare", model, "--plugins=" + act, shapes)
    check("compare --plugins runs a plugin model (kiln reference for plugin layers)",
          rc == 0 and "PASSED" in out and "is a plugin" in err, out + err)
    rc, out, err = run(k, "compare", model, "--staticPlugins=" + act, shapes, "--fp16",
                       "--layerPrecisions=*:fp16", "--atol=1e-2", "--rtol=1e-2")
    check("compare --staticPlugins with FP16 forced", rc == 0, out + err)
    rc, out, err = run(k, "debug", "precision", model, "--plugins=" + act, shapes, "--fp16",
                       "--atol=1e-2", "--rtol=1e-2")
    check("debug precision --plugins", rc == 0, out + err)
    red = w("reduced.onnx")
    rc, out, err = run(k, "debug", "reduce", model, "--staticPlugins=" + act,
                       "--check=" + shapes + " --atol=1e-3", "-o", red)
    check("debug reduce --staticPlugins (passed on to its compare runs)",
          rc == 1 and "nothing to reduce" in err, out + err)
    # a plugin layer takes FP16 where supports_format allows it
    rc, ls, det = layers(k, model, "--staticPlugins=" + act, shapes,
                         "--layerPrecisions=act:fp16")
    pl = [l for l in ls if l["op"] == "CustomAct"]
    check("--layerPrecisions runs the plugin layer in FP16",
          pl and pl[0]["precision"] == "float16", det)
    rc, ls, det = layers(k, model, "--staticPlugins=" + act, shapes, "--fp16")
    pl = [l for l in ls if l["op"] == "CustomAct"]
    check("--fp16 times the plugin layer in FP16 too",
          pl and pl[0].get("precision_choice", {}).get("ms", {}).get("float16", -1) >= 0, det)
    # namespaces: exec, compare, doctor, manifest
    plan = w("ns.kiln")
    rc, out, err = run(k, "exec", "--onnx=" + badns, "--staticPlugins=" + act, "--shapes=x:5",
                       *QUICK)
    check("a namespaced plugin node needs the namespace", rc == 1 and "namespace 'nope'" in err,
          out + err)
    rc, out, err = run(k, "exec", "--onnx=" + badns, "--pluginNamespace=nope",
                       "--staticPlugins=" + act, "--shapes=x:5", "--saveEngine=" + plan, *QUICK)
    check("exec --pluginNamespace builds and runs it", rc == 0 and "PASSED" in out, out + err)
    rc, out, err = run(k, "compare", badns, "--pluginNamespace=nope", "--plugins=" + act,
                       "--shapes=x:5")
    check("compare --pluginNamespace", rc == 0 and "PASSED" in out, out + err)
    rc, out, err = run(k, "doctor", plan, "--pluginNamespace=nope", "--plugins=" + act)
    check("doctor --pluginNamespace", rc == 0 and "every check passed" in out, out + err)
    rc, out, err = run(k, "doctor", plan, "--plugins=" + act)
    check("doctor without the namespace fails", rc == 1, out + err)
    rc, out, err = run(k, "manifest", plan, "--pluginNamespace=nope", "--plugins=" + act)
    check("manifest --pluginNamespace describes the library",
          rc == 0 and '"nope"' in out and "CustomAct" in out, out + err)
    rc, out, err = run(k, "exec", "--onnx=" + model, "--pluginNamespace", shapes)
    check("--pluginNamespace without a value is a usage error", rc == 2, out + err)


# ---------------------------------------------------------------- exit statuses
def part_exit(k, w, plugins):
    m = mlp(w("exit.onnx"), n=2, width=8)
    plan = w("exit.kiln")
    cases = [
        # (what, args, expected status)
        ("exec: success", ["exec", "--onnx=" + m, "--saveEngine=" + plan] + QUICK, 0),
        ("exec: unknown flag", ["exec", "--onnx=" + m, "--bogus"], 2),
        ("exec: bad value", ["exec", "--onnx=" + m, "--iterations=x"], 2),
        ("exec: unknown command", ["frobnicate"], 2),
        ("exec: model does not parse", ["exec", "--onnx=" + w("missing.onnx")], 1),
        ("exec: shape outside the profile", ["exec", "--loadEngine=" + plan,
                                             "--shapes=x:3x8"] + QUICK, 1),
        ("exec: plugin library does not load", ["exec", "--onnx=" + m,
                                                "--staticPlugins=" + w("none.so")] + QUICK, 1),
        ("exec: damaged plan", ["exec", "--loadEngine=" + w("trunc.kiln")], 1),
        ("inspect: success", ["inspect", plan], 0),
        ("inspect: not a plan or model", ["inspect", w("missing.onnx")], 1),
        ("inspect: bad flag", ["inspect", plan, "--bogus"], 2),
        ("compare: pass", ["compare", m], 0),
        ("compare: out of tolerance", ["compare", m, "--fp16", "--layerPrecisions=*:fp16",
                                       "--atol=1e-9", "--rtol=1e-9"], 1),
        ("compare: bad flag", ["compare", m, "--atol=x"], 2),
        ("compare: build failure", ["compare", w("missing.onnx")], 3),
        ("compare: plugin library does not load", ["compare", m, "--plugins=" + w("none.so")],
         3),
        ("doctor: every check passes", ["doctor", plan], 0),
        ("doctor: a failing check", ["doctor", w("trunc.kiln")], 1),
        ("doctor: bad argument", ["doctor", plan, "--bogus"], 2),
        ("manifest: success", ["manifest", plan], 0),
        ("manifest: unreadable plan", ["manifest", w("missing.kiln")], 1),
        ("manifest: bad argument", ["manifest", plan, "--bogus"], 2),
        ("plugins list: success", ["plugins", "list"], 0),
        ("debug precision: needs --fp16", ["debug", "precision", m], 2),
        ("debug rewrite: success", ["debug", "rewrite", m, "-o", w("rw.onnx")], 0),
        ("help", ["help"], 0),
        ("--version", ["--version"], 0),
    ]
    for what, args, want in cases:
        if args[0] == "exec" and "--loadEngine=" + w("trunc.kiln") in args or \
                args[:2] == ["doctor", w("trunc.kiln")]:
            with open(plan, "rb") as f:
                data = f.read()
            with open(w("trunc.kiln"), "wb") as f:
                f.write(data[:len(data) // 2])
        rc, out, err = run(k, *args)
        check("exit status %d: %s" % (want, what), rc == want,
              "exit %d\n%s%s" % (rc, out, err))
    rc, out, err = run(k, "doctor", w("trunc.kiln"))
    size = os.path.getsize(plan)
    check("doctor: a truncated plan fails at the header row, naming the offset",
          rc == 1 and "[FAIL] plan header" in out and
          "byte offset %d" % (size // 2) in out and "%d bytes" % size in out, out + err)
    # the exit statuses the docs list are the ones tested here
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "docs", "cli.md")) as f:
        doc = f.read()
    check("docs/cli.md lists exit statuses 0, 1, 2 and compare's 3",
          "| 0 |" in doc and "| 1 |" in doc and "| 2 |" in doc and "3 for a build or run" in doc)


# ---------------------------------------------------------------- shapes
def part_shapes(k, w):
    resize = save(w("resize.onnx"), [h.make_node("Resize", ["x", "", "scales"], ["y"],
                                                 mode="nearest")],
                  [vi("x", T.FLOAT, [1, 1, 4, 4]), vi("scales", T.FLOAT, [4])],
                  [vi("y", T.FLOAT, None)])
    onehot = save(w("onehot.onnx"), [h.make_node("OneHot", ["idx", "depth", "vals"], ["y"])],
                  [vi("idx", T.INT64, [3]), vi("depth", T.INT64, [])], [vi("y", T.FLOAT, None)],
                  [h.make_tensor("vals", T.FLOAT, [2], [0, 1])])
    dataonly = save(w("dataonly.onnx"),
                    [h.make_node("CumSum", ["x", "axis"], ["c"]),
                     h.make_node("Dropout", ["c", "ratio"], ["d"]),
                     h.make_node("Trilu", ["d", "k"], ["y"])],
                    [vi("x", T.FLOAT, [3, 3]), vi("axis", T.INT64, []), vi("ratio", T.FLOAT, []),
                     vi("k", T.INT64, [])], [vi("y", T.FLOAT, None)])
    nms = save(w("nms.onnx"), [h.make_node("NonMaxSuppression",
                                           ["boxes", "scores", "maxout", "iou", "thr"], ["y"])],
               [vi("boxes", T.FLOAT, [1, 6, 4]), vi("scores", T.FLOAT, [1, 1, 6]),
                vi("maxout", T.INT64, [1]), vi("iou", T.FLOAT, [1]), vi("thr", T.FLOAT, [1])],
               [vi("y", T.INT64, None)])
    reshape = save(w("reshape.onnx"), [h.make_node("Reshape", ["x", "shape"], ["y"])],
                   [vi("x", T.FLOAT, [3, 4]), vi("shape", T.INT64, [2])], [vi("y", T.FLOAT, None)])
    one = save(w("one.onnx"), [h.make_node("Reshape", ["x", "shape"], ["y"])],
               [vi("x", T.FLOAT, [5]), vi("shape", T.INT64, [1])], [vi("y", T.FLOAT, None)])

    def shape_of(args, out):
        rc, so, se = run(k, "exec", *args, *QUICK, "--exportOutput=" + out)
        try:
            with open(out) as f:
                return rc, json.load(f)[0]["shape"], so + se
        except (OSError, ValueError, KeyError, IndexError) as e:
            return rc, None, "%s\n%s%s" % (e, so, se)

    rc, shp, det = shape_of(["--onnx=" + resize, "--shapes=scales:1x1x1.5x2"], w("r.json"))
    check("float shape tensor values (Resize scales 1x1x1.5x2)", rc == 0 and shp == [1, 1, 6, 8],
          det)
    rc, shp, det = shape_of(["--onnx=" + onehot, "--shapes=depth:5"], w("o.json"))
    check("scalar shape tensor value (OneHot depth 5)", rc == 0 and shp == [3, 5], det)
    rc, shp, det = shape_of(["--onnx=" + reshape, "--shapes=shape:-1x6"], w("s.json"))
    check("negative shape tensor values (Reshape -1x6)", rc == 0 and shp == [2, 6], det)
    rc, shp, det = shape_of(["--onnx=" + one, "--shapes=shape:1"], w("one1.json"))
    check("a one-element shape tensor equal to 1 is values, not its shape",
          rc == 1 or shp is None, det)  # [5] reshaped to [1]: the values are used (and refused)
    rc, shp, det = shape_of(["--onnx=" + one, "--shapes=shape:-1"], w("one2.json"))
    check("a one-element shape tensor of -1", rc == 0 and shp == [5], det)
    rc, shp, det = shape_of(["--onnx=" + reshape, "--minShapes=shape:1x12",
                             "--optShapes=shape:2x6", "--maxShapes=shape:12x1",
                             "--shapes=shape:4x3"], w("p.json"))
    check("shape tensor values over a profile, run at --shapes", rc == 0 and shp == [4, 3], det)
    np.save(w("shape.npy"), np.array([6, 2], np.int64))
    rc, shp, det = shape_of(["--onnx=" + reshape, "--loadInputs=shape:" + w("shape.npy")],
                            w("l.json"))
    check("--loadInputs data are the profile's values when none are given",
          rc == 0 and shp == [6, 2] and "values from" in det, det)
    np.save(w("shape32.npy"), np.array([6, 2], np.int32))
    rc, so, se = run(k, "exec", "--onnx=" + reshape, "--loadInputs=shape:" + w("shape32.npy"),
                     *QUICK)
    check("--loadInputs of the wrong type names the fix, not --shapes",
          rc == 1 and "astype" in se and "set --shapes" not in se, so + se)
    rc, so, se = run(k, "exec", "--onnx=" + reshape, *QUICK)
    check("a shape tensor without values: the message names --shapes, not a C function",
          rc == 1 and "--shapes=shape:" in se and "--loadInputs" in se and
          "kiln_builder_config" not in se, so + se)
    rc, so, se = run(k, "exec", "--onnx=" + reshape, "--shapes=shape:4", *QUICK)
    check("too few values: the message names the flag and the count",
          rc == 1 and "--shapes" in se and "holds 2 values" in se, so + se)
    # inputs that decide no shape are data: no values needed, random or loaded
    rc, so, se = run(k, "exec", "--onnx=" + dataonly, *QUICK)
    check("CumSum axis, Dropout ratio, Trilu k are not shape tensors (no values needed)",
          rc == 0 and "shape tensor" not in so, so + se)
    np.save(w("axis.npy"), np.array(1, np.int64))
    rc, so, se = run(k, "exec", "--onnx=" + dataonly, "--loadInputs=axis:" + w("axis.npy"),
                     *QUICK)
    check("... and take their data from --loadInputs", rc == 0 and "Loaded input 'axis'" in so,
          so + se)
    rc, so, se = run(k, "exec", "--onnx=" + dataonly, "--shapes=ratio:0.5", *QUICK)
    check("a value given as the shape of a data input names --loadInputs",
          rc == 1 and "--loadInputs=ratio:" in se, so + se)
    rc, so, se = run(k, "exec", "--onnx=" + nms, "--shapes=maxout:3", *QUICK)
    check("NonMaxSuppression: only max_output_boxes is a shape tensor; thresholds are data",
          rc == 0 and "'maxout': int64 1, shape tensor" in so and "'iou': float 1 (random)" in so,
          so + se)
    rc, so, se = run(k, "compare", reshape, "--shapes=shape:4x3")
    check("compare: shape tensor values from --shapes", rc == 0 and "PASSED" in so, so + se)
    rc, so, se = run(k, "compare", resize, "--shapes=scales:1x1x2x2")
    check("compare: float shape tensor values", rc == 0 and "PASSED" in so, so + se)
    plan = w("reshape.kiln")
    rc, so, se = run(k, "exec", "--onnx=" + reshape, "--minShapes=shape:1x12",
                     "--maxShapes=shape:12x1", "--optShapes=shape:3x4", "--saveEngine=" + plan,
                     "--skipInference")
    rc, shp, det = shape_of(["--loadEngine=" + plan, "--shapes=shape:-1x2"], w("le.json"))
    check("a loaded plan's shape tensor takes values (-1x2)", rc == 0 and shp == [6, 2], det)


# ---------------------------------------------------------------- polygraphy
def part_polygraphy(k, w):
    m = mlp(w("pg.onnx"), n=2, width=8)
    dyn = save(w("pgdyn.onnx"), [h.make_node("Relu", ["x"], ["y"])],
               [vi("x", T.FLOAT, ["N", 3, "H", "W"])], [vi("y", T.FLOAT, None)])
    rc, so, se = run(k, "compare", dyn, "--trt", "--onnxrt", "--input-shapes", "x:[1,3,8,8]",
                     "--atol", "1e-2", "--rtol", "1e-3", "y:1e-2")
    check("compare: --trt --onnxrt --input-shapes x:[1,3,8,8] --atol 1e-2 --rtol 1e-3 y:1e-2",
          rc == 0 and "float 1x3x8x8" in so and "atol=0.01 rtol=0.01" in so, so + se)
    rc, so, se = run(k, "compare", dyn, "--input-shapes=x:[2,3,4,4]", "--atol=1e-2")
    check("compare: --input-shapes=x:[2,3,4,4]", rc == 0 and "2x3x4x4" in so, so + se)
    res, ins = w("res.json"), w("in.json")
    rc, so, se = run(k, "compare", m, "--onnxrt", "--save-results", res, "--save-inputs", ins,
                     "--seed", "5")
    ok = rc == 0
    try:
        with open(res) as f:
            r = json.load(f)
        ok = ok and r["polygraphy_class"] == "RunResults" and len(r["lst"]) == 2 and \
            r["lst"][1][0].startswith("kiln-runner") and \
            r["lst"][0][1][0]["outputs"]["y"]["polygraphy_class"] == "LazyArray"
    except (OSError, ValueError, KeyError, IndexError) as e:
        ok, se = False, se + str(e)
    check("compare --save-results F.json writes Polygraphy RunResults (reference, kiln)", ok,
          so + se)
    rc, so, se = run(k, "compare", m, "--load-inputs", ins, "--load-results", res, "--atol",
                     "1e-5")
    check("compare --load-inputs F.json --load-results F.json (no reference run)",
          rc == 0 and "Polygraphy results" in so and "saved results" in so, so + se)
    # a perturbed results file must fail: the values are really compared
    with open(res) as f:
        r = json.load(f)
    import base64
    import io
    arr = r["lst"][0][1][0]["outputs"]["y"]["values"]
    a = np.load(io.BytesIO(base64.b64decode(arr["array"])))
    buf = io.BytesIO()
    np.save(buf, a + 1.0)
    arr["array"] = base64.b64encode(buf.getvalue()).decode()
    with open(w("bad.json"), "w") as f:
        json.dump(r, f)
    rc, so, se = run(k, "compare", m, "--load-inputs", ins, "--load-results", w("bad.json"))
    check("compare against perturbed Polygraphy results fails (exit 1)", rc == 1, so + se)
    # Polygraphy itself, when installed: it reads kiln's files and kiln reads its own
    try:
        import polygraphy  # noqa: F401
    except ImportError:
        print("polygraphy not installed: the cross-checks with it are skipped")
        return
    pg = [os.path.join(os.path.dirname(sys.executable), "polygraphy")]
    if not os.path.exists(pg[0]):
        print("polygraphy's command is not installed next to %s: cross-checks skipped" %
              sys.executable)
        return
    p = subprocess.run(pg + ["run", m, "--onnxrt", "--load-inputs", ins, "--load-results", res],
                       capture_output=True, text=True, timeout=240)
    check("polygraphy run --load-results reads kiln's results and inputs",
          p.returncode == 0 and "PASSED" in p.stdout + p.stderr, p.stdout + p.stderr)
    p = subprocess.run(pg + ["run", m, "--onnxrt", "--save-inputs", w("pin.json"),
                             "--save-results", w("pres.json")],
                       capture_output=True, text=True, timeout=240)
    rc, so, se = run(k, "compare", m, "--onnxrt", "--load-inputs", w("pin.json"),
                     "--load-results", w("pres.json"))
    check("kiln compare reads polygraphy run's --save-inputs/--save-results",
          p.returncode == 0 and rc == 0 and "onnxrt-runner" in so, p.stderr + so + se)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--plugins", help="folder of the example plugin libraries")
    ap.add_argument("--models", help="folder of the plugin test models")
    ap.add_argument("--part", default="all")
    a = ap.parse_args()
    work = os.path.join(a.work, a.part)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    w = lambda n: os.path.join(work, n)  # noqa: E731
    parts = ["precision", "plugins", "exit", "shapes", "polygraphy"] if a.part == "all" \
        else [a.part]
    for part in parts:
        if part == "precision":
            part_precision(a.kiln, w)
        elif part == "plugins":
            if not a.plugins or not a.models:
                print("skipped: --plugins and --models are needed for the plugin part")
                return 77
            part_plugins(a.kiln, w, a.plugins, a.models)
        elif part == "exit":
            part_exit(a.kiln, w, a.plugins)
        elif part == "shapes":
            part_shapes(a.kiln, w)
        elif part == "polygraphy":
            part_polygraphy(a.kiln, w)
    print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
    for f in FAILS:
        print("FAILED: " + f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
