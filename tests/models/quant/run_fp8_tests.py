#!/usr/bin/env python3
"""run_fp8_tests.py - FP8 E4M3 Q/DQ models (gen_fp8.py, ModelOpt's FP8 form)
built by kiln on the CPU.

Checks:
  - the plan has the expected number of fused FP8 layers (kiln::FP8MatMul,
    kiln::FP8Conv; kiln inspect --json);
  - the unfused plan (--noFusion: QuantizeLinear / DequantizeLinear as ops)
    and the fused plan agree with ONNX Runtime at ORT_ENABLE_BASIC. (ONNX
    Runtime 1.2x-1.3x's extended graph optimizations change the results of
    float8 Q/DQ graphs -- they disagree with onnx.reference and with ONNX
    Runtime's own basic level -- so its basic level is the reference.) The
    unfused plan within 1e-5 of the largest |output|; the fused plan sums in
    another order and scales once (acc * x_scale * w_scale), so an
    intermediate FP8 output may round one E4M3 step away: 99% of elements
    within 1e-4 of the largest |output| and none past 0.15 of it;
  - one FP8MatMul layer (bias, relu, float output) against graph/fp8layer.h's
    arithmetic computed in numpy (FP32 products summed in ascending k, then
    * (x_scale * w_scale[c]), + bias, relu): bit for bit;
  - kiln exec --fp8 --calib=DIR on a float MatMul/Gemm/Conv model: FP8 layers
    in the plan, outputs near the FP32 plan's; --fp8 without --calib on a
    float model is refused with a message.

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime / onnx / ml_dtypes).
"""

import argparse
import json
import os
import subprocess
import sys

SKIP = 77
try:
    import ml_dtypes
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fp8  # noqa: E402

BATCH = 4


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kiln_exec(kiln, path, shape, x, work, tag, extra=()):
    f = os.path.join(work, "x.%s.bin" % tag)
    x.tofile(f)
    out = os.path.join(work, "out.%s.npz" % tag)
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=x:" + shape, "--loadInputs=x:" + f,
             "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0",
             "--threads=2"] + list(extra))
    if p.returncode != 0:
        return None, p.stdout[-3000:]
    z = np.load(out)
    return {k: z[k] for k in z.files}, p.stdout


def fp8_layers(kiln, path, shape, extra=()):
    p = run([kiln, "inspect", path, "--json", "--shapes=x:" + shape, "--threads=2"] + list(extra))
    if p.returncode != 0:
        return None, p.stdout[-2000:]
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    return [l for l in rep["layers"] if l["op"] in ("FP8MatMul", "FP8Conv")], rep


def ort_ref(path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, {"x": x})))


def check_model(kiln, work, name):
    fails = []
    fn, dims, want = gen_fp8.MODELS[name]
    path = gen_fp8.make(os.path.join(work, "fp8_%s.onnx" % name), name)
    shape = "x".join(str(d) for d in (BATCH,) + dims)
    layers, rep = fp8_layers(kiln, path, shape)
    if layers is None:
        return ["%s: inspect failed:\n%s" % (name, rep)]
    print("%s: %d layers, %d FP8 (%s)" % (name, len(rep["layers"]), len(layers),
                                        ", ".join(l["precision"] for l in layers)))
    if len(layers) != want:
        fails.append("%s: %d FP8 layers, %d expected" % (name, len(layers), want))
    x = np.random.default_rng(7).standard_normal((BATCH,) + dims).astype(np.float32)
    ref = ort_ref(path, x)
    for tag, extra in (("unfused", ["--noFusion"]), ("fused", [])):
        got, err = kiln_exec(kiln, path, shape, x, work, name + tag, extra)
        if got is None:
            fails.append("%s %s: kiln exec failed:\n%s" % (name, tag, err))
            continue
        for o, r in ref.items():
            big = max(1e-6, float(np.max(np.abs(r))))
            d = np.abs(got[o].astype(np.float64) - r) / big
            if tag == "unfused":
                ok = float(d.max()) <= 1e-5
            else:
                ok = float(np.mean(d <= 1e-4)) >= 0.99 and float(d.max()) <= 0.15
            print("  %-8s %-7s max|kiln-ort|/max|ort| %.2e, within 1e-4: %.1f%%  %s"
                  % (tag, o, float(d.max()), 100 * float(np.mean(d <= 1e-4)), "ok" if ok else "FAIL"))
            if not ok:
                fails.append("%s %s %s: %.3e (relative) from ONNX Runtime" % (name, tag, o, float(d.max())))
    return fails


