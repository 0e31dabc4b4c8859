#!/usr/bin/env python3
"""gen_fp8.py - FP8 E4M3 Q/DQ models in the form NVIDIA ModelOpt's ONNX PTQ
writes for FP8 (opset 19+): QuantizeLinear / DequantizeLinear with zero
points of type float8e4m3fn (value 0), saturate=1, per-tensor activation
scales (amax / 448), weights stored as float8e4m3fn initializers behind a
DequantizeLinear with a per-tensor or per-output-channel scale. Made with
the onnx helper from fixed seeds; no quantization tool is needed.

Models:
  mlp   MatMul (per-channel W) + bias Add + Relu, Gemm (transB, per-tensor W,
        bias), MatMul (per-tensor W) with an FP8 output Q'd for the next
        layer, a residual Add in float, and an activation-activation MatMul
        (both inputs FP8 Q/DQ)
  cnn   Conv 3x3 (per-channel W, bias) + Relu, Conv 1x1 stride 2, grouped
        Conv 3x3, GlobalAveragePool, Flatten, Gemm
"""

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

E4M3_MAX = 448.0
F8 = TensorProto.FLOAT8E4M3FN


def f8_init(name, arr):
    """A float8e4m3fn initializer of arr's values (rounded to nearest even,
    saturated, as QuantizeLinear with saturate=1)."""
    a = np.clip(arr.astype(np.float32), -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return numpy_helper.from_array(a, name)


def zp_init(name, n=None):
    shape = () if n is None else (n,)
    return numpy_helper.from_array(np.zeros(shape, dtype=ml_dtypes.float8_e4m3fn), name)


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.k = 0

    def name(self, s):
        self.k += 1
        return "%s%d" % (s, self.k)

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def qdq(self, x, amax):
        """Q -> DQ of activation x with scale amax / 448 (per tensor)."""
        n = self.name("act")
        s = self.const(n + ".scale", np.float32(amax / E4M3_MAX))
        self.inits.append(zp_init(n + ".zp"))
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, n + ".zp"], [n + ".q"],
                                           name=n + "_q", saturate=1))
        self.nodes.append(helper.make_node("DequantizeLinear", [n + ".q", s, n + ".zp"],
                                           [n + ".dq"], name=n + "_dq"))
        return n + ".dq"

    def weight(self, w, axis):
        """DQ(float8 w) with per-channel scales along axis (None: per tensor)."""
        n = self.name("w")
        if axis is None:
            s = np.float32(np.max(np.abs(w)) / E4M3_MAX)
            q = w / s
            self.const(n + ".scale", s)
            self.inits.append(zp_init(n + ".zp"))
        else:
            red = tuple(d for d in range(w.ndim) if d != axis)
            s = (np.max(np.abs(w), axis=red) / E4M3_MAX).astype(np.float32)
            shape = [1] * w.ndim
            shape[axis] = -1
            q = w / s.reshape(shape)
            self.const(n + ".scale", s)
            self.inits.append(zp_init(n + ".zp", s.size))
        self.inits.append(f8_init(n + ".q", q))
        attrs = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node("DequantizeLinear", [n + ".q", n + ".scale", n + ".zp"],
                                           [n + ".dq"], name=n + "_dq", **attrs))
        return n + ".dq"

    def node(self, op, ins, **attrs):
        n = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [n + ".y"], name=n, **attrs))
        return n + ".y"


def mlp(seed=3, d=32, hid=64):
    b = Builder(seed)
    r = b.rng
    x = b.qdq("x", 4.0)
    w1 = (r.standard_normal((d, hid)) / np.sqrt(d)).astype(np.float32)
    h = b.node("MatMul", [x, b.weight(w1, 1)])
    h = b.node("Add", [h, b.const("b1", 0.1 * r.standard_normal(hid))])
    h = b.node("Relu", [h])
    h = b.qdq(h, 3.0)
    w2 = (r.standard_normal((d, hid)) / np.sqrt(hid)).astype(np.float32)  # [N, K]: transB
    g = b.node("Gemm", [h, b.weight(w2, None), b.const("b2", 0.1 * r.standard_normal(d))], transB=1)
    g = b.qdq(g, 3.0)
    w3 = (r.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
    m = b.node("MatMul", [g, b.weight(w3, None)])
    m = b.node("Add", [m, "x"])  # residual in float
    q = b.qdq(m, 6.0)
    k = b.qdq("x", 4.0)
    kt = b.node("Transpose", [k], perm=[1, 0])
    kt = b.qdq(kt, 4.0)
    s = b.node("MatMul", [q, kt])  # activation x activation: [B, S, S]
    b.nodes.append(helper.make_node("Identity", [m], ["y"], name="out_y"))
    b.nodes.append(helper.make_node("Identity", [s], ["scores"], name="out_scores"))
    g_ = helper.make_graph(b.nodes, "fp8_mlp",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", d]),
                            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", "N"])],
                           b.inits)
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", 19)])


def cnn(seed=5, c=8):
    b = Builder(seed)
    r = b.rng

    def conv(x, cin, cout, k, stride=1, group=1, relu=True, amax_out=None):
        w = (r.standard_normal((cout, cin // group, k, k)) *
             np.sqrt(2.0 / (cin // group * k * k))).astype(np.float32)
        y = b.node("Conv", [x, b.weight(w, 0), b.const(b.name("cb"), 0.1 * r.standard_normal(cout))],
                   kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
        if relu:
            y = b.node("Relu", [y])
        return y

    x = b.qdq("x", 4.0)
    h = conv(x, 3, c, 3)
    h = conv(b.qdq(h, 4.0), c, 2 * c, 1, stride=2)
    h = conv(b.qdq(h, 4.0), 2 * c, 2 * c, 3, group=2)
    p = b.node("GlobalAveragePool", [h])
    f = b.node("Flatten", [p])
    w = (r.standard_normal((2 * c, 10)) / np.sqrt(2 * c)).astype(np.float32)
    o = b.node("Gemm", [b.qdq(f, 3.0), b.weight(w, 1), b.const("gb", 0.1 * r.standard_normal(10))])
    b.nodes.append(helper.make_node("Identity", [o], ["y"], name="out_y"))
    g_ = helper.make_graph(b.nodes, "fp8_cnn",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], b.inits)
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", 19)])


# name: (builder, input dims after the batch, fused FP8 layers expected)
MODELS = {"mlp": (mlp, (32,), 4), "cnn": (cnn, (3, 12, 12), 4)}


def make(path, name):
    m = MODELS[name][0]()
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


if __name__ == "__main__":
    import sys
    for n in MODELS:
        print(make(sys.argv[1] + "/fp8_%s.onnx" % n if len(sys.argv) > 1 else "fp8_%s.onnx" % n, n))
