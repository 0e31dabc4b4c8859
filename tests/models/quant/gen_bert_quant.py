#!/usr/bin/env python3
"""gen_bert_quant.py - the zoo's small BERT (tests/models/zoo/bert.*17.onnx:
two layers, hidden 32, vocabulary 256, dynamic batch and sequence; one
exported by torch.onnx's TorchScript exporter, one by its dynamo exporter)
quantized the ways users quantize transformers:

  s8sym     ONNX Runtime quantize_static, QDQ, QInt8 activations symmetric,
            QInt8 weights per channel (TensorRT's scheme)
  u8asym    the same with QUInt8 asymmetric activations (ORT's default)
  s8linear  quantize_static with only the MatMuls whose B is a weight
            (Q/K/V, output, MLP) in nodes_to_quantize: the attention
            MatMuls and everything else stay float in the graph
  dynamic   quantize_dynamic: DynamicQuantizeLinear + MatMulInteger (u8 x s8)
  fp8       FP8 E4M3 Q/DQ in the form gen_fp8.py (ModelOpt's FP8 form)
            writes: each weight MatMul's activation input Q/DQ'd per tensor
            (amax / 448 from calibration), its weight stored float8e4m3fn
            behind a per-output-channel DQ; opset 19

Calibration: seeded random token ids (uniform over the vocabulary) and
attention masks with a few padded positions, 8 batches of 2 x 16; the test
inputs come from another seed.
"""

import argparse
import logging
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "..", "zoo")
NAMES = ("bert.torchscript17", "bert.dynamo17")
VARIANTS = ("s8sym", "u8asym", "s8linear", "dynamic", "fp8")
VOCAB = 256
E4M3_MAX = 448.0


def feeds(seed, batch=2, seq=16):
    """Token ids uniform over the vocabulary; the mask pads the last
    0..seq/4 positions of each row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    for b in range(batch):
        pad = int(rng.integers(0, seq // 4 + 1))
        if pad:
            mask[b, seq - pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def calib_feeds(n=8):
    return [feeds(1000 + k) for k in range(n)]


def fp32_path(name):
    return os.path.join(ZOO, name + ".onnx")


def weight_matmuls(model):
    """Names of the MatMul nodes whose second input is an initializer."""
    inits = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]


def _reader():
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib_feeds())

        def get_next(self):
            return next(self.it, None)

    return Reader()


def _preprocess(name, out_dir):
    from onnxruntime.quantization.shape_inference import quant_pre_process
    pre = os.path.join(out_dir, "%s_pre.onnx" % name)
    if not os.path.exists(pre):
        quant_pre_process(fp32_path(name), pre, skip_symbolic_shape=True)
    return pre


def quantize(name, variant, out):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    out_dir = os.path.dirname(out)
    logging.getLogger().setLevel(logging.ERROR)  # quantize_*'s per-tensor advice
    if variant == "fp8":
        onnx.save(fp8_model(name), out)
        return
    if variant == "dynamic":
        quantize_dynamic(fp32_path(name), out, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"])
        return
    pre = _preprocess(name, out_dir)
    sym = variant != "u8asym"
    kw = {}
    if variant == "s8linear":
        kw["nodes_to_quantize"] = weight_matmuls(onnx.load(pre))
    quantize_static(pre, out, _reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8 if sym else QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": sym, "WeightSymmetric": True}, **kw)


def _amax(model, tensors):
    """Largest |value| of each named tensor over the calibration batches
    (ONNX Runtime on the float model with the tensors made outputs)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for t in tensors:
        if t not in have:
            m.graph.output.append(helper.make_empty_tensor_value_info(t))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    amax = dict.fromkeys(tensors, 0.0)
    for f in calib_feeds():
        for t, v in zip(tensors, s.run(list(tensors), f)):
            amax[t] = max(amax[t], float(np.max(np.abs(v))))
    return amax


def fp8_model(name):
    """The float model with FP8 E4M3 Q/DQ on each weight MatMul: activation
    Q -> DQ per tensor (zero point float8 0, saturate=1), weight as a
    float8e4m3fn initializer behind DQ with one scale per output column
    (axis 1 of the [K, N] weight)."""
    import ml_dtypes
    model = onnx.load(fp32_path(name))
    inits = {t.name: t for t in model.graph.initializer}
    targets = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    acts = sorted({n.input[0] for n in targets})
    amax = _amax(model, acts)
    new_inits, qdq_of = [], {}
    pre_nodes = {}
    for k, a in enumerate(acts):
        s, z = "fp8a%d.scale" % k, "fp8a%d.zp" % k
        new_inits.append(numpy_helper.from_array(np.float32(max(amax[a], 1e-6) / E4M3_MAX), s))
        new_inits.append(numpy_helper.from_array(np.zeros((), ml_dtypes.float8_e4m3fn), z))
        q, dq = "fp8a%d.q" % k, "fp8a%d.dq" % k
        pre_nodes[a] = [helper.make_node("QuantizeLinear", [a, s, z], [q], name="fp8a%d_q" % k, saturate=1),
                        helper.make_node("DequantizeLinear", [q, s, z], [dq], name="fp8a%d_dq" % k)]
        qdq_of[a] = dq
    wdq = {}
    for k, n in enumerate(targets):
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        sc = (np.maximum(np.max(np.abs(w), axis=0), 1e-12) / E4M3_MAX).astype(np.float32)
        q = np.clip(w / sc, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
        base = "fp8w%d" % k
        new_inits += [numpy_helper.from_array(q, base + ".q"), numpy_helper.from_array(sc, base + ".scale"),
                      numpy_helper.from_array(np.zeros(sc.shape, ml_dtypes.float8_e4m3fn), base + ".zp")]
        wdq[n.name] = helper.make_node("DequantizeLinear", [base + ".q", base + ".scale", base + ".zp"],
                                       [base + ".dq"], name=base + "_dq", axis=1)
    nodes = []
    for n in model.graph.node:
        if n.name in wdq:
            nodes.append(wdq[n.name])
            n.input[0] = qdq_of[n.input[0]]
            n.input[1] = wdq[n.name].output[0]
        nodes.append(n)
        for o in n.output:
            nodes += pre_nodes.pop(o, [])
    for a in list(pre_nodes):  # graph inputs (none for BERT, which starts at a Gather)
        nodes = pre_nodes.pop(a) + nodes
    used = {i for n in nodes for i in n.input}
    keep = [t for t in model.graph.initializer if t.name in used]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep + new_inits)
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = max(op.version, 19)
    model.ir_version = max(model.ir_version, 9)
    onnx.checker.check_model(model)
    return model


def make(out_dir, name, variant):
    """Write out_dir/<name>_<variant>.onnx (once) and return its path."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "%s_%s.onnx" % (name, variant))
    if not os.path.exists(out):
        quantize(name, variant, out)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for nm in NAMES:
        for v in VARIANTS:
            print(make(args.out, nm, v))
