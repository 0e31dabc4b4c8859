"""The TensorRT-shaped build and run flow on the CPU backend."""
import gc
import sys
import threading

import numpy as np
import pytest

import kiln


def build_tiny(tiny_onnx, **flags):
    logger = kiln.Logger(kiln.Logger.ERROR)
    builder = kiln.Builder(logger)
    network = builder.create_network(1 << int(kiln.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = kiln.OnnxParser(network, logger)
    assert parser.parse_from_file(tiny_onnx), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    assert network.num_inputs == 1 and network.num_outputs == 1 and network.num_layers > 0
    inp = network.get_input(0)
    assert inp.name == "input" and inp.shape == (-1, 3, 64, 64) and inp.dtype == kiln.float32
    config = builder.create_builder_config()
    config.set_memory_pool_limit(kiln.MemoryPoolType.WORKSPACE, 1 << 28)
    assert config.get_memory_pool_limit(kiln.MemoryPoolType.WORKSPACE) == 1 << 28
    config.builder_optimization_level = 0
    for f in flags.get("flags", ()):
        config.set_flag(f)
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (1, 3, 64, 64), (2, 3, 64, 64), (4, 3, 64, 64))
    assert config.add_optimization_profile(profile) == 0
    plan = builder.build_serialized_network(network, config)
    assert isinstance(plan, (bytes, kiln.IHostMemory)) and plan.nbytes == len(plan) > 0
    return kiln.Runtime(logger).deserialize_cuda_engine(plan)


def test_version_and_errors():
    assert kiln.__version__.count(".") == 2
    assert issubclass(kiln.ParseError, kiln.Error) and kiln.ParseError.status == 2
    with pytest.raises(kiln.FileError, match="cannot open"):
        kiln.Runtime().deserialize_engine("/nonexistent/x.plan")
    with pytest.raises(kiln.PlanError) as e:
        kiln.Runtime().deserialize_cuda_engine(b"not a plan at all" * 20)
    assert e.value.status == 7


def test_parser_errors_carry_kilns_message():
    builder = kiln.Builder(kiln.Logger(kiln.Logger.INTERNAL_ERROR))
    network = builder.create_network()
    parser = kiln.OnnxParser(network)
    assert not parser.parse(b"\x08\x07garbage-bytes")
    assert parser.num_errors == 1
    err = parser.get_error(0)
    assert err.code() == 2 and isinstance(err.exception, kiln.ParseError) and err.desc()
    with pytest.raises(kiln.ParseError):
        parser.parse(b"\x08\x07garbage-bytes", raise_on_error=True)


def test_engine_accessors_and_run(tiny_onnx, rng):
    engine = build_tiny(tiny_onnx)
    assert engine.num_io_tensors == 2
    assert [engine.get_tensor_name(i) for i in range(2)] == ["input", "output"]
    assert engine.get_tensor_mode("input") == kiln.TensorIOMode.INPUT
    assert engine.get_tensor_mode("output") == kiln.TensorIOMode.OUTPUT
    assert engine.get_tensor_dtype("output") == kiln.DataType.FLOAT
    assert engine.get_tensor_shape("input") == (-1, 3, 64, 64)
    assert engine.get_tensor_profile_shape("input", 0) == [(1, 3, 64, 64), (2, 3, 64, 64), (4, 3, 64, 64)]
    assert engine.num_optimization_profiles == 1 and engine.backend == "cpu"
    assert not engine.is_shape_inference_io("input")
    assert "layers" in engine.create_engine_inspector().get_engine_information() or engine.num_layers
    with pytest.raises(kiln.NotFoundError):
        engine.get_tensor_dtype("nope")

    ctx = engine.create_execution_context()
    x = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    assert ctx.set_input_shape("input", x.shape)
    assert ctx.get_tensor_shape("output") == (3, 10)
    out = np.empty((3, 10), np.float32)
    ctx.set_tensor_address("input", x)
    ctx.set_tensor_address("output", out)
    assert ctx.execute_async_v3(0)
    ref = engine.infer({"input": x})["output"]
    np.testing.assert_array_equal(out, ref)
    out2 = np.zeros_like(out)
    assert ctx.execute_v2([x.ctypes.data, out2.ctypes.data])
    np.testing.assert_array_equal(out2, ref)
    with pytest.raises(kiln.ShapeError, match="outside optimization profile"):
        ctx.set_input_shape("input", (9, 3, 64, 64))
    with pytest.raises(ValueError, match="not C-contiguous"):
        ctx.set_tensor_address("input", np.asfortranarray(x))

    # serialize -> deserialize gives the same results
    again = kiln.Runtime().deserialize_cuda_engine(engine.serialize())
    np.testing.assert_array_equal(again.infer({"input": x})["output"], ref)


def test_objects_keep_what_they_borrow_alive(tiny_onnx, rng):
    engine = build_tiny(tiny_onnx)
    ctx = engine.create_execution_context()
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    want = engine.infer({"input": x})["output"]
    ctx.set_input_shape("input", x.shape)
    ctx.set_tensor_address("input", x.copy())      # only the context holds the copy
    out = np.empty((2, 10), np.float32)
    ctx.set_tensor_address("output", out)
    del engine
    gc.collect()
    ctx.execute_async_v3()
    np.testing.assert_array_equal(out, want)
    assert ctx.engine.backend == "cpu"


def test_file_plan_and_plan_info(tiny_onnx, tmp_path, rng):
    path = tmp_path / "t.plan"
    engine = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)}, save=path)
    info = kiln.plan_info(str(path))
    assert info["backend"] == "cpu" and info["file_size"] == path.stat().st_size
    loaded = kiln.load(path)
    assert loaded.serialize() == path.read_bytes()
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    np.testing.assert_array_equal(loaded.infer({"input": x})["output"], engine.infer({"input": x})["output"])
    with pytest.raises(kiln.NotFoundError, match="no value"):
        engine.infer({})


