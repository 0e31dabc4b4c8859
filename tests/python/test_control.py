"""Control flow (issue 32) against ONNX Runtime: an If on a shape fact (inlined
by the builder) whose branches read the outer x, and a Loop with an early exit
that reads the If's output and a constant limit from outside (run by the CPU kernel, scan output
sized at run time), over a dynamic batch. Models made here with onnx.helper;
inputs from a fixed seed."""
import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402


def _model(path, lim):
    V = h.make_tensor_value_info
    then_g = h.make_graph([h.make_node("Add", ["x", "one"], ["yt"])], "then", [],
                          [V("yt", T.FLOAT, ["N", 3])], [h.make_tensor("one", T.FLOAT, [], [1.0])])
    else_g = h.make_graph([h.make_node("Mul", ["x", "two"], ["ye"])], "else", [],
                          [V("ye", T.FLOAT, ["N", 3])], [h.make_tensor("two", T.FLOAT, [], [2.0])])
    body = h.make_graph([
        h.make_node("Add", ["s_in", "y"], ["s_out"]),
        h.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
        h.make_node("Less", ["tot", "lim"], ["c_out"]),
        h.make_node("Identity", ["s_out"], ["sc"])], "body",
        [V("i", T.INT64, []), V("c", T.BOOL, []), V("s_in", T.FLOAT, ["N", 3])],
        [V("c_out", T.BOOL, []), V("s_out", T.FLOAT, ["N", 3]), V("sc", T.FLOAT, ["N", 3])])
    g = h.make_graph([
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Gather", ["shp", "k1"], ["d1"], axis=0),
        h.make_node("Equal", ["d1", "k3"], ["cond"]),
        h.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        h.make_node("Loop", ["M", "t", "z"], ["s_fin", "scan"], body=body),
    ], "g", [V("x", T.FLOAT, ["N", 3]), V("z", T.FLOAT, ["N", 3])],
        [V("y", T.FLOAT, ["N", 3]), V("s_fin", T.FLOAT, ["N", 3]), V("scan", T.FLOAT, [None, "N", 3])],
        [h.make_tensor("k1", T.INT64, [], [1]), h.make_tensor("k3", T.INT64, [], [3]),
         h.make_tensor("M", T.INT64, [], [10]), h.make_tensor("t", T.BOOL, [], [1]),
         h.make_tensor("lim", T.FLOAT, [], [lim])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


@pytest.mark.parametrize("lim", [0.5, 12.0, 1e6])  # 1, a few, all 10 iterations
def test_if_and_loop_match_onnxruntime(tmp_path, lim):
    path = str(tmp_path / "control.onnx")
    _model(path, lim)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    z = np.abs(rng.standard_normal((2, 3))).astype(np.float32)
    feeds = {"x": x, "z": z}
    r = kiln.compare(path, inputs=feeds, shapes={"x": (2, 3), "z": (2, 3)}, atol=1e-5, rtol=1e-5)
    assert r.passed, r.table()
