#!/usr/bin/env python3
"""run_cpu_layout_tests.py - small CNNs that exercise the CPU backend's
channels-last regions (issue 35: the layout pass on by default where oneDNN's
convolution exists) against ONNX Runtime: convolutions with channel counts
that are not multiples of 16, stride 2, padding, groups; MaxPool (padded,
ceil_mode) and AveragePool (count_include_pad) on NHWC tensors through
oneDNN; Concat on the channel axis inside the region; opset-9 Sum + Relu
residuals; BatchNormalization -> Mul -> Add -> Relu before a padded Conv
(DenseNet's pre-activation); a region's tensor as a graph output. Each model
is built with a dynamic batch (1..4) and run at batch 1 and 3 through
run_model_tests.check_model; the build log must show the layout pass at work
(so a layout that silently stayed off fails here).

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime, onnx or numpy).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_model_tests as rmt  # noqa: E402  (exits 77 without onnx/ort/numpy)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(35)


class G:
    """A graph under construction: nodes and random initializers."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return "%s_%d" % (base, self.k)

    def const(self, arr):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), n))
        return n

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, pad=0, group=1, bias=True):
        w = self.const(RNG.standard_normal((cout, cin // group, k, k)) / np.sqrt(cin * k * k))
        ins = [x, w] + ([self.const(RNG.uniform(-0.2, 0.2, cout))] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=group)

    def bn(self, x, c):
        p = [self.const(RNG.uniform(0.5, 1.0, c)), self.const(RNG.uniform(-0.1, 0.1, c)),
             self.const(RNG.uniform(-0.1, 0.1, c)), self.const(RNG.uniform(0.5, 1.5, c))]
        return self.op("BatchNormalization", [x] + p, epsilon=1e-5)

    def model(self, x_shape, outputs, opset=11):
        """The model; output types and shapes from ONNX's shape inference."""
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
        g = helper.make_graph(self.nodes, "cpu_layout", [x], [], initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 4
        info = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
        m.graph.output.extend([info[o] for o in outputs])
        onnx.checker.check_model(m)
        return m


def fire():
    """SqueezeNet-like: stem, ceil-mode MaxPool, a fire module's Concat, pools
    on the Concat, a grouped stride-2 Conv, a padded MaxPool, global pool."""
    g = G()
    x = g.op("Relu", [g.conv("x", 3, 20, 3, stride=2, pad=1)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    s = g.op("Relu", [g.conv(x, 20, 6, 1)])
    a = g.op("Relu", [g.conv(s, 6, 12, 1)])
    b = g.op("Relu", [g.conv(s, 6, 13, 3, pad=1)])
    c = g.op("Concat", [a, b, x], axis=1)  # 12 + 13 + 20 = 45 channels
    c = g.op("AveragePool", [c], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
             count_include_pad=1)
    y = g.op("Relu", [g.conv(c, 45, 45, 3, stride=2, pad=1, group=5)])
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    z = g.op("GlobalAveragePool", [g.conv(y, 45, 10, 1)])
    return g.model(["batch", 3, 29, 23], [g.op("Flatten", [z], axis=1)])


def residual():
    """ResNet/DenseNet-like: opset-9 Sum + Relu residuals (one with a
    stride-2 projection), BN -> Mul -> Add -> Relu before a padded Conv, a
    Concat of a pool and a conv, and an NHWC tensor as a graph output."""
    g = G()
    a = g.op("Relu", [g.bn(g.conv("x", 3, 24, 3, pad=1, bias=False), 24)])
    r = g.bn(g.conv(g.op("Relu", [g.bn(g.conv(a, 24, 24, 3, pad=1, bias=False), 24)]),
                    24, 24, 3, pad=1, bias=False), 24)
    a = g.op("Relu", [g.op("Sum", [r, a])])
    p = g.conv(a, 24, 40, 1, stride=2, bias=False)
    r = g.conv(g.op("Relu", [g.conv(a, 24, 40, 3, stride=2, pad=1)]), 40, 40, 3, pad=1)
    a = g.op("Relu", [g.op("Sum", [p, r])])
    # DenseNet's pre-activation: BN, then a per-channel Mul and Add, Relu, Conv
    t = g.bn(a, 40)
    t = g.op("Mul", [t, g.const(RNG.uniform(0.5, 1.5, (40, 1, 1)))])
    t = g.op("Add", [t, g.const(RNG.uniform(-0.3, 0.3, (40, 1, 1)))])
    t = g.conv(g.op("Relu", [t]), 40, 8, 3, pad=1)
    m = g.op("MaxPool", [a], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    cat = g.op("Concat", [m, t], axis=1)  # 48 channels
    out = g.op("AveragePool", [cat], kernel_shape=[2, 2], strides=[2, 2])
    return g.model(["batch", 3, 21, 18], [out, a])


MODELS = {"cpu_fire": fire, "cpu_residual": residual}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    built = {}
    rmt.gen_models.build = lambda name, small=True: built.setdefault(name, MODELS[name]())
    failures = []
    for name in MODELS:
        work = os.path.join(args.work, name)
        failures += rmt.check_model(name, args.kiln, work, args.tol, build_args=["--verbose"])
        with open(os.path.join(work, "log.txt")) as f:
            log = f.read()
        if "channels-last" not in log or "layout:" not in log:
            failures.append("%s: the build log shows no channels-last region" % name)
        else:
            line = next(l for l in log.splitlines() if "layout:" in l)
            print("%-12s %s" % (name, line.strip()))
    for f in failures:
        print("FAIL:", f)
    print("%d model(s), %d failure(s)" % (len(MODELS), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