def test_flags_channels_last_and_fp16(tiny_onnx, rng):
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    base = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)}).infer({"input": x})["output"]
    cl = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)}, channels_last=True)
    np.testing.assert_allclose(cl.infer({"input": x})["output"], base, atol=1e-4, rtol=1e-4)
    # FP16 allows the type (TensorRT's meaning): each layer keeps the faster
    half = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)}, fp16=True)
    got = half.infer({"input": x})["output"]
    np.testing.assert_allclose(got, base, atol=5e-2, rtol=5e-2)
    # a layer precision for every layer ("*") forces it
    logger = kiln.Logger(kiln.Logger.ERROR)
    builder = kiln.Builder(logger)
    network = builder.create_network(0)
    assert kiln.OnnxParser(network, logger).parse_from_file(tiny_onnx)
    config = builder.create_builder_config()
    config.set_flag(kiln.BuilderFlag.FP16)
    config.set_flag(kiln.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    config.set_layer_precision("*", kiln.DataType.HALF)
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (2, 3, 64, 64), (2, 3, 64, 64), (2, 3, 64, 64))
    config.add_optimization_profile(profile)
    forced = kiln.Runtime(logger).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    got = forced.infer({"input": x})["output"]
    np.testing.assert_allclose(got, base, atol=5e-2, rtol=5e-2)
    assert not np.array_equal(got, base)     # really ran in float16
    cfg = kiln.Builder().create_builder_config()
    with pytest.raises(kiln.InvalidArgumentError):
        cfg.builder_optimization_level = 9
    with pytest.raises(kiln.Error):
        cfg.backend = "tpu"
    cfg.set_flag(kiln.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)   # accepted, no effect
    assert cfg.get_flag(kiln.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)


def test_timing_cache(tiny_onnx):
    builder = kiln.Builder(kiln.Logger(kiln.Logger.ERROR))
    network = builder.create_network()
    kiln.OnnxParser(network).parse_from_file(tiny_onnx, raise_on_error=True)
    config = builder.create_builder_config()
    cache = config.create_timing_cache(b"")
    assert config.set_timing_cache(cache, ignore_mismatch=False)
    assert config.get_timing_cache() is cache
    builder.build_serialized_network(network, config)
    data = cache.serialize()
    assert len(data) > 0      # the build timed tactics and wrote them
    again = config.create_timing_cache(data)
    assert again.serialize() == data


