#!/usr/bin/env python3
"""gen_models.py - small models for the accuracy-tool tests (tests/accuracy).

mlp.onnx        a correct MLP (MatMul, Add, Relu, Tanh, Softmax)
mlp_bad.onnx    the same MLP with one weight perturbed: kiln runs the bad
                model, the reference the good one (--model), so compare fails
fragile.onnx    positive MLP whose last layer ('big_scale') overflows FP16;
                every other layer is fine in FP16
chain50.onnx    a 50-node chain with one planted node ('planted_overflow')
                whose output overflows FP16, for `kiln debug reduce`
attrs.onnx      attributes of every kind (ints, floats, strings, a tensor)
multi.onnx      Identity paths for float, fp16, int64, bool, uint8, double, bf16
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def save(graph, path):
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="kiln-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def mlp(path, perturb=False):
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
    b1 = (rng.standard_normal(32) / 10).astype(np.float32)
    w2 = (rng.standard_normal((32, 8)) / 6).astype(np.float32)
    b2 = (rng.standard_normal(8) / 10).astype(np.float32)
    if perturb:
        w2 = w2.copy()
        w2[3, 5] += 0.5
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h2"], name="fc1_bias"),
        helper.make_node("Relu", ["h2"], ["h3"], name="relu1"),
        helper.make_node("MatMul", ["h3", "w2"], ["h4"], name="fc2"),
        helper.make_node("Add", ["h4", "b2"], ["h5"], name="fc2_bias"),
        helper.make_node("Tanh", ["h5"], ["t"], name="tanh"),
        helper.make_node("Softmax", ["h5"], ["probs"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("t", T.FLOAT, [4, 8]),
         helper.make_tensor_value_info("probs", T.FLOAT, [4, 8])],
        [const("w1", w1), const("b1", b1), const("w2", w2), const("b2", b2)])
    save(g, path)


def fragile(path):
    rng = np.random.default_rng(11)
    w1 = rng.uniform(0.0, 0.1, (32, 32)).astype(np.float32)
    b1 = rng.uniform(0.0, 0.1, 32).astype(np.float32)
    w2 = rng.uniform(0.1, 0.2, (32, 16)).astype(np.float32)  # d is about 2.6
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="fc1"),
        helper.make_node("Add", ["a", "b1"], ["b"], name="fc1_bias"),
        helper.make_node("Sigmoid", ["b"], ["c"], name="sigmoid"),
        helper.make_node("MatMul", ["c", "w2"], ["d"], name="fc2"),
        helper.make_node("Mul", ["d", "scale"], ["y"], name="big_scale"),
    ]
    g = helper.make_graph(
        nodes, "fragile",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 16])],
        [const("w1", w1), const("b1", b1), const("w2", w2),
         const("scale", np.array(6e4, np.float32))])  # in float16's range: d * scale is not
    save(g, path)


def chain50(path, planted=27):
    """50 nodes of bounded values; node `planted` multiplies (a MatMul by
    6e4 * I) values the node before it shifted to (2, 4), over the FP16 range
    (the constant itself is in range: kiln clamps out-of-range constants),
    and the next node divides it back."""
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    cur = "x"
    ops = ["MatMul", "Tanh", "Add", "Sigmoid", "Mul", "Relu"]
    for i in range(50):
        out = f"t{i}"
        if i == planted - 1:
            inits.append(const("shift", np.array(3.0, np.float32)))
            nodes.append(helper.make_node("Add", [cur, "shift"], [out], name=f"n{i}_shift"))
        elif i == planted:
            # a product stored between layers: elementwise chains compute in
            # float registers and would hide a scalar overflow
            inits.append(const("big", (np.eye(16) * 6e4).astype(np.float32)))
            nodes.append(helper.make_node("MatMul", [cur, "big"], [out], name="planted_overflow"))
        elif i == planted + 1:
            inits.append(const("small", np.array(1.0 / 6e4, np.float32)))
            nodes.append(helper.make_node("Mul", [cur, "small"], [out], name=f"n{i}_unscale"))
        else:
            op = ops[i % len(ops)]
            if op == "MatMul":
                w = f"w{i}"
                inits.append(const(w, (rng.standard_normal((16, 16)) / 4).astype(np.float32)))
                nodes.append(helper.make_node("MatMul", [cur, w], [out], name=f"n{i}_matmul"))
            elif op == "Add":
                c = f"c{i}"
                inits.append(const(c, (rng.standard_normal(16) / 10).astype(np.float32)))
                nodes.append(helper.make_node("Add", [cur, c], [out], name=f"n{i}_add"))
            elif op == "Mul":
                c = f"c{i}"
                inits.append(const(c, rng.uniform(0.5, 1.5, 16).astype(np.float32)))
                nodes.append(helper.make_node("Mul", [cur, c], [out], name=f"n{i}_mul"))
            else:
                nodes.append(helper.make_node(op, [cur], [out], name=f"n{i}_{op.lower()}"))
        cur = out
    g = helper.make_graph(
        nodes, "chain50",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 16])],
        [helper.make_tensor_value_info(cur, T.FLOAT, [2, 16])], inits)
    save(g, path)


def multi(path):
    ins = [("xf", T.FLOAT, [2, 3]), ("xh", T.FLOAT16, [5]), ("xi", T.INT64, [2, 2]),
           ("xb", T.BOOL, [3]), ("xu8", T.UINT8, [4]), ("xd", T.DOUBLE, [2]),
           ("xbf", T.BFLOAT16, [3])]
    nodes = [helper.make_node("Identity", [n], [n + "_out"], name="id_" + n) for n, _, _ in ins]
    g = helper.make_graph(
        nodes, "multi",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
        [helper.make_tensor_value_info(n + "_out", t, s) for n, t, s in ins])
    save(g, path)


def attrs(path):
    """Attributes of every kind the writer must carry: ints, floats, strings,
    tensors; a dynamic batch dimension with a name."""
    rng = np.random.default_rng(13)
    w = (rng.standard_normal((4, 2, 3, 3)) / 3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         strides=[1, 1], dilations=[1, 1], group=1, kernel_shape=[3, 3]),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.07),
        helper.make_node("Resize", ["l", "", "scales"], ["r"], name="resize", mode="nearest",
                         coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor"),
        helper.make_node("ReduceMean", ["r"], ["m"], name="mean", axes=[2, 3], keepdims=1),
        helper.make_node("Transpose", ["m"], ["tr"], name="transpose", perm=[0, 2, 3, 1]),
        helper.make_node("Shape", ["tr"], ["shp"], name="shape"),
        helper.make_node("ConstantOfShape", ["shp"], ["fill"], name="fill",
                         value=numpy_helper.from_array(np.array([0.25], np.float32))),
        helper.make_node("Add", ["tr", "fill"], ["y"], name="add_fill"),
    ]
    g = helper.make_graph(
        nodes, "attrs",
        [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 2, 5, 5])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 1, 1, 4])],
        [const("w", w), const("scales", np.array([1, 1, 2, 2], np.float32))])
    save(g, path)


def main_into(out):
    os.makedirs(out, exist_ok=True)
    mlp(os.path.join(out, "mlp.onnx"))
    mlp(os.path.join(out, "mlp_bad.onnx"), perturb=True)
    fragile(os.path.join(out, "fragile.onnx"))
    chain50(os.path.join(out, "chain50.onnx"))
    multi(os.path.join(out, "multi.onnx"))
    attrs(os.path.join(out, "attrs.onnx"))


def main():
    main_into(sys.argv[1] if len(sys.argv) > 1 else ".")


if __name__ == "__main__":
    main()
