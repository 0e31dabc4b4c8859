"""Sequence and optional I/O values (kiln_runtime.h's kiln_engine_tensor_kind,
kiln_context_set_sequence_input / set_optional_none / sequence_length /
sequence_element / optional_has_element) as Python values:

  * a sequence: a list (or tuple) of arrays, each of the sequence's element
    type, shapes free;
  * an optional of a tensor: None (no element) or an array;
  * an optional of a sequence: None or a list of arrays.

Inputs are copied by kiln when they are set; outputs are read after a run
as numpy copies (kiln's bytes are only valid until the next run)."""
from __future__ import annotations

import enum
from typing import Any, List, Optional, Union

import numpy as np

from ._tensors import host_array, numpy_dtype


class TensorKind(enum.IntEnum):
    """What an I/O value is (kiln_tensor_kind)."""
    TENSOR = 0
    SEQUENCE = 1
    OPTIONAL = 2


Value = Union[np.ndarray, List[np.ndarray], None]


def _host(v: Any) -> Any:
    mod = type(v).__module__.split(".")[0]
    if mod == "torch":
        return v.detach().cpu().numpy()
    if mod == "cupy":
        return v.get()
    return v


def _elements(engine_c, name: str, items: Any) -> List[np.ndarray]:
    from . import InvalidArgumentError
    if not isinstance(items, (list, tuple)):
        raise InvalidArgumentError(
            f"input '{name}' is a sequence: give a list of arrays, not {type(items).__name__}")
    dt = numpy_dtype(engine_c.tensor_dtype(name))
    return [np.require(_host(a), dtype=dt, requirements="C") for a in items]


def _give(ctx_c, name: str, arrays: List[np.ndarray]) -> None:
    # kiln copies the bytes during the call: the arrays need not outlive it
    ctx_c.set_sequence_input(
        name, [(a.shape, a.__array_interface__["data"][0]) for a in arrays])


def set_input_value(engine_c, ctx_c, name: str, value: Value) -> None:
    """Give a sequence or optional input its value (see the module text)."""
    from . import InvalidArgumentError
    kind = engine_c.tensor_kind(name)
    if kind == TensorKind.SEQUENCE:
        if value is None:
            raise InvalidArgumentError(
                f"input '{name}' is a sequence, not an optional: give a list of arrays "
                "([] for an empty sequence), not None")
        _give(ctx_c, name, _elements(engine_c, name, value))
    elif kind == TensorKind.OPTIONAL:
        if value is None:
            ctx_c.set_optional_none(name)
        elif engine_c.tensor_element_kind(name) == TensorKind.SEQUENCE:
            _give(ctx_c, name, _elements(engine_c, name, value))
        else:
            if isinstance(value, (list, tuple)):
                raise InvalidArgumentError(
                    f"input '{name}' is an optional of a tensor: give an array or None, "
                    "not a list")
            dt = numpy_dtype(engine_c.tensor_dtype(name))
            _give(ctx_c, name, [np.require(_host(value), dtype=dt, requirements="C")])
    elif kind == TensorKind.TENSOR:
        raise InvalidArgumentError(f"input '{name}' is a tensor, not a sequence or optional")
    else:
        raise InvalidArgumentError(f"the engine has no input '{name}'")


def _read_list(ctx_c, name: str) -> List[np.ndarray]:
    out = []
    for i in range(ctx_c.sequence_length(name)):
        dt, shape, addr = ctx_c.sequence_element(name, i)
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0 or not addr:
            out.append(np.empty(shape, dtype=numpy_dtype(dt)))
        else:
            out.append(host_array(addr, shape, dt, False).copy())
    return out


def get_output_value(engine_c, ctx_c, name: str) -> Value:
    """A sequence or optional output after a run (see the module text)."""
    from . import InvalidArgumentError
    kind = engine_c.tensor_kind(name)
    if kind == TensorKind.SEQUENCE:
        return _read_list(ctx_c, name)
    if kind == TensorKind.OPTIONAL:
        if not ctx_c.optional_has_element(name):
            return None
        items = _read_list(ctx_c, name)
        if engine_c.tensor_element_kind(name) == TensorKind.SEQUENCE:
            return items
        return items[0]
    raise InvalidArgumentError(f"'{name}' is not a sequence or optional output of the engine")
