#!/usr/bin/env python3
"""gen_graph_cases.py - damaged ONNX graphs for the bad-input catalog
(tests/bad/onnx/graph_*.onnx). Each is well-formed protobuf with a graph
that is wrong; tests/unit/test_bad_graphs.c holds the error each must give.
Run with a python that has onnx: python tests/bad/gen_graph_cases.py"""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx")


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


cases = {}
# a cycle: a = Relu(b), b = Relu(a)
cases["graph_cycle"] = model(
    [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
     helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
     helper.make_node("Relu", ["a"], ["y"], name="out")],
    [vi("x", [4])], [vi("y", [4])])
# a tensor no node produces
cases["graph_dangling"] = model(
    [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")],
    [vi("x", [4])], [vi("y", [4])])
# an input with a negative dimension
cases["graph_negative_dim"] = model(
    [helper.make_node("Relu", ["x"], ["y"], name="relu")],
    [vi("x", [2, -3])], [vi("y", [2, 3])])
# an initializer whose dims overflow 64-bit element counts
big = TensorProto()
big.name = "w"
big.data_type = TensorProto.FLOAT
big.dims.extend([1 << 40, 1 << 40])
big.raw_data = b"\0" * 16
cases["graph_overflow_dims"] = model(
    [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
    [vi("x", [4])], [vi("y", [4])], [big])
# an initializer that declares far more elements than its bytes hold
short = numpy_helper.from_array(np.zeros(4, np.float32), "w")
del short.dims[:]
short.dims.extend([1000000])
cases["graph_short_initializer"] = model(
    [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
    [vi("x", [1000000])], [vi("y", [1000000])], [short])
# an output nothing produces
cases["graph_missing_output"] = model(
    [helper.make_node("Relu", ["x"], ["y"], name="relu")],
    [vi("x", [4])], [vi("y", [4]), vi("nowhere", [4])])
# two nodes writing one tensor
cases["graph_double_write"] = model(
    [helper.make_node("Relu", ["x"], ["y"], name="first"),
     helper.make_node("Neg", ["x"], ["y"], name="second")],
    [vi("x", [4])], [vi("y", [4])])

for name, m in cases.items():
    save(m, os.path.join(here, name + ".onnx"))
    print("wrote", name)