def check_exact(kiln, work):
    """One FP8MatMul (per-channel W, bias, relu, float output) against the
    documented arithmetic, bit for bit. K = 200 with values of mixed
    magnitude, so that a different summation order would show."""
    rng = np.random.default_rng(13)
    m, k, n = 6, 200, 24
    xs, ws = np.float32(0.01), (rng.uniform(0.001, 0.01, n)).astype(np.float32)
    xq = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-4, 5, (m, k)))).astype(np.float32)
    xq = np.clip(xq * 20, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    wq = np.clip(rng.standard_normal((k, n)) * 60, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    bias = (rng.standard_normal(n)).astype(np.float32)
    f8z = lambda s: numpy_helper.from_array(np.zeros(s, ml_dtypes.float8_e4m3fn))  # noqa: E731
    inits = [numpy_helper.from_array(xs, "xs"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(bias, "b")]
    z1, zn = f8z(()), f8z((n,))
    z1.name, zn.name = "xz", "wz"
    inits += [z1, zn]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], saturate=1),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["ab"], name="bias"),
             helper.make_node("Relu", ["ab"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "exact", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    path = os.path.join(work, "fp8_exact.onnx")
    onnx.save(model, path)
    x = xq.astype(np.float32) * xs  # exactly representable: Q gives xq back
    shape = "%dx%d" % (m, k)
    layers, rep = fp8_layers(kiln, path, shape)
    if not layers or len(layers) != 1:
        return ["exact: %s FP8 layers (1 expected)" % (len(layers) if layers else rep)]
    got, err = kiln_exec(kiln, path, shape, x, work, "exact")
    if got is None:
        return ["exact: kiln exec failed:\n%s" % err]
    xf, wf = xq.astype(np.float32), wq.astype(np.float32)
    acc = np.zeros((m, n), np.float32)
    for p in range(k):  # ascending k, FP32; each product exact
        acc = (acc + xf[:, p:p + 1] * wf[p:p + 1, :]).astype(np.float32)
    want = np.maximum((acc * (xs * ws)).astype(np.float32) + bias, np.float32(0))
    same = np.array_equal(got["y"].view(np.uint32), want.view(np.uint32))
    print("exact: FP8MatMul %dx%dx%d against the documented FP32 order: %s (max diff %.3e)"
          % (m, k, n, "bit-exact" if same else "DIFFERS", float(np.max(np.abs(got["y"] - want)))))
    return [] if same else ["exact: the FP8 layer differs from the documented arithmetic"]


def float_model():
    """MatMul -> Relu -> Gemm, and a Conv branch, in FP32."""
    rng = np.random.default_rng(17)
    c = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)  # noqa: E731
    inits = [c("w1", rng.standard_normal((48, 32)) / 7), c("w2", rng.standard_normal((16, 32)) / 6),
             c("b2", rng.standard_normal(16) * 0.1), c("cw", rng.standard_normal((4, 1, 3, 3)) / 3),
             c("shape", np.array([0, 1, 4, 4]))]
    inits[-1] = numpy_helper.from_array(np.array([0, 1, 4, 4], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"], name="gemm2", transB=1),
             helper.make_node("Reshape", ["y", "shape"], ["img"], name="img"),
             helper.make_node("Conv", ["img", "cw"], ["yc"], name="conv", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16]),
                           helper.make_tensor_value_info("yc", TensorProto.FLOAT, ["N", 4, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def check_calib(kiln, work):
    fails = []
    path = os.path.join(work, "fp8_float.onnx")
    onnx.save(float_model(), path)
    cdir = os.path.join(work, "fp8_calib")
    os.makedirs(cdir, exist_ok=True)
    rng = np.random.default_rng(19)
    for i in range(4):
        np.save(os.path.join(cdir, "b%d.npy" % i), rng.standard_normal((8, 48)).astype(np.float32))
    shape = "8x48"
    x = rng.standard_normal((8, 48)).astype(np.float32)
    ref, err = kiln_exec(kiln, path, shape, x, work, "calib_fp32")
    if ref is None:
        return ["calib: the FP32 plan failed:\n%s" % err]
    for algo in ("minmax", "entropy"):
        extra = ["--fp8", "--calib=" + cdir, "--calibAlgo=" + algo,
                 "--calibCache=" + os.path.join(work, "fp8_%s.cache" % algo)]
        got, err = kiln_exec(kiln, path, shape, x, work, "calib_" + algo, extra)
        if got is None:
            fails.append("calib %s: kiln exec --fp8 --calib failed:\n%s" % (algo, err))
            continue
        layers, rep = fp8_layers(kiln, path, shape, ["--fp8", "--calib=" + os.path.join(work, "fp8_%s.cache" % algo)])
        nl = len(layers) if layers is not None else -1
        for o in ("y", "yc"):
            big = float(np.max(np.abs(ref[o])))
            d = float(np.max(np.abs(got[o] - ref[o]))) / big
            # E4M3 has 3 mantissa bits: a relative step of 2^-4 at worst per rounding
            ok = d <= 0.15 and nl == 3
            print("calib %-8s %-3s %d FP8 layers, max|fp8-fp32|/max|fp32| %.3e  %s"
                  % (algo, o, nl, d, "ok" if ok else "FAIL"))
            if not ok:
                fails.append("calib %s %s: %d FP8 layers (3 expected), relative error %.3e" % (algo, o, nl, d))
    p = run([kiln, "exec", "--onnx=" + path, "--shapes=x:" + shape, "--fp8", "--iterations=1",
             "--warmUp=0", "--duration=0"])
    refused = p.returncode != 0 and "--fp8" in p.stdout and "calib" in p.stdout
    print("--fp8 without --calib on a float model: %s" % ("refused" if refused else "NOT refused"))
    if not refused:
        fails.append("--fp8 without --calib was not refused:\n%s" % p.stdout[-1500:])
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    fails = []
    for name in gen_fp8.MODELS:
        fails += check_model(args.kiln, args.work, name)
    fails += check_exact(args.kiln, args.work)
    fails += check_calib(args.kiln, args.work)
    for f in fails:
        print("FAIL: " + f)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
