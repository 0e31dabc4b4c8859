#!/usr/bin/env python3
"""run_modelopt_tests.py - models quantized by NVIDIA ModelOpt's ONNX PTQ
(tests/models/quant/modelopt/, written by gen_modelopt.py; manifest.json
has the ModelOpt version and command lines) built by kiln and compared with
ONNX Runtime running the same model. ModelOpt is not needed here.

ModelOpt's form: weights stored as float and quantized in the graph
(QuantizeLinear(W) -> DequantizeLinear, per output channel), activations
Q/DQ per tensor, int8 zero points (INT8) or float8e4m3fn ones (FP8).

Checks per model:
  - every Conv / MatMul / Gemm of the graph whose data input and weight are
    both DequantizeLinear outputs (the layers the graph quantizes) is an
    INT8 (kiln::QConv / kiln::QMatMul) or FP8 (kiln::FP8Conv /
    kiln::FP8MatMul) layer of the plan, and no other is;
  - the outputs within 1e-4 of their largest magnitude from ONNX Runtime's
    (ENABLE_BASIC: ONNX Runtime's own FP8 fusions round differently);
  - the error against the FP32 source model is printed.
The FP16 form (ModelOpt's default --high_precision_dtype: FP16 scales,
biases and float layers) is built and run too; its Q/DQ with FP16 scales
are not fused yet, so only its agreement with ONNX Runtime (FP16
arithmetic: 2e-2 of the largest magnitude) is checked.

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
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, "modelopt")
sys.path.insert(0, HERE)

INT8 = ("QConv", "QMatMul")
FP8 = ("FP8Conv", "FP8MatMul")


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def feeds_for(name):
    if name.startswith("bert"):
        import gen_bert_quant
        return gen_bert_quant.feeds(5)
    return {"x": np.random.default_rng(11).standard_normal((2, 3, 16, 16)).astype(np.float32)}


def fp32_source(name):
    if name.startswith("bert"):
        return os.path.join(HERE, "..", "zoo", "bert.torchscript17.onnx")
    return None


def graph_quantized(model):
    """Conv / MatMul / Gemm nodes whose inputs 0 and 1 are DQ outputs."""
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return [n.name for n in model.graph.node
            if n.op_type in ("Conv", "MatMul", "Gemm") and len(n.input) > 1 and
            n.input[0] in dq and n.input[1] in dq]


def ort_run(path_or_model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    src = path_or_model if isinstance(path_or_model, str) else path_or_model.SerializeToString()
    s = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds)))


def check(kiln, work, name):
    fails = []
    path = os.path.join(DIR, name + ".onnx")
    model = onnx.load(path)
    feeds = feeds_for(name)
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    p = run([kiln, "inspect", path, "--json", "--shapes=" + shapes, "--threads=2"])
    if p.returncode != 0:
        return ["%s: inspect failed:\n%s" % (name, p.stdout[-2000:])]
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    kinds = FP8 if "_fp8" in name else INT8
    layers = [l for l in rep["layers"] if l["op"] in kinds]
    other = [l for l in rep["layers"] if l["op"] in INT8 + FP8 and l["op"] not in kinds]
    want = len(graph_quantized(model))
    fp16 = name.endswith("_fp16")
    expect = 0 if fp16 else want
    print("%s: %d layers, %d %s layers (%d quantized in the graph%s)" %
          (name, len(rep["layers"]), len(layers), "FP8" if kinds == FP8 else "INT8", want,
           "; FP16 scales: not fused" if fp16 else ""))
    if len(layers) != expect or other:
        fails.append("%s: %d %s layers (%d of another kind), %d expected" %
                     (name, len(layers), "/".join(kinds), len(other), expect))
    files = []
    for k, v in feeds.items():
        f = os.path.join(work, "mo_%s.%s.bin" % (name, k))
        v.tofile(f)
        files.append("%s:%s" % (k, f))
    out = os.path.join(work, "mo_%s.npz" % name)
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=" + shapes, "--loadInputs=" + ",".join(files),
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0", "--threads=2"])
    if p.returncode != 0:
        return fails + ["%s: kiln exec failed:\n%s" % (name, p.stdout[-2000:])]
    got = np.load(out)
    refs = ort_run(path, feeds)
    src = fp32_source(name)
    fp32 = ort_run(src, feeds) if src else None
    for o, r in refs.items():
        big = max(1e-6, float(np.max(np.abs(r))))
        d = float(np.max(np.abs(got[o].astype(np.float64) - r))) / big
        lim = 2e-2 if fp16 else 1e-4
        e32 = ("; vs FP32 %.3e" % (float(np.max(np.abs(got[o] - fp32[o]))) / big)) if fp32 else ""
        ok = d <= lim
        print("  %-18s max|kiln-ort|/max|ort| %.3e (limit %.0e)%s  %s" %
              (o, d, lim, e32, "ok" if ok else "FAIL"))
        if not ok:
            fails.append("%s %s: %.3e (relative) from ONNX Runtime" % (name, o, d))
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(DIR, "manifest.json")) as f:
        man = json.load(f)
    print("ModelOpt %s models (onnx %s, onnxruntime %s when made)" %
          (man["modelopt"], man["onnx"], man["onnxruntime"]))
    fails = []
    for name in sorted(man["models"]):
        fails += check(args.kiln, args.work, name)
    for f in fails:
        print("FAIL: " + f)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
