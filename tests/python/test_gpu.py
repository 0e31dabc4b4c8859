"""The GPU path: skipped cleanly where this build or machine has no CUDA."""
import numpy as np
import pytest

import kiln


@pytest.fixture(scope="module")
def gpu_engine(tiny_onnx):
    try:
        kiln.backend_info("cuda")
    except kiln.Error as e:
        pytest.skip(f"no CUDA backend here: {e}")
    return kiln.build(tiny_onnx, shapes={"input": ((1, 3, 64, 64), (2, 3, 64, 64), (4, 3, 64, 64))},
                      backend="cuda")


def test_gpu_numpy_in_numpy_out(gpu_engine, tiny_onnx, rng):
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    cpu = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)}).infer({"input": x})["output"]
    got = gpu_engine.infer({"input": x})["output"]
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, cpu, atol=1e-3, rtol=1e-3)


def test_gpu_raw_pointers_and_streams(gpu_engine, rng):
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    ctx = gpu_engine.create_execution_context()
    ctx.set_input_shape("input", x.shape)
    d_in = gpu_engine.alloc(x.nbytes)
    d_out = gpu_engine.alloc(2 * 10 * 4)
    stream = gpu_engine.create_stream()
    try:
        gpu_engine.memcpy_htod(d_in, x)
        ctx.set_tensor_address("input", d_in)
        ctx.set_tensor_address("output", d_out)
        assert ctx.execute_async_v3(stream)
        ctx.synchronize(stream)
        out = np.empty((2, 10), np.float32)
        gpu_engine.memcpy_dtoh(out, d_out)
        np.testing.assert_allclose(out, gpu_engine.infer({"input": x})["output"], atol=1e-5)
        with pytest.raises(kiln.InvalidArgumentError, match="cpu memory"):
            ctx.set_tensor_address("input", x)
    finally:
        gpu_engine.destroy_stream(stream)
        gpu_engine.free(d_in)
        gpu_engine.free(d_out)


def test_gpu_torch_in_torch_out(gpu_engine, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = torch.randn(2, 3, 64, 64, device="cuda")
    out = gpu_engine.infer({"input": x})["output"]
    assert out.is_cuda
    ctx = gpu_engine.create_execution_context()
    ctx.set_input_shape("input", tuple(x.shape))
    o2 = torch.empty(2, 10, device="cuda")
    ctx.set_tensor_address("input", x)          # __cuda_array_interface__
    ctx.set_tensor_address("output", o2)
    s = torch.cuda.Stream()
    ctx.execute_async_v3(s)                     # a torch.cuda.Stream
    s.synchronize()
    torch.testing.assert_close(o2, out, atol=1e-5, rtol=1e-5)


def test_gpu_python_plugin_gets_device_arrays(gpu_engine, tmp_path):
    from onnx import TensorProto, helper
    from conftest import make_model
    seen = {}

    class Copy(kiln.Plugin):
        name = "PyGpuCopyT"

        def enqueue(self, inputs, outputs, workspace, stream):
            seen["kind"] = type(inputs[0]).__name__
            seen["stream"] = stream
            n = inputs[0].nbytes
            # a device-to-device copy on the given stream (capturable into
            # the context's CUDA graph)
            gpu_engine.memcpy(outputs[0].address, inputs[0].address, n, 2, stream=stream)
    kiln.register_plugin(Copy)
    try:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        m = make_model(str(tmp_path / "g.onnx"),
                       [helper.make_node("PyGpuCopyT", ["x"], ["y"], domain="kiln.plugins")], [x], [y])
        e = kiln.build(m, backend="cuda")
        a = np.arange(4, dtype=np.float32).reshape(2, 2)
        np.testing.assert_array_equal(e.infer({"x": a})["y"], a)
        assert seen["kind"] == "DeviceArray"
        del e
    finally:
        import gc
        gc.collect()
        kiln.deregister_plugin(Copy)
