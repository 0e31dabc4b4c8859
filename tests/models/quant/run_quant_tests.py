#!/usr/bin/env python3
"""run_quant_tests.py - explicit quantization end to end: the models of
gen_quant.py (a small CNN and a transformer-ish MatMul block, quantized by
ONNX Runtime's quantize_static in QDQ form, u8 asymmetric and s8 symmetric
activations, per-channel s8 weights) built by kiln and compared with ONNX
Runtime running the same QDQ model.

Also scripts/gen_models.py's small ResNet-50, MobileNetV2, BERT and ViT,
quantized the same way (check_zoo).

Checks per model:
  - the plan has the expected number of quantized layers (kiln::QConv,
    kiln::QMatMul) and they report an 8-bit precision (kiln inspect --json);
  - every output is within TOL_STEPS quantization steps of ONNX Runtime's
    (the step: the scale of the DequantizeLinear producing the output);
  - the plan built with reference tactics only (--refTactics) gives the
    same bits as the default plan (oneDNN's INT8 tactics): both compute the
    same integer sums and run one epilogue.

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime / onnx / numpy).
"""

import argparse
import json
import os
import subprocess
import sys

SKIP = 77
try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import onnxruntime.quantization  # noqa: F401
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_quant  # noqa: E402
import ort_exact  # noqa: E402

TOL_STEPS = 3
BATCH = 2
# quantized layers each model must reach: cnn 7 convs + the gemm, mlp 4 projections + scores
EXPECT = {"cnn": 8, "mlp": 5}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p


