#!/usr/bin/env python3
"""gen_models.py - build kiln's test and benchmark ONNX models with onnx.helper
and numpy: ResNet-50, MobileNetV2, BERT-base, ViT-B/16, ConvNeXt-T and
EfficientNet-B0 shaped networks (random weights, fixed seeds, opset 17,
dynamic batch "batch"), plus the tiny example CNN bundled as
examples/tiny_cnn.onnx.

BatchNorm statistics are measured on random batches (with ONNX Runtime) so
that activations stay O(1), as a trained network's would.

Usage:
  gen_models.py [--small] [--out DIR] [--models resnet50,mobilenetv2,bert,vit,convnext,efficientnet]
  gen_models.py --tiny-example examples/tiny_cnn.onnx
"""

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
ALL_MODELS = ("resnet50", "mobilenetv2", "bert", "vit", "convnext", "efficientnet", "vit_torch",
              "gpt2")


class Graph:
    """Collects nodes and initializers; hands out unique tensor names."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.outputs = []
        self.counts = {}
        self.bns = []  # (input, scale, bias, mean, var, gamma_range)

    def uniq(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else "%s_%d" % (base, n)

    def const(self, base, array):
        name = self.uniq(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, base=None, n_out=1, **attrs):
        base = base or op.lower()
        name = self.uniq(base)
        outs = [name if n_out == 1 else "%s_out%d" % (name, i) for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def add_input(self, name, elem, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def add_output(self, tensor, name, elem, shape):
        # Rename through Identity so the graph output has a stable name.
        self.nodes.append(helper.make_node("Identity", [tensor], [name], name=self.uniq(name)))
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kiln gen_models.py")
        m.ir_version = 8
        return m

    # ---- layers ----

    def weight(self, base, shape, std):
        return self.const(base, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=False, base="conv"):
        pad = (k - 1) // 2 if pad is None else pad
        fan_in = (cin // group) * k * k
        w = self.weight(base + ".weight", (cout, cin // group, k, k), math.sqrt(2.0 / fan_in))
        ins = [x, w]
        if bias:
            ins.append(self.const(base + ".bias",
                                  (self.rng.standard_normal(cout) * 0.01).astype(np.float32)))
        return self.node("Conv", ins, base, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=group, dilations=[1, 1])

    def bn(self, x, c, base="bn", gamma=(0.5, 1.0)):
        scale = self.const(base + ".weight", self.rng.uniform(*gamma, c).astype(np.float32))
        bias = self.const(base + ".bias", (self.rng.standard_normal(c) * 0.1).astype(np.float32))
        mean = self.const(base + ".running_mean", np.zeros(c, np.float32))
        var = self.const(base + ".running_var", np.ones(c, np.float32))
        self.bns.append((x, mean, var))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], base, epsilon=1e-5,
                         momentum=0.9)

    def linear(self, x, cin, cout, base, std=0.02):
        """x @ W + b as torch exports nn.Linear on 3-D inputs (MatMul + Add)."""
        w = self.weight(base + ".weight", (cin, cout), std)
        b = self.const(base + ".bias", (self.rng.standard_normal(cout) * 0.02).astype(np.float32))
        y = self.node("MatMul", [x, w], base + ".matmul")
        return self.node("Add", [y, b], base + ".add")

    def gemm(self, x, cin, cout, base):
        w = self.weight(base + ".weight", (cout, cin), 1.0 / math.sqrt(cin))
        b = self.const(base + ".bias", (self.rng.standard_normal(cout) * 0.01).astype(np.float32))
        return self.node("Gemm", [x, w, b], base, alpha=1.0, beta=1.0, transB=1)

    def layer_norm(self, x, c, base):
        g = self.const(base + ".weight",
                       (1.0 + self.rng.standard_normal(c) * 0.05).astype(np.float32))
        b = self.const(base + ".bias", (self.rng.standard_normal(c) * 0.02).astype(np.float32))
        return self.node("LayerNormalization", [x, g, b], base, axis=-1, epsilon=1e-5)

    def gelu_erf(self, x, base):
        """GELU as torch.onnx exports it at opset 17: x * 0.5 * (1 + erf(x / sqrt 2))."""
        d = self.node("Div", [x, self.const(base + ".sqrt2", np.array(1.4142135, np.float32))],
                      base + ".div")
        e = self.node("Erf", [d], base + ".erf")
        a = self.node("Add", [e, self.const(base + ".one", np.array(1.0, np.float32))],
                      base + ".add")
        m = self.node("Mul", [x, a], base + ".mul")
        return self.node("Mul", [m, self.const(base + ".half", np.array(0.5, np.float32))],
                         base + ".mul_half")

    def batch_dim(self, x, base):
        """The batch size of x as a 1-D int64 tensor: Shape -> Gather(0) -> Unsqueeze."""
        s = self.node("Shape", [x], base + ".shape")
        g = self.node("Gather", [s, self.const(base + ".idx0", np.array(0, np.int64))],
                      base + ".gather", axis=0)
        return self.node("Unsqueeze", [g, self.const(base + ".axes0", np.array([0], np.int64))],
                         base + ".unsqueeze")

    def shape_with_batch(self, batch, rest, base):
        """Concat(batch, rest...) as torch exports view(B, ...)."""
        parts = [batch] + [self.const(base + ".d%d" % i, np.array([v], np.int64))
                           for i, v in enumerate(rest)]
        return self.node("Concat", parts, base + ".concat", axis=0)


# ---------------------------------------------------------------- calibration

def calibrate_bn(g, model, feeds_list):
    """Set every BatchNorm's running mean/var to the statistics of its input on
    random batches, in graph order, so each BN sees the already-calibrated
    layers before it. Mean and var are graph inputs during calibration, so one
    ONNX Runtime session serves every step."""
    if not g.bns:
        return model
    import onnxruntime as ort

    stat_names = set()
    for _, mean, var in g.bns:
        stat_names.update((mean, var))
    cal = onnx.ModelProto()
    cal.CopyFrom(model)
    keep = [t for t in cal.graph.initializer if t.name not in stat_names]
    stats = {t.name: numpy_helper.to_array(t).copy() for t in cal.graph.initializer
             if t.name in stat_names}
    del cal.graph.initializer[:]
    cal.graph.initializer.extend(keep)
    for name, arr in stats.items():
        cal.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, arr.shape))
    del cal.graph.output[:]
    for x, _, _ in g.bns:
        cal.graph.output.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(cal.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1234)
    for i, (x, mean, var) in enumerate(g.bns):
        acc = []
        for feeds in feeds_list:
            out = sess.run([x], {**feeds, **stats})[0]
            acc.append(out)
        a = np.concatenate(acc, axis=0).astype(np.float64)
        m = a.mean(axis=(0, 2, 3))
        v = a.var(axis=(0, 2, 3)) + 1e-3
        # a little noise so the folded affine transform is not an exact whitening
        m = m + rng.standard_normal(m.shape) * 0.05 * np.sqrt(v)
        v = v * rng.uniform(0.9, 1.1, v.shape)
        stats[mean] = m.astype(np.float32)
        stats[var] = v.astype(np.float32)
    for t in model.graph.initializer:
        if t.name in stats:
            t.CopyFrom(numpy_helper.from_array(stats[t.name], t.name))
    return model


def image_feeds(shape, n=2, seed=99):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


# ---------------------------------------------------------------- ResNet-50

def resnet50(small):
    g = Graph("resnet50", seed=50)
    size = 64 if small else 224
    base = 8 if small else 64
    blocks = [1, 1, 2, 1] if small else [3, 4, 6, 3]
    classes = 10 if small else 1000
    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, size, size])
    y = g.conv(x, 3, base, 7, stride=2, pad=3, base="conv1")
    y = g.node("Relu", [g.bn(y, base, "bn1")], "relu")
    y = g.node("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = base
    for s, n in enumerate(blocks):
        width = base * (2 ** s)
        cout = width * 4
        for b in range(n):
            stride = 2 if (b == 0 and s > 0) else 1
            p = "layer%d.%d" % (s + 1, b)
            h = g.node("Relu", [g.bn(g.conv(y, cin, width, 1, base=p + ".conv1"), width,
                                     p + ".bn1")], p + ".relu1")
            h = g.node("Relu", [g.bn(g.conv(h, width, width, 3, stride=stride, base=p + ".conv2"),
                                     width, p + ".bn2")], p + ".relu2")
            h = g.bn(g.conv(h, width, cout, 1, base=p + ".conv3"), cout, p + ".bn3",
                     gamma=(0.2, 0.4))
            if stride != 1 or cin != cout:
                sc = g.bn(g.conv(y, cin, cout, 1, stride=stride, base=p + ".downsample.0"), cout,
                          p + ".downsample.1")
            else:
                sc = y
            y = g.node("Relu", [g.node("Add", [h, sc], p + ".add")], p + ".relu3")
            cin = cout
    y = g.node("GlobalAveragePool", [y], "avgpool")
    y = g.node("Flatten", [y], "flatten", axis=1)
    y = g.gemm(y, cin, classes, "fc")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", classes])
    m = g.model()
    return calibrate_bn(g, m, image_feeds((2, 3, size, size)))


# ---------------------------------------------------------------- MobileNetV2

def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def mobilenetv2(small):
    g = Graph("mobilenetv2", seed=2)
    size = 64 if small else 224
    mult = 0.25 if small else 1.0
    classes = 10 if small else 1000
    cfg = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
           [6, 160, 3, 2], [6, 320, 1, 1]]
    if small:
        cfg = [[t, c, max(1, n // 2), s] for t, c, n, s in cfg]
    lo = g.const("clip.min", np.array(0.0, np.float32))
    hi = g.const("clip.max", np.array(6.0, np.float32))

    def relu6(t, base):
        return g.node("Clip", [t, lo, hi], base)

    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, size, size])
    cin = make_divisible(32 * mult)
    y = relu6(g.bn(g.conv(x, 3, cin, 3, stride=2, base="features.0.0"), cin, "features.0.1"),
              "features.0.2")
    idx = 1
    for t, c, n, s in cfg:
        cout = make_divisible(c * mult)
        for i in range(n):
            stride = s if i == 0 else 1
            p = "features.%d" % idx
            hidden = cin * t
            h = y
            if t != 1:
                h = relu6(g.bn(g.conv(h, cin, hidden, 1, base=p + ".expand"), hidden,
                               p + ".expand_bn"), p + ".expand_relu6")
            h = relu6(g.bn(g.conv(h, hidden, hidden, 3, stride=stride, group=hidden,
                                  base=p + ".dw"), hidden, p + ".dw_bn"), p + ".dw_relu6")
            y = project(g, h, y, hidden, cin, cout, stride, p)
            cin = cout
            idx += 1
    last = make_divisible(1280 * max(1.0, mult))
    if small:
        last = 64
    return mobile_head(g, y, cin, last, classes, idx, relu6, size)


def project(g, h, y, hidden, cin, cout, stride, p):
    """An inverted residual block's end: the 1x1 projection with BatchNorm,
    and the skip from the block's input y when the shapes allow."""
    h = g.bn(g.conv(h, hidden, cout, 1, base=p + ".project"), cout, p + ".project_bn",
             gamma=(0.3, 0.6))
    return g.node("Add", [y, h], p + ".add") if stride == 1 and cin == cout else h


