"""Tensors and streams as kiln sees them: addresses without copies.

A tensor given to kiln is one of
  * an int: a raw address (host memory for a CPU engine, device memory for a
    GPU engine), used as it is;
  * an object with ``__cuda_array_interface__`` (torch CUDA tensors, CuPy,
    Numba): device memory;
  * a numpy array or any object with the buffer protocol: host memory;
  * an object with ``__dlpack__`` (torch, CuPy, JAX, numpy >= 1.22): host or
    device memory as its DLPack device says.
Whatever is given must be C-contiguous; its address is used in place and the
caller (or the execution context, which keeps what is bound) keeps it alive.

A stream is None (the default stream; the CPU has no streams), an int (a
cudaStream_t), or an object with ``.cuda_stream`` (torch.cuda.Stream) or
``.ptr`` (cupy.cuda.Stream) or ``.handle``.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import _kiln

# kiln_dtype numbers (ONNX's) <-> numpy
_NP_BY_KILN = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
    4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
    7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
    11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
    14: np.dtype(np.complex64), 15: np.dtype(np.complex128),
    # bfloat16 and the float8 types have no numpy type: their raw bits
    16: np.dtype(np.uint16), 17: np.dtype(np.uint8), 18: np.dtype(np.uint8),
    19: np.dtype(np.uint8), 20: np.dtype(np.uint8),
}
_KILN_BY_NP = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
               np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
               np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10,
               np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13}

# typestr of __cuda_array_interface__ / __array_interface__ per kiln dtype
_TYPESTR = {k: v.str for k, v in _NP_BY_KILN.items()}
_TYPESTR[9] = "|b1"


def numpy_dtype(kiln_dtype: int) -> np.dtype:
    """The numpy dtype that holds a kiln dtype (raw bits for bfloat16/float8)."""
    try:
        return _NP_BY_KILN[int(kiln_dtype)]
    except KeyError:
        raise TypeError(f"kiln dtype {int(kiln_dtype)} ({_kiln.dtype_name(int(kiln_dtype))}) "
                        "has no numpy type") from None


def kiln_dtype_of(dtype: Any) -> int:
    """The kiln dtype number of a numpy dtype (or anything np.dtype accepts)."""
    d = np.dtype(dtype)
    try:
        return _KILN_BY_NP[d]
    except KeyError:
        raise TypeError(f"numpy dtype {d} has no kiln type") from None


class Bound(NamedTuple):
    """An address resolved from a tensor object."""
    address: int
    nbytes: Optional[int]        # None when not known (a raw int)
    device: Optional[str]        # "cpu", "cuda" or None (a raw int)
    keep: Any                    # what must stay alive while the address is used


def _contiguous(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


def resolve(obj: Any, writable: bool = False, name: str = "tensor") -> Bound:
    """Address, size and device of a tensor object, without copying it."""
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return Bound(int(obj), None, None, None)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        ptr, readonly = cai["data"]
        shape = tuple(cai["shape"])
        itemsize = np.dtype(cai["typestr"]).itemsize
        if not _contiguous(shape, cai.get("strides"), itemsize):
            raise ValueError(f"{name}: the CUDA array is not C-contiguous")
        if writable and readonly:
            raise ValueError(f"{name}: the CUDA array is read-only")
        return Bound(int(ptr or 0), int(np.prod(shape, dtype=np.int64)) * itemsize, "cuda", obj)
    if isinstance(obj, np.ndarray):
        if not obj.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{name}: the numpy array is not C-contiguous "
                             "(np.ascontiguousarray makes a copy that is)")
        if writable and not obj.flags["WRITEABLE"]:
            raise ValueError(f"{name}: the numpy array is read-only")
        return Bound(obj.__array_interface__["data"][0], obj.nbytes, "cpu", obj)
    if hasattr(obj, "__dlpack__"):
        cap = obj.__dlpack__()
        addr, dev, _dev_id, shape, strides, (code, bits, lanes) = _kiln.dlpack_info(cap)
        itemsize = max(1, bits * lanes // 8)
        # DLPack strides count elements
        if strides is not None and not _contiguous(shape, [s * itemsize for s in strides],
                                                   itemsize):
            raise ValueError(f"{name}: the DLPack tensor is not C-contiguous")
        device = "cpu" if dev in (_DL_CPU, _DL_CUDA_HOST) else "cuda" if dev in (
            _DL_CUDA, _DL_CUDA_MANAGED) else f"dlpack-device-{dev}"
        return Bound(addr, int(np.prod(shape, dtype=np.int64)) * itemsize, device, (obj, cap))
    try:
        addr, nbytes, _ro = _kiln.buffer_address(obj, writable)
    except (TypeError, BufferError) as e:
        raise TypeError(f"{name}: {type(obj).__name__} is not a tensor kiln can bind (an int "
                        "address, numpy / buffer, __cuda_array_interface__ or __dlpack__)") from e
    return Bound(addr, nbytes, "cpu", obj)


def stream_handle(stream: Any) -> Optional[int]:
    """A cudaStream_t as an int (None for the default stream)."""
    if stream is None:
        return None
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return int(stream) or None
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if v is not None:
            return int(v) or None
    if isinstance(stream, (str, bytes, float)):
        raise TypeError(f"{type(stream).__name__} is not a stream: give an int, "
                        "torch.cuda.Stream or a CuPy stream")
    try:
        return int(stream) or None
    except (TypeError, ValueError):
        raise TypeError(f"{type(stream).__name__} is not a stream: give an int, "
                        "torch.cuda.Stream or a CuPy stream") from None


class DeviceArray:
    """Device memory seen through ``__cuda_array_interface__`` (version 3):
    hand it to ``torch.as_tensor(x, device="cuda")`` or ``cupy.asarray(x)``.
    Used for the buffers of a Python plugin on a GPU engine. It does not own
    the memory."""

    def __init__(self, address: int, shape: Tuple[int, ...], kiln_dtype: int,
                 stream: Optional[int] = None, readonly: bool = False):
        self.address = int(address)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = numpy_dtype(kiln_dtype)
        self.stream = stream
        self._typestr = _TYPESTR.get(int(kiln_dtype), self.dtype.str)
        self._readonly = readonly

    @property
    def __cuda_array_interface__(self):
        d = {"shape": self.shape, "typestr": self._typestr,
             "data": (self.address, self._readonly), "version": 3, "strides": None}
        if self.stream:
            d["stream"] = self.stream
        return d

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"DeviceArray(0x{self.address:x}, shape={self.shape}, dtype={self.dtype})"


def host_array(address: int, shape, kiln_dtype: int, writable: bool) -> np.ndarray:
    """A numpy view of host memory kiln owns (no copy)."""
    dt = numpy_dtype(kiln_dtype)
    n = int(np.prod(shape, dtype=np.int64))
    mv = _kiln.memory_at(address, n * dt.itemsize, writable)
    return np.frombuffer(mv, dtype=dt, count=n).reshape(tuple(shape))