def out_steps(model):
    """Output name -> the scale of the DequantizeLinear producing it."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            for o in model.graph.output:
                if n.output[0] == o.name:
                    steps[o.name] = float(np.max(inits[n.input[1]]))
    return steps


def kiln_run(kiln, path, shape, feeds, work, tag, extra):
    files = []
    for name, arr in feeds.items():
        f = os.path.join(work, "%s.%s.bin" % (name, tag))
        arr.tofile(f)
        files.append("%s:%s" % (name, f))
    out = os.path.join(work, "out.%s.npz" % tag)
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=x:" + shape, "--loadInputs=" + ",".join(files),
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0",
             "--threads=2"] + extra)
    if p.returncode != 0:
        return None, p.stdout[-3000:]
    z = np.load(out)
    return {k: z[k] for k in z.files}, ""


def check(kiln, work, name, variant):
    fails = []
    path = gen_quant.make(work, name, variant)
    model = onnx.load(path)
    fn, dims = gen_quant.MODELS[name]
    shape = "x".join(str(d) for d in (BATCH,) + dims)
    # quantized layers in the plan
    p = run([kiln, "inspect", path, "--json", "--shapes=x:" + shape, "--threads=2"])
    if p.returncode != 0:
        return ["%s/%s: inspect failed:\n%s" % (name, variant, p.stdout[-2000:])]
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    q = [l for l in rep["layers"] if l["op"] in ("QConv", "QMatMul")]
    eight = [l for l in q if l["precision"] in ("uint8", "int8")]
    print("%s/%s: %d layers, %d quantized (%d with 8-bit outputs)" %
          (name, variant, len(rep["layers"]), len(q), len(eight)))
    if len(q) < EXPECT[name]:
        fails.append("%s/%s: %d quantized layers, %d expected" % (name, variant, len(q), EXPECT[name]))
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((BATCH,) + dims).astype(np.float32)}
    sess = ort_exact.session(path)  # exact on CPUs without VNNI too
    names = [o.name for o in sess.get_outputs()]
    refs = dict(zip(names, sess.run(names, feeds)))
    got, err = kiln_run(kiln, path, shape, feeds, work, name + variant, [])
    if got is None:
        return fails + ["%s/%s: kiln exec failed:\n%s" % (name, variant, err)]
    ref_tac, err = kiln_run(kiln, path, shape, feeds, work, name + variant + "_ref", ["--refTactics"])
    if ref_tac is None:
        return fails + ["%s/%s: kiln exec --refTactics failed:\n%s" % (name, variant, err)]
    steps = out_steps(model)
    for o in names:
        a, b = got[o].astype(np.float64), refs[o].astype(np.float64)
        step = steps.get(o, 0.0)
        diff = np.abs(a - b)
        nsteps = float(np.max(diff)) / step if step else float("inf")
        same = float(np.mean(diff <= 1e-6 * max(1.0, float(np.max(np.abs(b))))))
        exact = np.array_equal(got[o], ref_tac[o])
        ok = nsteps <= TOL_STEPS and exact
        print("  %-10s max|kiln-ort| %.3e = %.2f steps (step %.3e), equal to ORT %.1f%%, "
              "oneDNN == reference: %s  %s" % (o, float(np.max(diff)), nsteps, step, 100 * same,
                                              exact, "ok" if ok else "FAIL"))
        if nsteps > TOL_STEPS:
            fails.append("%s/%s %s: %.2f quantization steps from ONNX Runtime (> %d)"
                         % (name, variant, o, nsteps, TOL_STEPS))
        if not exact:
            fails.append("%s/%s %s: the oneDNN plan differs from the reference plan (max %.3e)"
                         % (name, variant, o, float(np.max(np.abs(got[o] - ref_tac[o])))))
    return fails


# gen_models' small models (BatchNorm folded, then quantize_static) and the
# quantized layers each must reach
ZOO = {"resnet50": 21, "mobilenetv2": 26, "bert": 17, "vit": 14}
# the most layers of these kinds a zoo plan may have
ZOO_LAYOUT = {"resnet50": {"Transpose": 2, "Add": 0, "DequantizeLinear": 2, "float MaxPool": 0}}


def check_zoo(kiln, work, name, variant):
    """A zoo model against ONNX Runtime on the same QDQ model: outputs made by a
    DequantizeLinear within TOL_STEPS of its scale, others (BERT's tanh
    pooler) within 1e-4 of their largest magnitude."""
    path, model = gen_quant.make_zoo(work, name, variant)
    qm = onnx.load(path)
    feeds = gen_quant.zoo_feeds(model, 5)
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    files, fails = [], []
    for k, v in feeds.items():
        f = os.path.join(work, "zoo_%s.%s.bin" % (name, k))
        v.tofile(f)
        files.append("%s:%s" % (k, f))
    out = os.path.join(work, "zoo_out.npz")
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=" + shapes, "--loadInputs=" + ",".join(files),
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0", "--threads=2"])
    if p.returncode != 0:
        return ["zoo %s/%s: kiln exec failed:\n%s" % (name, variant, p.stdout[-2000:])]
    got = np.load(out)
    p = run([kiln, "inspect", path, "--json", "--shapes=" + shapes, "--threads=2"])
    rep = json.loads(p.stdout[p.stdout.index("{"):]) if p.returncode == 0 else {"layers": []}
    nq = sum(1 for l in rep["layers"] if l["op"] in ("QConv", "QMatMul"))
    if nq < ZOO[name]:
        fails.append("zoo %s/%s: %d quantized layers, %d expected" % (name, variant, nq, ZOO[name]))
    if name in ZOO_LAYOUT:
        # one INT8 region in one layout: a reformat at the input and one before the float
        # pooling head, residual Adds inside the QConvs, MaxPool on the 8-bit tensor
        ops = [l["op"] for l in rep["layers"]]
        pools = [l for l in rep["layers"] if l["op"] == "MaxPool"]
        got_l = {"Transpose": ops.count("Transpose"), "Add": ops.count("Add"),
                 "DequantizeLinear": ops.count("DequantizeLinear"),
                 "float MaxPool": sum(1 for l in pools if l["precision"] not in ("uint8", "int8"))}
        print("zoo %-12s %-7s layout: %s" % (name, variant, got_l))
        for k, lim in ZOO_LAYOUT[name].items():
            if got_l[k] > lim:
                fails.append("zoo %s/%s: %d %s layer(s), at most %d expected" % (name, variant, got_l[k], k, lim))
    sess = ort_exact.session(path)  # exact on CPUs without VNNI too
    names = [o.name for o in sess.get_outputs()]
    steps = out_steps(qm)
    for o, ref in zip(names, sess.run(names, feeds)):
        d = float(np.max(np.abs(got[o].astype(np.float64) - ref)))
        lim = TOL_STEPS * steps[o] if o in steps else 1e-4 * float(np.max(np.abs(ref)))
        ok = d <= lim
        print("zoo %-12s %-7s %d layers, %d quantized  %-18s max|kiln-ort| %.3e (limit %.3e)  %s"
              % (name, variant, len(rep["layers"]), nq, o, d, lim, "ok" if ok else "FAIL"))
        if not ok:
            fails.append("zoo %s/%s %s: %.3e from ONNX Runtime (> %.3e)" % (name, variant, o, d, lim))
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    fails = []
    for name in gen_quant.MODELS:
        for v in gen_quant.VARIANTS:
            fails += check(args.kiln, args.work, name, v)
    for name in ZOO:
        for v in gen_quant.VARIANTS:
            fails += check_zoo(args.kiln, args.work, name, v)
    for f in fails:
        print("FAIL: " + f)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