def test_network_by_hand(tmp_path):
    builder = kiln.Builder()
    net = builder.create_network()
    net.add_input("a", kiln.float32, (2, 3))
    net.add_constant_tensor("b", np.full((2, 3), 0.5, np.float32))
    net.add_node("Add", ["a", "b"], ["c"], name="add")
    net.add_node("LeakyRelu", ["c"], ["d"], attrs={"alpha": 0.25})
    net.mark_output("d")
    assert net.num_layers == 2 and net[1].type == "LeakyRelu" and net[0].inputs == ["a", "b"]
    net.write_onnx(tmp_path / "hand.onnx")
    plan = builder.build_serialized_network(net, builder.create_builder_config())
    e = kiln.Runtime().deserialize_cuda_engine(plan)
    a = np.array([[-4, -1, 0], [1, 2, 3]], np.float32)
    c = a + 0.5
    np.testing.assert_allclose(e.infer({"a": a})["d"], np.where(c > 0, c, 0.25 * c))
    np.testing.assert_allclose(kiln.build(tmp_path / "hand.onnx").infer({"a": a})["d"],
                               np.where(c > 0, c, 0.25 * c))


class Capture(kiln.ILogger):
    def __init__(self):
        super().__init__()
        self.min_severity = kiln.ILogger.INFO
        self.messages = []

    def log(self, severity, msg):
        self.messages.append((severity, msg))


def test_logger_subclass_gets_kilns_messages(tiny_onnx):
    cap = Capture()
    kiln.build(tiny_onnx, logger=cap)
    assert cap.messages, "no message reached the Python logger"
    assert all(isinstance(s, kiln.ILogger.Severity) for s, _ in cap.messages)
    kiln.Builder(kiln.Logger(kiln.Logger.WARNING))   # back to a quiet logger


def _runs_without_the_gil(work):
    """True when `work` (run in a thread) let the main thread in while it ran:
    with a huge switch interval Python never preempts, so the main thread
    runs during `work` only if kiln released the GIL."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(30)
    state = {"done": False}
    started = threading.Event()

    def body():
        started.set()
        work()
        state["done"] = True
    t = threading.Thread(target=body)
    try:
        t.start()
        started.wait()
        seen_running = not state["done"]
    finally:
        sys.setswitchinterval(old)
    t.join()
    return seen_running


def test_gil_released_in_build_and_enqueue(tiny_onnx, rng):
    engine = kiln.build(tiny_onnx, shapes={"input": (4, 3, 64, 64)})
    ctx = engine.create_execution_context()
    x = rng.standard_normal((4, 3, 64, 64)).astype(np.float32)
    out = np.empty((4, 10), np.float32)
    ctx.set_input_shape("input", x.shape)
    ctx.set_tensor_address("input", x)
    ctx.set_tensor_address("output", out)

    def many():
        for _ in range(30):
            ctx.execute_async_v3()
    assert _runs_without_the_gil(many)
    # several builds: a quick build (no oneDNN) releases the GIL briefly, and
    # on a loaded machine the main thread may miss one window
    assert _runs_without_the_gil(lambda: [kiln.build(tiny_onnx) for _ in range(5)])


def test_scalar_input_and_constant(tmp_path):
    """A 0-d array binds a rank-0 input (np.ascontiguousarray would make it 1-d)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Add", ["s", "one"], ["y"])], "g",
                          [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                          [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    path = tmp_path / "scalar.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    y = kiln.build(str(path)).infer({"s": np.array(2.5, np.float32)})["y"]
    assert y.shape == () and float(y) == 3.5


def test_dimension_names(tmp_path):
    """ONNX dim_param names of network inputs, as TensorRT's
    ITensor.get_dimension_name / set_dimension_name give them."""
    from onnx import TensorProto, helper
    from conftest import make_model
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = make_model(str(tmp_path / "dn.onnx"), [helper.make_node("Relu", ["x"], ["y"])],
                      [x], [y], custom_domain=False)
    net = kiln.Builder(kiln.Logger()).create_network()
    assert kiln.OnnxParser(net, kiln.Logger()).parse_from_file(path)
    t = net.get_input(0)
    assert [t.get_dimension_name(i) for i in range(3)] == ["batch", None, "seq"]
    assert t.dimension_names == ("batch", None, "seq")
    t.set_dimension_name(2, "tokens")
    assert t.get_dimension_name(2) == "tokens"
    t.set_dimension_name(2, None)
    assert t.get_dimension_name(2) is None
    with pytest.raises(kiln.InvalidArgumentError, match="outside 0..2"):
        t.get_dimension_name(3)
