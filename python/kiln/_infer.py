"""engine.infer: one run from a dict of arrays to a dict of arrays of the
inputs' kind, binding the arrays in place wherever they already are where
the engine needs them (numpy on a CPU engine, torch / CuPy CUDA tensors on a
GPU engine); otherwise it copies (numpy on a GPU engine, through device
buffers kept on the context). Sequence inputs and outputs are lists of
arrays, an optional is None or its element (kiln._seq)."""
from __future__ import annotations

import sys
from typing import Any, Dict, Mapping, Optional

import numpy as np

from . import _kiln
from ._seq import get_output_value, set_input_value
from ._tensors import host_array, numpy_dtype, stream_handle


def _kind(x: Any) -> str:
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        return "torch"
    if mod == "cupy":
        return "cupy"
    return "numpy"


def _torch_dtype(torch, kiln_dtype: int):
    table = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16, 11: torch.float64,
             3: torch.int8, 2: torch.uint8, 5: torch.int16, 6: torch.int32, 7: torch.int64,
             9: torch.bool}
    return table[kiln_dtype]


def _device_buffer(engine, ctx, name: str, nbytes: int) -> int:
    """A device buffer of at least nbytes for tensor `name`, kept on the context."""
    bufs = ctx.__dict__.setdefault("_infer_device", {})
    have = bufs.get(name)
    if have and have[1] >= nbytes:
        return have[0]
    if have:
        engine._c.free(have[0], False)
    addr = engine._c.alloc(max(nbytes, 1), False)
    bufs[name] = (addr, max(nbytes, 1))
    if not hasattr(ctx, "_infer_finalizer"):
        import weakref
        c_engine = engine._c
        ctx._infer_finalizer = weakref.finalize(
            ctx, lambda b=bufs, e=c_engine: [e.free(a, False) for a, _n in b.values()])
    return addr


