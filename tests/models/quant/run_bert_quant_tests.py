#!/usr/bin/env python3
"""run_bert_quant_tests.py - quantized transformers: the zoo's small BERT,
from both torch exporters, quantized by gen_bert_quant.py (ONNX Runtime's
quantize_static in QDQ form, its quantize_dynamic, and FP8 E4M3 Q/DQ),
built by kiln on the CPU and compared with ONNX Runtime running the same
quantized model.

Checks per model and variant (kiln inspect --json, kiln exec):
  - the integer or FP8 GEMM layers the variant must reach, no float MatMul
    left where the graph quantizes one, and kiln::Attention where the graph
    keeps the attention in float;
  - last_hidden_state within TOL_STEPS quantization steps of ONNX Runtime's
    where a DequantizeLinear makes it, else within 1e-4 of its largest
    magnitude; at two shapes (the model's batch and sequence are dynamic);
  - the quantized model's error against the FP32 model is printed (kiln's
    and ONNX Runtime's) and kiln's may not exceed ONNX Runtime's by more
    than the comparison tolerance.

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime / onnx / numpy /
ml_dtypes).
"""

import argparse
import json
import os
import subprocess
import sys

SKIP = 77
try:
    import ml_dtypes  # noqa: F401
    import numpy as np
    import onnx
    import onnxruntime as ort
    import onnxruntime.quantization  # noqa: F401
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_bert_quant as gen  # noqa: E402
import ort_exact  # noqa: E402

TOL_STEPS = 3
MIN_SAME = 0.99
OUT = "last_hidden_state"
SHAPES = ((2, 16), (1, 24))
# variant: {layer op: count the plan must have (at least for the GEMMs, exactly
# for Attention)}; every variant: no float MatMul layer
EXPECT = {
    "s8sym": {"QMatMul": 16},        # Q/K/V, output, MLP and both attention MatMuls
    "u8asym": {"QMatMul": 16},
    "s8linear": {"QMatMul": 12, "Attention": 2},
    "dynamic": {"MatMulInteger": 12, "Attention": 2},
    "fp8": {"FP8MatMul": 12, "Attention": 2},
}
GEMMS = ("QMatMul", "MatMulInteger", "FP8MatMul")


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ort_run(path, feeds, fp8):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if fp8:  # ONNX Runtime's own FP8 fusions round differently from the graph
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort_exact.session(path, so)  # exact on CPUs without VNNI too
    return s.run([OUT], feeds)[0]


def out_step(model):
    """The scale of the DequantizeLinear making the output, or None."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == OUT and n.input[1] in inits:
            return float(np.max(inits[n.input[1]]))
    return None


def kiln_exec(kiln, path, feeds, work, tag):
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    files = []
    for k, v in feeds.items():
        f = os.path.join(work, "bert_%s.%s.bin" % (tag, k))
        v.tofile(f)
        files.append("%s:%s" % (k, f))
    out = os.path.join(work, "bert_%s.out.npz" % tag)
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=" + shapes, "--loadInputs=" + ",".join(files),
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0", "--threads=2"])
    if p.returncode != 0:
        return None, p.stdout[-3000:]
    return np.load(out)[OUT], ""


def layer_counts(kiln, path, shape):
    shapes = "input_ids:%dx%d,attention_mask:%dx%d" % (shape + shape)
    p = run([kiln, "inspect", path, "--json", "--shapes=" + shapes, "--threads=2"])
    if p.returncode != 0:
        return None, p.stdout[-2000:]
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    counts = {}
    for l in rep["layers"]:
        counts[l["op"]] = counts.get(l["op"], 0) + 1
    return counts, rep


def check(kiln, work, name, variant):
    fails = []
    path = gen.make(work, name, variant)
    qm = onnx.load(path)
    step = out_step(qm)
    counts, rep = layer_counts(kiln, path, SHAPES[0])
    if counts is None:
        return ["%s/%s: inspect failed:\n%s" % (name, variant, rep)]
    want = EXPECT[variant]
    gemm = {k: counts.get(k, 0) for k in GEMMS if counts.get(k, 0)}
    print("%s %-8s %d layers: %s, attention %d, float MatMul %d" %
          (name, variant, len(rep["layers"]), gemm, counts.get("Attention", 0),
           counts.get("MatMul", 0)))
    for op, n in want.items():
        have = counts.get(op, 0)
        if (op == "Attention" and have != n) or have < n:
            fails.append("%s/%s: %d %s layer(s), %d expected" % (name, variant, have, op, n))
    if counts.get("MatMul", 0):
        fails.append("%s/%s: %d float MatMul layer(s) left" % (name, variant, counts["MatMul"]))
    for k, shape in enumerate(SHAPES if variant == "s8sym" else SHAPES[:1]):
        feeds = gen.feeds(5 + k, *shape)
        got, err = kiln_exec(kiln, path, feeds, work, "%s_%s_%d" % (name, variant, k))
        if got is None:
            fails.append("%s/%s: kiln exec failed:\n%s" % (name, variant, err))
            continue
        ref = ort_run(path, feeds, variant == "fp8")
        fp32 = ort_run(gen.fp32_path(name), feeds, False)
        diff = np.abs(got.astype(np.float64) - ref)
        d = float(np.max(diff))
        lim = TOL_STEPS * step if step else 1e-4 * float(np.max(np.abs(ref)))
        # an 8-bit output: the same integer arithmetic as ONNX Runtime's gives
        # the same value almost everywhere (a rounding tie may differ)
        same = float(np.mean(diff <= 1e-6 * float(np.max(np.abs(ref))))) if step else 1.0
        ek = float(np.max(np.abs(got.astype(np.float64) - fp32)))
        eo = float(np.max(np.abs(ref.astype(np.float64) - fp32)))
        ok = d <= lim and ek <= eo + lim and same >= MIN_SAME
        print("  %dx%-3d max|kiln-ort| %.3e (limit %.3e), equal %.1f%%; vs FP32: kiln %.3e, ORT %.3e "
              "(max|fp32| %.2f)  %s" % (shape[0], shape[1], d, lim, 100 * same, ek, eo,
                                        float(np.max(np.abs(fp32))), "ok" if ok else "FAIL"))
        if same < MIN_SAME:
            fails.append("%s/%s %dx%d: %.1f%% of the outputs equal to ONNX Runtime's (< %.0f%%)"
                         % (name, variant, shape[0], shape[1], 100 * same, 100 * MIN_SAME))
        if d > lim:
            fails.append("%s/%s %dx%d: %.3e from ONNX Runtime (> %.3e)" % (name, variant, shape[0], shape[1], d, lim))
        elif ek > eo + lim:
            fails.append("%s/%s %dx%d: %.3e from FP32, ONNX Runtime %.3e" % (name, variant, shape[0], shape[1], ek, eo))
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    fails = []
    for name in gen.NAMES:
        for v in gen.VARIANTS:
            fails += check(args.kiln, args.work, name, v)
    for f in fails:
        print("FAIL: " + f)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
