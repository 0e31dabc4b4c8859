"""Tensors and streams without copies: addresses, devices, DLPack."""
import numpy as np
import pytest

import kiln
from kiln._tensors import resolve, stream_handle


class FakeCuda:
    def __init__(self, ptr, shape=(2, 3), strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape,
                                         "typestr": "<f4", "strides": strides, "version": 3}


class DLOnly:
    """Only __dlpack__ (numpy's), so resolve takes the DLPack path."""
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


def test_streams():
    class TorchLike:
        cuda_stream = 0x1234

    class CupyLike:
        ptr = 0x5678
    assert stream_handle(None) is None and stream_handle(0) is None
    assert stream_handle(77) == 77
    assert stream_handle(TorchLike()) == 0x1234 and stream_handle(CupyLike()) == 0x5678
    with pytest.raises(TypeError):
        stream_handle("stream")


def test_resolve_kinds():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = resolve(a)
    assert b.address == a.ctypes.data and b.nbytes == 24 and b.device == "cpu"
    c = resolve(FakeCuda(0xdead000))
    assert c.address == 0xdead000 and c.device == "cuda" and c.nbytes == 24
    with pytest.raises(ValueError, match="contiguous"):
        resolve(FakeCuda(0x1000, strides=(4, 8)))
    d = resolve(DLOnly(a))
    assert d.address == a.ctypes.data and d.device == "cpu" and d.nbytes == 24
    bb = bytearray(16)
    assert resolve(bb, writable=True).nbytes == 16
    with pytest.raises(ValueError, match="read-only"):
        ro = a.copy()
        ro.flags.writeable = False
        resolve(ro, writable=True)
    with pytest.raises(TypeError):
        resolve(object())


def test_device_memory_refused_by_a_cpu_engine(tiny_onnx):
    e = kiln.build(tiny_onnx, shapes={"input": (1, 3, 64, 64)})
    ctx = e.create_execution_context()
    with pytest.raises(kiln.InvalidArgumentError, match="cuda memory"):
        ctx.set_tensor_address("input", FakeCuda(0x1000, shape=(1, 3, 64, 64)))
    # DLPack (CPU) binds in place
    x = np.ones((1, 3, 64, 64), np.float32)
    out = np.zeros((1, 10), np.float32)
    ctx.set_input_shape("input", x.shape)
    ctx.set_tensor_address("input", DLOnly(x))
    ctx.set_tensor_address("output", out)
    ctx.execute_async_v3(None)
    np.testing.assert_array_equal(out, e.infer({"input": x})["output"])


def test_torch_cpu_in_torch_out(tiny_onnx):
    torch = pytest.importorskip("torch")
    e = kiln.build(tiny_onnx, shapes={"input": (2, 3, 64, 64)})
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    out = e.infer({"input": x})["output"]
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.numpy(), e.infer({"input": x.numpy()})["output"])