def infer(engine, ctx, feeds: Mapping[str, Any], stream: Any = None) -> Dict[str, Any]:
    from . import InvalidArgumentError, NotFoundError
    inputs = engine.input_names
    missing = [n for n in inputs if n not in feeds]
    if missing:
        raise NotFoundError(f"infer: no value for input(s) {', '.join(missing)}")
    extra = [n for n in feeds if n not in inputs]
    if extra:
        raise NotFoundError(f"infer: the engine has no input(s) {', '.join(extra)} "
                            f"(inputs: {', '.join(inputs)})")
    kinds = {_kind(v) for v in feeds.values()}
    kind = "torch" if "torch" in kinds else "cupy" if "cupy" in kinds else "numpy"
    gpu = engine.backend != "cpu"
    c = ctx._c
    keep = []
    st = stream_handle(stream)

    if kind == "torch":
        torch = sys.modules["torch"]
        device = next((v.device for v in feeds.values() if _kind(v) == "torch"), None)
        if gpu and (device is None or device.type != "cuda"):
            device = torch.device("cuda")
        if not gpu:
            device = torch.device("cpu")
        if gpu and st is None:
            st = torch.cuda.current_stream(device).cuda_stream or None
    if kind == "cupy" and gpu and st is None:
        cupy = sys.modules["cupy"]
        st = cupy.cuda.get_current_stream().ptr or None

    # sequences and optionals: a list / None / an array, copied in by kiln
    handles = {n for n in inputs + engine.output_names if engine._c.tensor_kind(n) > 0}

    # inputs
    host_copies = []   # (device address, numpy array) to copy in
    for name in inputs:
        dt = engine._c.tensor_dtype(name)
        v = feeds[name]
        if name in handles:
            set_input_value(engine._c, c, name, v)
            continue
        shape_input = engine._c.tensor_is_shape_input(name)
        if kind == "torch" and _kind(v) == "torch":
            tdt = _torch_dtype(torch, dt)
            target = torch.device("cpu") if shape_input else device
            t = v.to(device=target, dtype=tdt).contiguous()
            keep.append(t)
            c.set_input_shape(name, tuple(t.shape))
            c.set_tensor_address(name, t.data_ptr())
            continue
        if kind == "cupy" and _kind(v) == "cupy" and gpu and not shape_input:
            cupy = sys.modules["cupy"]
            a = cupy.ascontiguousarray(v, dtype=numpy_dtype(dt)).reshape(tuple(v.shape))
            keep.append(a)
            c.set_input_shape(name, tuple(a.shape))
            c.set_tensor_address(name, a.data.ptr)
            continue
        if _kind(v) == "cupy":
            v = v.get()
        elif _kind(v) == "torch":
            v = v.detach().cpu().numpy()
        # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
        a = np.require(v, dtype=numpy_dtype(dt), requirements="C")
        keep.append(a)
        c.set_input_shape(name, a.shape)
        if gpu and not shape_input:
            addr = _device_buffer(engine, ctx, name, a.nbytes)
            host_copies.append((addr, a))
            c.set_tensor_address(name, addr)
        else:
            c.set_tensor_address(name, a.__array_interface__["data"][0])
    for addr, a in host_copies:
        engine._c.copy(addr, a.__array_interface__["data"][0], a.nbytes, 0)

    # outputs: bound where the shape is known now, else read after the run
    outs: Dict[str, Any] = {}
    late = []
    staged = []        # (numpy out, device address) to copy back
    for name in engine.output_names:
        if name in handles:
            continue
        dt = engine._c.tensor_dtype(name)
        try:
            shape = c.tensor_shape(name)
        except Exception:
            shape = None
        if shape is None or any(d < 0 for d in shape):
            c.set_tensor_address(name, None)
            late.append(name)
            continue
        if kind == "torch":
            o = torch.empty(shape, dtype=_torch_dtype(torch, dt), device=device)
            c.set_tensor_address(name, o.data_ptr())
        elif kind == "cupy" and gpu:
            cupy = sys.modules["cupy"]
            o = cupy.empty(shape, dtype=numpy_dtype(dt))
            c.set_tensor_address(name, o.data.ptr)
        else:
            o = np.empty(shape, dtype=numpy_dtype(dt))
            if gpu:
                addr = _device_buffer(engine, ctx, name, o.nbytes)
                c.set_tensor_address(name, addr)
                staged.append((o, addr))
            else:
                c.set_tensor_address(name, o.__array_interface__["data"][0])
        outs[name] = o

    try:
        c.enqueue(st)
        if gpu and (staged or late or kind == "numpy"):
            c.synchronize(st)
        for o, addr in staged:
            engine._c.copy(o.__array_interface__["data"][0], addr, o.nbytes, 1)
        # an output whose size depends on the data may come out smaller than
        # the bound the shape gave before the run: kiln wrote it contiguously
        # at the start of the buffer
        synced = gpu and (staged or late or kind == "numpy")
        for name, o in list(outs.items()):
            now = c.tensor_shape(name)
            if tuple(now) != tuple(o.shape):
                if gpu and not synced:
                    c.synchronize(st)
                    synced = True
                    now = c.tensor_shape(name)
                n = int(np.prod(now, dtype=np.int64))
                outs[name] = o.reshape(-1)[:n].reshape(tuple(now))
        for name in late:
            dt = engine._c.tensor_dtype(name)
            shape = c.tensor_shape(name)
            addr = c.tensor_address(name)
            if gpu:
                o = np.empty(shape, dtype=numpy_dtype(dt))
                if o.nbytes:
                    engine._c.copy(o.__array_interface__["data"][0], addr, o.nbytes, 1)
            else:
                o = host_array(addr, shape, dt, False).copy() if addr else np.empty(
                    shape, numpy_dtype(dt))
            if kind == "torch":
                o = torch.from_numpy(o).to(device)
            elif kind == "cupy" and gpu:
                o = sys.modules["cupy"].asarray(o)
            outs[name] = o
        for name in engine.output_names:
            if name not in handles:
                continue
            v = get_output_value(engine._c, c, name)
            if kind == "torch":
                conv = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
                v = None if v is None else [conv(a) for a in v] if isinstance(v, list) else conv(v)
            outs[name] = v
        outs = {n: outs[n] for n in engine.output_names}
    finally:
        # nothing bound here may dangle into a later run of this context
        for name in inputs + engine.output_names:
            if name in handles:
                continue
            try:
                c.set_tensor_address(name, None)
            except Exception:
                pass
        del keep
    return outs
