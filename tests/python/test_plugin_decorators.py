"""kiln.plugin's tensorrt.plugin-style decorators (register / impl /
autotune), end to end: define plugins, use them from an ONNX model in a
custom domain, build a plan, save and load it, run it, check the values; and
the errors of a bad definition."""
import gc
from typing import Tuple

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import kiln
import kiln.plugin as trtp
from kiln import _qdp


def qdp_model(path, nodes, inputs, outputs, domain):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(domain, 1)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def decorated():
    calls = {"impl": 0, "autotune": 0}

    @trtp.register("qdpt::scale_add")
    def scale_add_desc(x: trtp.TensorDesc, y: trtp.TensorDesc, alpha: float,
                       bias: float = 0.5) -> trtp.TensorDesc:
        return x.like()

    @trtp.impl("qdpt::scale_add")
    def scale_add_impl(x: trtp.Tensor, y: trtp.Tensor, alpha: float, bias: float,
                       outputs: Tuple[trtp.Tensor], stream: int) -> None:
        calls["impl"] += 1
        assert stream == 0 and not x.on_device
        np.copyto(np.asarray(outputs[0]), np.asarray(x) * alpha + np.asarray(y) + bias)

    @trtp.autotune("qdpt::scale_add")
    def scale_add_tune(x: trtp.TensorDesc, y: trtp.TensorDesc,
                       outputs: Tuple[trtp.TensorDesc]):
        calls["autotune"] += 1
        return [trtp.AutoTuneCombination("FP32, FP32, FP32", "LINEAR")]

    # two outputs, shape expressions over both inputs' dimensions
    @trtp.register("qdpt::cat_rows")
    def cat_desc(a: trtp.TensorDesc, b: trtp.TensorDesc,
                 reps: int) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        rows = a.shape_expr[0] + b.shape_expr[0]
        first = trtp.from_shape_expr((rows, a.shape_expr[1]), dtype=a.dtype)
        second = trtp.from_shape_expr((trtp.cdiv(rows, 2) * reps, a.shape_expr[1]),
                                      dtype=kiln.DataType.FLOAT)
        return first, second

    @trtp.impl("qdpt::cat_rows")
    def cat_impl(a: trtp.Tensor, b: trtp.Tensor, reps: int, outputs, stream) -> None:
        c = np.concatenate([np.asarray(a), np.asarray(b)])
        np.copyto(np.asarray(outputs[0]), c)
        half = c[: (c.shape[0] + 1) // 2]
        np.copyto(np.asarray(outputs[1]), np.concatenate([half] * reps))

    yield calls
    gc.collect()
    _qdp._deregister("qdpt::scale_add")
    _qdp._deregister("qdpt::cat_rows")


def test_decorated_plugins_build_save_load_run(decorated, tmp_path, rng):
    ids = {p.name for p in kiln.list_plugins()}
    assert {"scale_add", "cat_rows"} <= ids
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    o1 = helper.make_tensor_value_info("cat", TensorProto.FLOAT, None)
    o2 = helper.make_tensor_value_info("rep", TensorProto.FLOAT, None)
    nodes = [helper.make_node("scale_add", ["x", "y"], ["s"], name="sa", domain="qdpt",
                              alpha=2.0),
             helper.make_node("cat_rows", ["s", "x"], ["cat", "rep"], name="cr", domain="qdpt",
                              reps=3)]
    model = qdp_model(str(tmp_path / "q.onnx"), nodes, [x, y], [o1, o2], "qdpt")
    engine = kiln.build(model, shapes={"x": ((1, 3), (2, 3), (6, 3)),
                                       "y": ((1, 3), (2, 3), (6, 3))})
    assert decorated["autotune"] >= 1
    plan = tmp_path / "q.plan"
    plan.write_bytes(bytes(engine.serialize()))
    loaded = kiln.Runtime().deserialize_cuda_engine(plan.read_bytes())
    for n in (1, 5):
        a = rng.standard_normal((n, 3)).astype(np.float32)
        b = rng.standard_normal((n, 3)).astype(np.float32)
        s = a * 2.0 + b + 0.5
        cat = np.concatenate([s, a])
        rep = np.concatenate([cat[: (2 * n + 1) // 2]] * 3)
        for e in (engine, loaded):
            got = e.infer({"x": a, "y": b})
            np.testing.assert_allclose(got["cat"], cat, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got["rep"], rep, rtol=1e-6, atol=1e-6)
    assert decorated["impl"] >= 4
    del engine, loaded
    gc.collect()


def test_shape_exprs():
    e = trtp.ShapeExpr(7)
    assert (e * 2 + 1).constant_value() == 15
    assert trtp.cdiv(e, 2).constant_value() == 4
    assert trtp.max(e, 9).constant_value() == 9 and trtp.min(e, 9).constant_value() == 7
    d = trtp.TensorDesc((e, 3), kiln.DataType.FLOAT)
    like = d.like()
    like.shape_expr[0] = 1          # a copy: d keeps its own dimensions
    assert d.shape_expr[0].constant_value() == 7 and like.shape_expr[0].constant_value() == 1
    assert trtp.ShapeExprs.from_tuple((2, 3)).numel().constant_value() == 6


def test_definition_errors(tmp_path):
    with pytest.raises(kiln.InvalidArgumentError, match="namespace::name"):
        trtp.register("no_namespace")
    with pytest.raises(kiln.NotFoundError, match="register it first"):
        trtp.impl("qdpe::never")
    with pytest.raises(kiln.InvalidArgumentError, match="type hint"):
        @trtp.register("qdpe::nohint")
        def nohint(x: trtp.TensorDesc, alpha) -> trtp.TensorDesc:
            return x.like()

    @trtp.register("qdpe::noimpl")
    def noimpl(x: trtp.TensorDesc) -> trtp.TensorDesc:
        return x.like()

    @trtp.register("qdpe::badshape")
    def badshape(x: trtp.TensorDesc) -> trtp.TensorDesc:
        return (3, 4)               # not a TensorDesc

    try:
        with pytest.raises(kiln.InvalidArgumentError, match="'stream'"):
            @trtp.impl("qdpe::badshape")
            def bad_impl(x: trtp.Tensor, outputs, strm) -> None:
                pass

        @trtp.impl("qdpe::badshape")
        def good_impl(x: trtp.Tensor, outputs, stream) -> None:
            pass

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        m1 = qdp_model(str(tmp_path / "n.onnx"),
                       [helper.make_node("noimpl", ["x"], ["y"], domain="qdpe")], [x], [y], "qdpe")
        with pytest.raises(kiln.Error, match=r"qdpe::noimpl.*has no implementation") as err:
            kiln.build(m1)
        del err
        m2 = qdp_model(str(tmp_path / "b.onnx"),
                       [helper.make_node("badshape", ["x"], ["y"], domain="qdpe")], [x], [y], "qdpe")
        with pytest.raises(kiln.Error, match="the register function returned") as err:
            kiln.build(m2)
        del err
    finally:
        gc.collect()
        for i in ("qdpe::noimpl", "qdpe::badshape"):
            _qdp._deregister(i)


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_decorated_plugin_on_the_gpu(lib, tmp_path, rng):
    """The same decorators on a GPU engine: the impl gets device Tensors
    (__cuda_array_interface__) and kiln's stream; skipped without CUDA."""
    try:
        kiln.backend_info("cuda")
    except kiln.Error as e:
        pytest.skip(f"no CUDA backend here: {e}")
    m = pytest.importorskip(lib)
    if lib == "torch" and not m.cuda.is_available():
        pytest.skip("torch has no CUDA")
    pid = f"qdpg_{lib}::scale"

    @trtp.register(pid)
    def desc(x: trtp.TensorDesc, alpha: float) -> trtp.TensorDesc:
        return x.like()

    @trtp.impl(pid)
    def run(x: trtp.Tensor, alpha: float, outputs, stream: int) -> None:
        assert x.on_device
        if lib == "torch":
            import torch
            with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
                o = torch.as_tensor(outputs[0], device="cuda")
                torch.mul(torch.as_tensor(x, device="cuda"), alpha, out=o)
        else:
            import cupy
            with cupy.cuda.ExternalStream(stream):
                cupy.multiply(cupy.asarray(x), alpha, out=cupy.asarray(outputs[0]))

    try:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        nodes = [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node("scale", ["r"], ["y"], domain=f"qdpg_{lib}", alpha=3.0)]
        model = qdp_model(str(tmp_path / "g.onnx"), nodes, [x], [y], f"qdpg_{lib}")
        engine = kiln.build(model, shapes={"x": ((1, 8), (4, 8), (16, 8))}, backend="cuda")
        loaded = kiln.Runtime().deserialize_cuda_engine(bytes(engine.serialize()))
        a = rng.standard_normal((5, 8)).astype(np.float32)
        torch = pytest.importorskip("torch")
        for e in (engine, loaded):
            # torch's and CuPy's own calls are not all capturable into the
            # context's CUDA graph (CuPy waits on the array's stream): the
            # context runs without graphs
            ctx = e.create_execution_context()
            ctx.cuda_graphs = False
            xt = torch.as_tensor(a, device="cuda")
            yt = torch.empty(5, 8, device="cuda")
            ctx.set_input_shape("x", (5, 8))
            ctx.set_tensor_address("x", xt)
            ctx.set_tensor_address("y", yt)
            s = torch.cuda.Stream()
            ctx.execute_async_v3(s)
            s.synchronize()
            np.testing.assert_allclose(yt.cpu().numpy(), np.maximum(a, 0) * 3.0, rtol=1e-6, atol=1e-6)
            del ctx
        del engine, loaded, e
    finally:
        gc.collect()
        _qdp._deregister(pid)
