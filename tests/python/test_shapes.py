"""Shape tensors, data-dependent outputs and threads sharing an engine."""
import threading

import numpy as np
from onnx import TensorProto, helper

import kiln
from conftest import make_model


def test_data_dependent_output(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    m = make_model(str(tmp_path / "nz.onnx"), [helper.make_node("NonZero", ["x"], ["y"])], [x], [y],
                   custom_domain=False)
    e = kiln.build(m)
    a = np.array([0, 3, 0, -1, 2, 0], np.float32)
    got = e.infer({"x": a})["y"]
    np.testing.assert_array_equal(got, np.array(np.nonzero(a), np.int64))
    b = np.array([1, 0, 0, 0, 0, 0], np.float32)
    np.testing.assert_array_equal(e.infer({"x": b})["y"], np.array([[0]], np.int64))


def test_shape_tensor_input(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = make_model(str(tmp_path / "rs.onnx"), [helper.make_node("Reshape", ["x", "s"], ["y"])],
                   [x, s], [y], custom_domain=False)
    builder = kiln.Builder(kiln.Logger(kiln.Logger.ERROR))
    net = builder.create_network()
    assert kiln.OnnxParser(net).parse_from_file(m)
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape_input("s", (1, 12), (3, 4), (12, 1))
    assert profile.get_shape_input("s") == [[1, 12], [3, 4], [12, 1]]
    config.add_optimization_profile(profile)
    e = kiln.Runtime().deserialize_cuda_engine(builder.build_serialized_network(net, config))
    assert e.is_shape_inference_io("s") and not e.is_shape_inference_io("x")
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ((3, 4), (6, 2), (1, 12)):
        got = e.infer({"x": a, "s": np.array(shape, np.int64)})["y"]
        np.testing.assert_array_equal(got, a.reshape(shape))


def test_threads_share_an_engine(tiny_onnx):
    engine = kiln.build(tiny_onnx, shapes={"input": ((1, 3, 64, 64), (2, 3, 64, 64), (4, 3, 64, 64))})
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1 + i % 4, 3, 64, 64)).astype(np.float32) for i in range(8)]
    want = [engine.infer({"input": x})["output"] for x in xs]
    got = [None] * len(xs)
    errors = []

    def worker(k):
        try:
            ctx = engine.create_execution_context()
            for i in range(k, len(xs), 2):
                ctx.set_input_shape("input", xs[i].shape)
                out = np.empty(ctx.get_tensor_shape("output"), np.float32)
                ctx.set_tensor_address("input", xs[i])
                ctx.set_tensor_address("output", out)
                ctx.execute_async_v3(None)
                got[i] = out
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