def mobile_head(g, y, cin, last, classes, idx, act, size):
    """The mobile networks' end: a 1x1 convolution to `last` channels with
    BatchNorm and act, the global pool and the classifier; BatchNorm
    calibrated on random images of `size`."""
    y = act(g.bn(g.conv(y, cin, last, 1, base="features.%d.0" % idx), last,
                 "features.%d.1" % idx), "features.%d.2" % idx)
    y = g.node("GlobalAveragePool", [y], "avgpool")
    y = g.node("Flatten", [y], "flatten", axis=1)
    y = g.gemm(y, last, classes, "classifier")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", classes])
    return calibrate_bn(g, g.model(), image_feeds((2, 3, size, size)))


# ---------------------------------------------------------------- ConvNeXt

def permute(g, x, perm, base):
    return g.node("Transpose", [x], base, perm=perm)


def layer_norm_2d(g, x, c, base):
    """torchvision's LayerNorm2d: permute to channels-last, LayerNorm over
    the channels, permute back."""
    y = permute(g, x, [0, 2, 3, 1], base + ".to_last")
    y = g.layer_norm(y, c, base)
    return permute(g, y, [0, 3, 1, 2], base + ".to_first")


def convnext(small):
    """ConvNeXt as torchvision builds it and torch.onnx exports it: a 4x4
    stride-4 stem, blocks of depthwise 7x7 -> permute -> LayerNorm -> Linear
    -> GELU -> Linear -> permute back -> a per-channel layer scale [C, 1, 1]
    -> the residual Add, LayerNorm2d + 2x2 stride-2 downsampling between
    stages."""
    g = Graph("convnext", seed=17)
    size = 64 if small else 224
    dims = (16, 32, 48, 64) if small else (96, 192, 384, 768)
    depths = (1, 1, 2, 1) if small else (3, 3, 9, 3)
    classes = 10 if small else 1000
    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, size, size])
    y = g.conv(x, 3, dims[0], 4, stride=4, pad=0, bias=True, base="features.0.0")
    y = layer_norm_2d(g, y, dims[0], "features.0.1")
    for s, (c, n) in enumerate(zip(dims, depths)):
        if s > 0:
            p = "features.%d" % (2 * s)
            y = layer_norm_2d(g, y, dims[s - 1], p + ".0")
            y = g.conv(y, dims[s - 1], c, 2, stride=2, pad=0, bias=True, base=p + ".1")
        for b in range(n):
            p = "features.%d.%d.block" % (2 * s + 1, b)
            h = g.conv(y, c, c, 7, pad=3, group=c, bias=True, base=p + ".0")
            h = permute(g, h, [0, 2, 3, 1], p + ".1")
            h = g.layer_norm(h, c, p + ".2")
            h = g.linear(h, c, 4 * c, p + ".3")
            h = g.gelu_erf(h, p + ".4")
            h = g.linear(h, 4 * c, c, p + ".5")
            h = permute(g, h, [0, 3, 1, 2], p + ".6")
            scale = g.const(p + ".layer_scale",
                            g.rng.uniform(0.2, 0.6, (c, 1, 1)).astype(np.float32))
            h = g.node("Mul", [scale, h], p + ".scale")
            y = g.node("Add", [h, y], p + ".add")
    y = g.node("GlobalAveragePool", [y], "avgpool")
    y = layer_norm_2d(g, y, dims[-1], "classifier.0")
    y = g.node("Flatten", [y], "classifier.1", axis=1)
    y = g.gemm(y, dims[-1], classes, "classifier.2")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", classes])
    return g.model()


