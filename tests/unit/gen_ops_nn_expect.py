# gen_ops_nn_expect.py - writes test_ops_nn_expect.h: expected outputs for
# test_ops_nn.c from ONNX Runtime, on the deterministic inputs kt_data makes.
# Run: python gen_ops_nn_expect.py > test_ops_nn_expect.h
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto as TP

def data(shape, seed):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n, dtype=np.int64)
    v = ((i * 7919 + seed * 104729) % 2001).astype(np.float64) / 1000.0 - 1.0
    return v.astype(np.float32).reshape(shape)

NP2TP = {np.float32: TP.FLOAT, np.int32: TP.INT32, np.int64: TP.INT64, np.bool_: TP.BOOL}
out_lines = []

def case(name, op, inputs, outputs, opset, **attrs):
    # inputs: list of (name, array or None)
    ins = [helper.make_tensor_value_info(n, NP2TP[a.dtype.type], a.shape) for n, a in inputs if a is not None]
    outs = [helper.make_tensor_value_info(o, TP.INT64 if o == "I" else TP.FLOAT, None) for o in outputs]
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs], outputs, **attrs)
    g = helper.make_graph([node], name, ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    res = s.run(None, {n: a for n, a in inputs if a is not None})
    for o, r in zip(outputs, res):
        r = np.asarray(r)
        flat = ", ".join(("%d" % v) if r.dtype.kind in "iu" else ("%.9g" % v) for v in r.reshape(-1))
        ctype = "int64_t" if r.dtype.kind in "iu" else "float"
        out_lines.append("/* %s %s: shape %s */" % (name, o, list(r.shape)))
        out_lines.append("static const %s exp_%s_%s[%d] = {%s};" % (ctype, name, o, r.size, flat))

# LSTM, bidirectional, sequence lengths, initial states, peepholes
S, Bt, I, H = 3, 2, 3, 4
case("lstm", "LSTM", [("X", data([S, Bt, I], 1)), ("W", data([2, 4 * H, I], 2) * 0.5),
                      ("R", data([2, 4 * H, H], 3) * 0.5), ("B", data([2, 8 * H], 4) * 0.3),
                      ("L", np.array([3, 2], np.int32)), ("H0", data([2, Bt, H], 5) * 0.2),
                      ("C0", data([2, Bt, H], 6) * 0.2), ("P", data([2, 3 * H], 7) * 0.3)],
     ["Y", "Yh", "Yc"], 14, hidden_size=H, direction="bidirectional")
# GRU, bidirectional, linear_before_reset
S, Bt, I, H = 4, 2, 3, 3
case("gru", "GRU", [("X", data([S, Bt, I], 11)), ("W", data([2, 3 * H, I], 12) * 0.5),
                    ("R", data([2, 3 * H, H], 13) * 0.5), ("B", data([2, 6 * H], 14) * 0.3)],
     ["Y", "Yh"], 14, hidden_size=H, direction="bidirectional", linear_before_reset=1)
# GRU, forward, linear_before_reset 0 (the default): unit k's reset gate
# scales h[k] before the product with Rh
S, Bt, I, H = 4, 2, 3, 3
case("gru0", "GRU", [("X", data([S, Bt, I], 15)), ("W", data([1, 3 * H, I], 16) * 0.5),
                     ("R", data([1, 3 * H, H], 17) * 0.8), ("B", data([1, 6 * H], 18) * 0.3)],
     ["Y", "Yh"], 14, hidden_size=H)
# RNN, reverse, Relu, with initial state
S, Bt, I, H = 3, 2, 2, 3
case("rnn", "RNN", [("X", data([S, Bt, I], 21)), ("W", data([1, H, I], 22)),
                    ("R", data([1, H, H], 23) * 0.5), ("B", data([1, 2 * H], 24) * 0.3),
                    ("L", None), ("H0", data([1, Bt, H], 25))],
     ["Y", "Yh"], 14, hidden_size=H, direction="reverse", activations=["Relu"])
# MaxPool, ceil mode, with indices
case("maxpool", "MaxPool", [("X", data([1, 2, 5, 5], 31))], ["Y", "I"], 12,
     kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
case("maxpool_so", "MaxPool", [("X", data([1, 1, 4, 3], 32))], ["Y", "I"], 12,
     kernel_shape=[2, 2], strides=[1, 1], storage_order=1)
# AveragePool, ceil mode, pads, count_include_pad
case("avgpool", "AveragePool", [("X", data([1, 1, 5, 5], 33))], ["Y"], 19,
     kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
case("avgpool_ex", "AveragePool", [("X", data([1, 1, 5, 5], 33))], ["Y"], 19,
     kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
# LayerNorm over the last two dims, with Mean and InvStdDev
case("layernorm", "LayerNormalization", [("X", data([2, 3, 4], 41)), ("S", data([3, 4], 42)),
                                          ("B", data([4], 43))], ["Y", "M", "R"], 17, axis=1, epsilon=1e-3)
# GroupNorm (opset 21: per-channel scale and bias)
case("groupnorm", "GroupNormalization", [("X", data([2, 4, 3], 51)), ("S", data([4], 52)),
                                          ("B", data([4], 53))], ["Y"], 21, num_groups=2)
case("rmsnorm", "RMSNormalization", [("X", data([2, 3, 4], 44)), ("S", data([3, 4], 45))], ["Y"],
     23, axis=-2, epsilon=1e-3)
case("lrn", "LRN", [("X", data([1, 5, 2, 2], 61))], ["Y"], 13, size=3, alpha=0.1, beta=0.6, bias=1.5)
case("mvn", "MeanVarianceNormalization", [("X", data([2, 3, 2, 2], 62))], ["Y"], 13)
case("lpnorm", "LpNormalization", [("X", data([2, 3, 2], 63))], ["Y"], 1, axis=1, p=1)
case("instnorm", "InstanceNormalization", [("X", data([2, 3, 4], 64)), ("S", data([3], 65)),
                                            ("B", data([3], 66))], ["Y"], 6, epsilon=1e-2)
# ConvTranspose: groups, strides, asymmetric pads, output_padding, dilations, bias
case("convt", "ConvTranspose", [("X", data([1, 4, 3, 3], 71)), ("W", data([4, 3, 3, 3], 72)),
                                 ("B", data([6], 73))], ["Y"], 11, group=2, strides=[2, 2],
     pads=[1, 0, 0, 1], output_padding=[1, 1], dilations=[1, 2])
# Gemm: both transposed, vector C
case("gemm", "Gemm", [("A", data([4, 3], 81)), ("B", data([5, 4], 82)), ("C", data([5], 83))],
     ["Y"], 13, transA=1, transB=1, alpha=0.5, beta=2.0)
# Einsum: batched matmul with a broadcast ellipsis, and a diagonal
case("einsum", "Einsum", [("A", data([2, 1, 2, 3], 91)), ("B", data([1, 3, 3, 4], 92))], ["Y"], 12,
     equation="...ij,...jk->...ik")
case("einsum_diag", "Einsum", [("A", data([3, 3], 93))], ["Y"], 12, equation="ii->i")

# Attention (opset 23): 4-D grouped-query heads, bool mask, causal with a past cache,
# present caches and the softmax output; 3-D heads with a float mask, softcap, scale
B, QH, KVH, QS, KS, P, H, VH = 2, 4, 2, 3, 4, 2, 5, 3
case("att4", "Attention", [("Q", data([B, QH, QS, H], 1)), ("K", data([B, KVH, KS, H], 2)),
                           ("V", data([B, KVH, KS, VH], 4)), ("M", data([QS, P + KS], 3) > -0.5),
                           ("PK", data([B, KVH, P, H], 5)), ("PV", data([B, KVH, P, VH], 6))],
     ["Y", "PKo", "PVo", "QK"], 23, is_causal=1, qk_matmul_output_mode=3)
case("att3", "Attention", [("Q", data([2, 3, 8], 11)), ("K", data([2, 5, 4], 12)),
                           ("V", data([2, 5, 6], 13)), ("M", data([1, 3, 5], 14))], ["Y"], 23,
     q_num_heads=2, kv_num_heads=1, softcap=2.0, scale=0.7)

print("/* test_ops_nn_expect.h - expected outputs for test_ops_nn.c, computed once with")
print(" * ONNX Runtime %s from the same deterministic inputs (kt_data). */" % ort.__version__)
print("\n".join(out_lines))
