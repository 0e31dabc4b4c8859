#!/usr/bin/env python3
"""gen_quant.py - the quantized model tests' models: a small CNN (conv,
relu, residual add, pooling, gemm) and a small transformer-ish block
(projections, bias, relu, residual adds, an activation-activation MatMul),
made in FP32 with fixed seeds, then quantized by ONNX Runtime's
quantize_static (QDQ format, per-channel weights, per-tensor activations)
with a calibration set from a fixed seed.

Variants (name: activation type / symmetric):
  u8asym  QUInt8 activations, asymmetric (ORT's default)
  s8sym   QInt8 activations, symmetric (TensorRT's form: zero points 0)
Weights are QInt8, per channel, symmetric in both.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def cnn(batch="N", ch=16, hw=16, seed=1):
    """Conv stem, two residual blocks (one with a strided 1x1 shortcut),
    a depthwise conv, global average pool, flatten, gemm."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k, stride=1, group=1, relu=True, name=None):
        name = name or "conv%d" % len(nodes)
        w = rng.standard_normal((cout, cin // group, k, k)).astype(np.float32)
        w *= np.sqrt(2.0 / (cin // group * k * k))
        b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        inits.extend([_init(name + ".w", w), _init(name + ".b", b)])
        y = name + ".y"
        nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [y], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, group=group))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [y + ".r"], name=name + ".relu"))
            y = y + ".r"
        return y

    x = conv("x", 3, ch, 3, name="stem")
    # block 1: identity shortcut
    h = conv(x, ch, ch, 3, name="b1c1")
    h = conv(h, ch, ch, 3, relu=False, name="b1c2")
    nodes.append(helper.make_node("Add", [h, x], ["b1.add"], name="b1.add"))
    nodes.append(helper.make_node("Relu", ["b1.add"], ["b1.out"], name="b1.relu"))
    # block 2: strided, 1x1 projection shortcut
    h = conv("b1.out", ch, 2 * ch, 3, stride=2, name="b2c1")
    h = conv(h, 2 * ch, 2 * ch, 3, relu=False, name="b2c2")
    s = conv("b1.out", ch, 2 * ch, 1, stride=2, relu=False, name="b2sc")
    nodes.append(helper.make_node("Add", [h, s], ["b2.add"], name="b2.add"))
    nodes.append(helper.make_node("Relu", ["b2.add"], ["b2.out"], name="b2.relu"))
    d = conv("b2.out", 2 * ch, 2 * ch, 3, group=2 * ch, name="dw")
    nodes.append(helper.make_node("GlobalAveragePool", [d], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1))
    w = (rng.standard_normal((10, 2 * ch)) / np.sqrt(2 * ch)).astype(np.float32)
    inits.extend([_init("fc.w", w), _init("fc.b", (0.1 * rng.standard_normal(10)).astype(np.float32))])
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "qcnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, hw, hw])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def mlp(batch="N", seq=16, d=32, seed=2):
    """x [N, S, D]: two residual projection blocks (MatMul + bias, Relu,
    MatMul + bias, Add), and a score MatMul x x^T between activations."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def proj(x, din, dout, name, relu):
        w = (rng.standard_normal((din, dout)) / np.sqrt(din)).astype(np.float32)
        b = (0.1 * rng.standard_normal(dout)).astype(np.float32)
        inits.extend([_init(name + ".w", w), _init(name + ".b", b)])
        nodes.append(helper.make_node("MatMul", [x, name + ".w"], [name + ".mm"], name=name))
        nodes.append(helper.make_node("Add", [name + ".mm", name + ".b"], [name + ".y"], name=name + ".bias"))
        y = name + ".y"
        if relu:
            nodes.append(helper.make_node("Relu", [y], [y + ".r"], name=name + ".relu"))
            y += ".r"
        return y

    x = "x"
    for i in range(2):
        h = proj(x, d, 2 * d, "l%d.up" % i, True)
        h = proj(h, 2 * d, d, "l%d.down" % i, False)
        nodes.append(helper.make_node("Add", [h, x], ["l%d.res" % i], name="l%d.res" % i))
        x = "l%d.res" % i
    nodes.append(helper.make_node("Transpose", [x], ["xt"], name="xt", perm=[0, 2, 1]))
    nodes.append(helper.make_node("MatMul", [x, "xt"], ["scores"], name="scores"))
    g = helper.make_graph(nodes, "qmlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])],
                          [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, seq, seq]),
                           helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, seq, d])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"cnn": (cnn, (3, 16, 16)), "mlp": (mlp, (16, 32))}
VARIANTS = ("u8asym", "s8sym")


def calib_data(shape, n=8, seed=7):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1,) + shape).astype(np.float32) for _ in range(n)]


def quantize(fp32_path, out_path, shape, variant):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib_data(shape))

        def get_next(self):
            v = next(self.it, None)
            return None if v is None else {"x": v}

    sym = variant == "s8sym"
    quantize_static(fp32_path, out_path, Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True,
                    activation_type=QuantType.QInt8 if sym else QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": sym, "WeightSymmetric": True})


def zoo_feeds(model, seed, batch=1):
    """Inputs of a gen_models model: floats from a seeded normal, int64 ids and
    masks in {0, 1} (valid for every embedding table)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [batch if d.dim_param else d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.FLOAT:
            feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
        else:
            feeds[i.name] = rng.integers(0, 2, dims).astype(np.int64)
    return feeds


def make_zoo(out_dir, name, variant):
    """scripts/gen_models.py's small `name`, preprocessed (BatchNorm folded) and
    quantized like make(); calibration from four seeded input sets. Returns
    (quantized path, the FP32 model)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                    "scripts"))
    import gen_models
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    os.makedirs(out_dir, exist_ok=True)
    m = gen_models.build(name, small=True)
    fp = os.path.join(out_dir, "zoo_%s.onnx" % name)
    pre = os.path.join(out_dir, "zoo_%s_pre.onnx" % name)
    q = os.path.join(out_dir, "zoo_%s_%s.onnx" % (name, variant))
    if os.path.exists(q):
        return q, m
    onnx.save(m, fp)
    quant_pre_process(fp, pre, skip_symbolic_shape=True)
    data = [zoo_feeds(m, 100 + k) for k in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    sym = variant == "s8sym"
    quantize_static(pre, q, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8 if sym else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": sym})
    return q, m


def make(out_dir, name, variant):
    """Write out_dir/<name>_fp32.onnx and out_dir/<name>_<variant>.onnx;
    return the quantized path."""
    os.makedirs(out_dir, exist_ok=True)
    fn, shape = MODELS[name]
    fp32 = os.path.join(out_dir, "%s_fp32.onnx" % name)
    if not os.path.exists(fp32):
        onnx.save(fn(), fp32)
    q = os.path.join(out_dir, "%s_%s.onnx" % (name, variant))
    if not os.path.exists(q):
        quantize(fp32, q, shape, variant)
    return q


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for m in MODELS:
        for v in VARIANTS:
            print(make(args.out, m, v))