# ---------------------------------------------------------------- EfficientNet

def efficientnet(small):
    """EfficientNet-B0's structure: MBConv blocks (1x1 expansion, depthwise
    3x3 or 5x5 with stride, squeeze-excitation: global pool -> 1x1 -> SiLU ->
    1x1 -> Sigmoid -> x * s, 1x1 projection), SiLU as x * sigmoid(x) the way
    torch.onnx exports it, BatchNorm after every convolution."""
    g = Graph("efficientnet", seed=21)
    size = 64 if small else 224
    classes = 10 if small else 1000
    # expand ratio, kernel, stride, out channels, repeats
    cfg = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
           (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    if small:
        cfg = [(1, 3, 1, 8, 1), (4, 3, 2, 12, 2), (4, 5, 2, 16, 1), (4, 3, 2, 24, 1),
               (4, 5, 1, 32, 1)]

    def silu(t, base):
        return g.node("Mul", [t, g.node("Sigmoid", [t], base + ".sigmoid")], base)

    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, size, size])
    cin = 8 if small else 32
    y = silu(g.bn(g.conv(x, 3, cin, 3, stride=2, base="features.0.0"), cin, "features.0.1"),
             "features.0.2")
    idx = 1
    for t, k, s, c, n in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            p = "features.%d.%d.block" % (idx, i)
            hidden = cin * t
            h = y
            if t != 1:
                h = silu(g.bn(g.conv(h, cin, hidden, 1, base=p + ".expand"), hidden,
                              p + ".expand_bn"), p + ".expand_act")
            h = silu(g.bn(g.conv(h, hidden, hidden, k, stride=stride, group=hidden,
                                 base=p + ".dw"), hidden, p + ".dw_bn"), p + ".dw_act")
            sq = max(1, cin // 4)
            e = g.node("GlobalAveragePool", [h], p + ".se.avgpool")
            e = silu(g.conv(e, hidden, sq, 1, bias=True, base=p + ".se.fc1"), p + ".se.act")
            e = g.node("Sigmoid", [g.conv(e, sq, hidden, 1, bias=True, base=p + ".se.fc2")],
                       p + ".se.gate")
            h = g.node("Mul", [h, e], p + ".se.mul")
            y = project(g, h, y, hidden, cin, c, stride, p)
            cin = c
        idx += 1
    return mobile_head(g, y, cin, 64 if small else 1280, classes, idx, silu, size)


# ---------------------------------------------------------------- attention

def self_attention(g, x, batch, seq, hidden, heads, base, mask=None, fused_qkv=False):
    """Multi-head attention as torch.onnx exports it: projections, view to
    (B, S, heads, dh) through a Shape/Gather/Concat chain, transposes, scaled
    scores, optional additive mask, softmax, context, view back, output
    projection."""
    dh = hidden // heads
    split_shape = g.shape_with_batch(batch, [seq, heads, dh], base + ".split_shape")
    if fused_qkv:
        qkv = g.linear(x, hidden, 3 * hidden, base + ".qkv")
        shape5 = g.shape_with_batch(batch, [seq, 3, heads, dh], base + ".qkv_shape")
        qkv = g.node("Reshape", [qkv, shape5], base + ".qkv_reshape")
        qkv = g.node("Transpose", [qkv], base + ".qkv_transpose", perm=[2, 0, 3, 1, 4])
        q, k, v = [g.node("Gather", [qkv, g.const(base + ".qkv_idx%d" % i,
                                                  np.array(i, np.int64))],
                          base + ".qkv_gather%d" % i, axis=0) for i in range(3)]
        kt = g.node("Transpose", [k], base + ".k_transpose", perm=[0, 1, 3, 2])
    else:
        def heads_view(t, name, perm):
            t = g.node("Reshape", [t, split_shape], base + "." + name + "_reshape")
            return g.node("Transpose", [t], base + "." + name + "_transpose", perm=perm)
        q = heads_view(g.linear(x, hidden, hidden, base + ".query"), "q", [0, 2, 1, 3])
        kt = heads_view(g.linear(x, hidden, hidden, base + ".key"), "k", [0, 2, 3, 1])
        v = heads_view(g.linear(x, hidden, hidden, base + ".value"), "v", [0, 2, 1, 3])
    scores = g.node("MatMul", [q, kt], base + ".scores")
    scores = g.node("Div", [scores, g.const(base + ".scale",
                                            np.array(math.sqrt(dh), np.float32))],
                    base + ".scores_div")
    if mask is not None:
        scores = g.node("Add", [scores, mask], base + ".scores_mask")
    probs = g.node("Softmax", [scores], base + ".softmax", axis=-1)
    ctx = g.node("MatMul", [probs, v], base + ".context")
    ctx = g.node("Transpose", [ctx], base + ".context_transpose", perm=[0, 2, 1, 3])
    merge_shape = g.shape_with_batch(batch, [seq, hidden], base + ".merge_shape")
    ctx = g.node("Reshape", [ctx, merge_shape], base + ".context_reshape")
    return g.linear(ctx, hidden, hidden, base + ".output.dense")


# ---------------------------------------------------------------- BERT-base

def bert(small):
    g = Graph("bert", seed=768)
    if small:
        layers, hidden, heads, ffn, vocab, seq, max_pos = 2, 64, 4, 256, 1000, 16, 64
    else:
        layers, hidden, heads, ffn, vocab, seq, max_pos = 12, 768, 12, 3072, 30522, 128, 512
    ids = g.add_input("input_ids", TensorProto.INT64, ["batch", seq])
    mask = g.add_input("attention_mask", TensorProto.INT64, ["batch", seq])

    word = g.weight("embeddings.word_embeddings.weight", (vocab, hidden), 0.02)
    pos = g.weight("embeddings.position_embeddings.weight", (max_pos, hidden), 0.02)
    typ = g.weight("embeddings.token_type_embeddings.weight", (2, hidden), 0.02)
    pos_ids = g.const("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None, :])
    type_ids = g.const("embeddings.token_type_ids", np.zeros((1, seq), np.int64))
    e = g.node("Gather", [word, ids], "embeddings.word", axis=0)
    e = g.node("Add", [e, g.node("Gather", [typ, type_ids], "embeddings.type", axis=0)],
               "embeddings.add_type")
    e = g.node("Add", [e, g.node("Gather", [pos, pos_ids], "embeddings.position", axis=0)],
               "embeddings.add_position")
    x = g.layer_norm(e, hidden, "embeddings.LayerNorm")

    # extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = g.node("Unsqueeze", [mask, g.const("mask.axes", np.array([1, 2], np.int64))],
               "mask.unsqueeze")
    m = g.node("Cast", [m], "mask.cast", to=TensorProto.FLOAT)
    m = g.node("Sub", [g.const("mask.one", np.array(1.0, np.float32)), m], "mask.sub")
    m = g.node("Mul", [m, g.const("mask.neg", np.array(-10000.0, np.float32))], "mask.mul")

    batch = g.batch_dim(ids, "batch")
    for i in range(layers):
        p = "encoder.layer.%d" % i
        a = self_attention(g, x, batch, seq, hidden, heads, p + ".attention", mask=m)
        x = g.layer_norm(g.node("Add", [a, x], p + ".attention.residual"), hidden,
                         p + ".attention.output.LayerNorm")
        h = g.linear(x, hidden, ffn, p + ".intermediate.dense")
        h = g.gelu_erf(h, p + ".intermediate.gelu")
        h = g.linear(h, ffn, hidden, p + ".output.dense")
        x = g.layer_norm(g.node("Add", [h, x], p + ".output.residual"), hidden,
                         p + ".output.LayerNorm")
    g.add_output(x, "last_hidden_state", TensorProto.FLOAT, ["batch", seq, hidden])
    first = g.node("Gather", [x, g.const("pooler.idx0", np.array(0, np.int64))],
                   "pooler.first_token", axis=1)
    pooled = g.node("Tanh", [g.gemm(first, hidden, hidden, "pooler.dense")], "pooler.tanh")
    g.add_output(pooled, "pooler_output", TensorProto.FLOAT, ["batch", hidden])
    return g.model()


# ---------------------------------------------------------------- ViT-B/16

def vit_config(small):
    """(size, patch, layers, hidden, heads, mlp, classes) of ViT-B/16 or the small one."""
    return (64, 16, 2, 64, 4, 128, 10) if small else (224, 16, 12, 768, 12, 3072, 1000)


def patch_tokens(g, size, patch, hidden, base):
    """The image input, its patch Conv, flatten(2) as torch exports it for a
    dynamic batch (a Reshape) and the permute to tokens: (tokens, batch)."""
    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, size, size])
    y = g.conv(x, 3, hidden, patch, stride=patch, pad=0, bias=True, base=base)
    batch = g.batch_dim(x, "batch")
    y = g.node("Reshape", [y, g.shape_with_batch(batch, [hidden, (size // patch) ** 2],
                                                 base + ".flatten_shape")], base + ".flatten")
    return g.node("Transpose", [y], base + ".tokens", perm=[0, 2, 1]), batch


def vit(small):
    g = Graph("vit", seed=16)
    size, patch, layers, hidden, heads, mlp, classes = vit_config(small)
    seq = (size // patch) ** 2 + 1
    y, batch = patch_tokens(g, size, patch, hidden, "patch_embed.proj")
    cls = g.weight("cls_token", (1, 1, hidden), 0.02)
    cls_shape = g.shape_with_batch(batch, [1, hidden], "cls_token.shape")
    cls = g.node("Expand", [cls, cls_shape], "cls_token.expand")
    y = g.node("Concat", [cls, y], "cls_token.concat", axis=1)
    y = g.node("Add", [y, g.weight("pos_embed", (1, seq, hidden), 0.02)], "pos_embed.add")
    for i in range(layers):
        p = "blocks.%d" % i
        a = self_attention(g, g.layer_norm(y, hidden, p + ".norm1"), batch, seq, hidden, heads,
                           p + ".attn", fused_qkv=True)
        y = g.node("Add", [y, a], p + ".residual1")
        h = g.linear(g.layer_norm(y, hidden, p + ".norm2"), hidden, mlp, p + ".mlp.fc1")
        h = g.linear(g.gelu_erf(h, p + ".mlp.gelu"), mlp, hidden, p + ".mlp.fc2")
        y = g.node("Add", [y, h], p + ".residual2")
    y = g.layer_norm(y, hidden, "norm")
    y = g.node("Gather", [y, g.const("head.idx0", np.array(0, np.int64))], "cls_select", axis=1)
    y = g.gemm(y, hidden, classes, "head")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", classes])
    return g.model()


# ---------------------------------------------------------------- torchvision ViT

def dim_of(g, x, idx, base):
    """x.size(idx) as torch exports it: Shape -> Gather (a scalar)."""
    s = g.node("Shape", [x], base + ".shape")
    return g.node("Gather", [s, g.const(base + ".idx", np.array(idx, np.int64))],
                  base + ".gather", axis=0)


def unsq(g, t, base):
    return g.node("Unsqueeze", [t, g.const(base + ".axes", np.array([0], np.int64))], base)


def concat_dims(g, parts, base):
    """Concat of 1-D int64 pieces: a tensor name, or a constant list."""
    ins = [p if isinstance(p, str) else g.const(base + ".c", np.array(p, np.int64)) for p in parts]
    return g.node("Concat", ins, base, axis=0)


def torch_mha(g, x, seq, hidden, heads, base):
    """nn.MultiheadAttention(batch_first=True)(x, x, x, need_weights=False)
    as the TorchScript exporter writes it (torchvision's ViT): to
    sequence-first, one packed projection, Unsqueeze / Transpose / Squeeze /
    Gather into Q, K, V, each reshaped to [S, B*H, D] from Shape-derived
    sizes, transposed and reshaped to [B, H, S, D], Q and K each scaled by
    sqrt(1/sqrt(D)); the context permuted back to [S, B, H, D], reshaped to
    rows, the output projection as a Gemm, and back to [B, S, E]."""
    dh = hidden // heads
    xt = g.node("Transpose", [x], base + ".to_seq", perm=[1, 0, 2])
    nb = dim_of(g, xt, 1, base + ".batch")
    w = g.weight(base + ".in_proj_weight_t", (hidden, 3 * hidden), 0.02)
    b = g.const(base + ".in_proj_bias", (g.rng.standard_normal(3 * hidden) * 0.02).astype(np.float32))
    pr = g.node("Add", [b, g.node("MatMul", [xt, w], base + ".in_proj")], base + ".in_proj_bias_add")
    lead = g.node("Slice", [g.node("Shape", [pr], base + ".proj_shape"),
                            g.const(base + ".s0", np.array([0], np.int64)),
                            g.const(base + ".s2", np.array([2], np.int64))], base + ".proj_lead")
    pr = g.node("Reshape", [pr, concat_dims(g, [lead, [3, hidden]], base + ".packed_shape")],
                base + ".packed")
    pr = g.node("Unsqueeze", [pr, g.const(base + ".ax0", np.array([0], np.int64))], base + ".unsq")
    pr = g.node("Transpose", [pr], base + ".qkv_first", perm=[3, 1, 2, 0, 4])
    pr = g.node("Squeeze", [pr, g.const(base + ".ax3", np.array([3], np.int64))], base + ".sq")
    bh = g.node("Mul", [nb, g.const(base + ".heads", np.array(heads, np.int64))], base + ".bh")
    s_lbd = concat_dims(g, [[seq], unsq(g, bh, base + ".bh1"), [dh]], base + ".lbd")
    s_bhld = concat_dims(g, [unsq(g, nb, base + ".nb1"), [heads, seq, dh]], base + ".bhld")
    root = g.const(base + ".root_scale", np.array(dh ** -0.25, np.float32))
    hv = []
    for i, name in enumerate("qkv"):
        t = g.node("Gather", [pr, g.const(base + ".i%d" % i, np.array(i, np.int64))],
                   base + "." + name, axis=0)
        t = g.node("Reshape", [t, s_lbd], base + "." + name + "_lbd")
        t = g.node("Transpose", [t], base + "." + name + "_bld", perm=[1, 0, 2])
        hv.append(g.node("Reshape", [t, s_bhld], base + "." + name + "4"))
    q = g.node("Mul", [hv[0], root], base + ".q_scale")
    k = g.node("Mul", [g.node("Transpose", [hv[1]], base + ".k_t", perm=[0, 1, 3, 2]), root],
               base + ".k_scale")
    pr = g.node("Softmax", [g.node("MatMul", [q, k], base + ".scores")], base + ".softmax", axis=-1)
    ctx = g.node("MatMul", [pr, hv[2]], base + ".context")
    ctx = g.node("Transpose", [ctx], base + ".context_seq", perm=[2, 0, 1, 3])
    rows = g.node("Mul", [nb, g.const(base + ".seq", np.array(seq, np.int64))], base + ".rows")
    ctx = g.node("Reshape", [ctx, concat_dims(g, [unsq(g, rows, base + ".rows1"), [hidden]],
                                              base + ".rows_shape")], base + ".context_rows")
    y = g.gemm(ctx, hidden, hidden, base + ".out_proj")
    y = g.node("Reshape", [y, concat_dims(g, [[seq], unsq(g, nb, base + ".nb2"), [hidden]],
                                          base + ".lbe")], base + ".out_lbe")
    return g.node("Transpose", [y], base + ".to_batch", perm=[1, 0, 2])


def vit_torch(small):
    """torchvision's vit_b_16 as torch.onnx exports it: the 16x16 patch Conv,
    flatten and permute to tokens, the class token, nn.MultiheadAttention
    (torch_mha), an MLP with erf GELU, pre-norm blocks."""
    g = Graph("vit_torch", seed=19)
    size, patch, layers, hidden, heads, mlp, classes = vit_config(small)
    seq = (size // patch) ** 2 + 1
    y, batch = patch_tokens(g, size, patch, hidden, "conv_proj")
    cls = g.node("Expand", [g.weight("class_token", (1, 1, hidden), 0.02),
                            g.shape_with_batch(batch, [1, hidden], "class_token.shape")],
                 "class_token.expand")
    y = g.node("Concat", [cls, y], "class_token.concat", axis=1)
    y = g.node("Add", [y, g.weight("pos_embedding", (1, seq, hidden), 0.02)], "pos_add")
    for i in range(layers):
        p = "encoder.layers.%d" % i
        a = torch_mha(g, g.layer_norm(y, hidden, p + ".ln_1"), seq, hidden, heads,
                      p + ".self_attention")
        y = g.node("Add", [a, y], p + ".residual1")
        h = g.linear(g.layer_norm(y, hidden, p + ".ln_2"), hidden, mlp, p + ".mlp.0")
        h = g.linear(g.gelu_erf(h, p + ".mlp.1"), mlp, hidden, p + ".mlp.3")
        y = g.node("Add", [y, h], p + ".residual2")
    y = g.layer_norm(y, hidden, "encoder.ln")
    y = g.node("Gather", [y, g.const("cls_idx", np.array(0, np.int64))], "cls_select", axis=1)
    y = g.gemm(y, hidden, classes, "heads.head")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", classes])
    return g.model()


# ---------------------------------------------------------------- GPT-2

def conv1d(g, x, cin, cout, lead, base):
    """transformers' Conv1D as exported: x viewed as rows, a Gemm, the rows
    viewed back with x's leading dims (Shape-derived)."""
    r = g.node("Reshape", [x, g.const(base + ".rows", np.array([-1, cin], np.int64))],
               base + ".view_rows")
    w = g.weight(base + ".weight", (cin, cout), 0.02)
    b = g.const(base + ".bias", (g.rng.standard_normal(cout) * 0.02).astype(np.float32))
    y = g.node("Gemm", [r, w, b], base + ".gemm", alpha=1.0, beta=1.0)
    return g.node("Reshape", [y, concat_dims(g, [lead, [cout]], base + ".out_shape")],
                  base + ".view_back")


def gelu_tanh(g, x, base):
    """gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    c = lambda n, v: g.const(base + "." + n, np.array(v, np.float32))  # noqa: E731
    x3 = g.node("Pow", [x, c("three", 3.0)], base + ".pow")
    t = g.node("Add", [x, g.node("Mul", [x3, c("k", 0.044715)], base + ".mul_k")], base + ".add")
    t = g.node("Tanh", [g.node("Mul", [t, c("s", math.sqrt(2 / math.pi))], base + ".mul_s")],
               base + ".tanh")
    t = g.node("Add", [t, c("one", 1.0)], base + ".add_one")
    return g.node("Mul", [g.node("Mul", [x, c("half", 0.5)], base + ".half"), t], base + ".mul")


def gpt2(small):
    """GPT-2 blocks as exported with eager attention: Conv1D projections
    between row views, Q, K, V split from one, a constant causal mask added
    to the scaled scores, the float softmax cast to float, tanh GELU."""
    g = Graph("gpt2", seed=1024)
    if small:
        layers, hidden, heads, vocab, seq = 2, 64, 4, 500, 16
    else:
        layers, hidden, heads, vocab, seq = 12, 768, 12, 50257, 128
    dh = hidden // heads
    ids = g.add_input("input_ids", TensorProto.INT64, ["batch", seq])
    x = g.node("Gather", [g.weight("wte", (vocab, hidden), 0.02), ids], "wte", axis=0)
    x = g.node("Add", [x, g.weight("wpe", (1, seq, hidden), 0.01)], "wpe_add")
    causal = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)[None, None]
    mask = g.const("causal_mask", causal)
    for i in range(layers):
        p = "h.%d" % i
        h = g.layer_norm(x, hidden, p + ".ln_1")
        lead = g.node("Slice", [g.node("Shape", [h], p + ".shape"),
                                g.const(p + ".s0", np.array([0], np.int64)),
                                g.const(p + ".s2", np.array([2], np.int64))], p + ".lead")
        qkv = conv1d(g, h, hidden, 3 * hidden, lead, p + ".attn.c_attn")
        q, k, v = g.node("Split", [qkv, g.const(p + ".split", np.array([hidden] * 3, np.int64))],
                         p + ".attn.split", n_out=3, axis=2)
        heads_shape = concat_dims(g, [lead, [heads, dh]], p + ".attn.heads")
        q = g.node("Transpose", [g.node("Reshape", [q, heads_shape], p + ".attn.q")],
                   p + ".attn.q_t", perm=[0, 2, 1, 3])
        k = g.node("Transpose", [g.node("Reshape", [k, heads_shape], p + ".attn.k")],
                   p + ".attn.k_t", perm=[0, 2, 3, 1])
        v = g.node("Transpose", [g.node("Reshape", [v, heads_shape], p + ".attn.v")],
                   p + ".attn.v_t", perm=[0, 2, 1, 3])
        s = g.node("Mul", [g.node("MatMul", [q, k], p + ".attn.scores"),
                           g.const(p + ".attn.scale", np.array(dh ** -0.5, np.float32))],
                   p + ".attn.scale_mul")
        s = g.node("Softmax", [g.node("Add", [s, mask], p + ".attn.mask")], p + ".attn.softmax",
                   axis=-1)
        s = g.node("Cast", [s], p + ".attn.cast", to=TensorProto.FLOAT)
        o = g.node("Transpose", [g.node("MatMul", [s, v], p + ".attn.context")],
                   p + ".attn.context_t", perm=[0, 2, 1, 3])
        o = g.node("Reshape", [o, concat_dims(g, [lead, [hidden]], p + ".attn.merge")],
                   p + ".attn.merge_heads")
        x = g.node("Add", [conv1d(g, o, hidden, hidden, lead, p + ".attn.c_proj"), x],
                   p + ".residual1")
        h = g.layer_norm(x, hidden, p + ".ln_2")
        h = gelu_tanh(g, conv1d(g, h, hidden, 4 * hidden, lead, p + ".mlp.c_fc"), p + ".mlp.act")
        x = g.node("Add", [conv1d(g, h, 4 * hidden, hidden, lead, p + ".mlp.c_proj"), x],
                   p + ".residual2")
    x = g.layer_norm(x, hidden, "ln_f")
    g.add_output(x, "last_hidden_state", TensorProto.FLOAT, ["batch", seq, hidden])
    return g.model()


# ---------------------------------------------------------------- tiny example

def tiny_cnn():
    """A small residual CNN for the README's example (well under 1 MB)."""
    g = Graph("tiny_cnn", seed=7)
    x = g.add_input("input", TensorProto.FLOAT, ["batch", 3, 64, 64])
    y = g.node("Relu", [g.bn(g.conv(x, 3, 16, 3, stride=2, base="conv1"), 16, "bn1")], "relu1")
    y = g.node("MaxPool", [y], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    h = g.node("Relu", [g.bn(g.conv(y, 16, 16, 3, base="conv2"), 16, "bn2")], "relu2")
    h = g.bn(g.conv(h, 16, 16, 3, base="conv3"), 16, "bn3", gamma=(0.3, 0.6))
    y = g.node("Relu", [g.node("Add", [h, y], "add")], "relu3")
    y = g.node("Relu", [g.bn(g.conv(y, 16, 32, 3, stride=2, base="conv4"), 32, "bn4")], "relu4")
    y = g.node("GlobalAveragePool", [y], "avgpool")
    y = g.node("Flatten", [y], "flatten", axis=1)
    y = g.gemm(y, 32, 10, "fc")
    g.add_output(y, "output", TensorProto.FLOAT, ["batch", 10])
    return calibrate_bn(g, g.model(), image_feeds((4, 3, 64, 64)))


def shape_tensor_model():
    """Reshape of a static tensor to a shape given as a graph input (a shape
    tensor), for the CLI's shape-tensor handling (tests/models/shape_tensor.onnx)."""
    g = Graph("shape_tensor", seed=3)
    x = g.add_input("x", TensorProto.FLOAT, [2, 12])
    shape = g.add_input("target_shape", TensorProto.INT64, [2])
    y = g.node("Relu", [g.node("Reshape", [x, shape], "reshape")], "relu")
    g.add_output(y, "y", TensorProto.FLOAT, ["rows", "cols"])
    return g.model()


BUILDERS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert": bert, "vit": vit,
            "convnext": convnext, "efficientnet": efficientnet, "vit_torch": vit_torch,
            "gpt2": gpt2}


def build(name, small):
    m = BUILDERS[name](small)
    onnx.checker.check_model(m)
    return m


def main(argv=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true",
                    help="reduced widths and depth (for tests; seconds to build and run)")
    ap.add_argument("--out", help="output folder (default build/models or build/models-small)")
    ap.add_argument("--models", default=",".join(ALL_MODELS),
                    help="comma-separated subset of " + ",".join(ALL_MODELS))
    ap.add_argument("--tiny-example", metavar="PATH",
                    help="write only the tiny example CNN to PATH")
    ap.add_argument("--shape-tensor-example", metavar="PATH",
                    help="write only the shape-tensor test model to PATH")
    args = ap.parse_args(argv)
    if args.shape_tensor_example:
        m = shape_tensor_model()
        onnx.checker.check_model(m)
        onnx.save(m, args.shape_tensor_example)
        print("wrote %s" % args.shape_tensor_example)
        return 0
    if args.tiny_example:
        m = tiny_cnn()
        onnx.checker.check_model(m)
        onnx.save(m, args.tiny_example)
        print("wrote %s (%d bytes)" % (args.tiny_example, os.path.getsize(args.tiny_example)))
        return 0
    out = args.out or os.path.join(root, "build", "models-small" if args.small else "models")
    os.makedirs(out, exist_ok=True)
    for name in args.models.split(","):
        if name not in BUILDERS:
            print("gen_models.py: unknown model '%s' (have %s)" % (name, ", ".join(ALL_MODELS)),
                  file=sys.stderr)
            return 2
        path = os.path.join(out, name + ".onnx")
        onnx.save(build(name, args.small), path)
        print("wrote %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
