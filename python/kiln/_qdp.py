"""TensorRT 10's ``tensorrt.plugin`` decorators over kiln's Python plugins.

``import kiln.plugin as trtp`` gives the names a TensorRT script uses::

    @trtp.register("my::scale")
    def scale_desc(x: trtp.TensorDesc, alpha: float) -> trtp.TensorDesc:
        return x.like()

    @trtp.impl("my::scale")
    def scale_impl(x: trtp.Tensor, alpha: float, outputs, stream: int) -> None:
        np.multiply(np.asarray(x), alpha, out=np.asarray(outputs[0]))   # CPU engine
        # GPU engine: torch.as_tensor(x, device="cuda"), cupy.asarray(x)

``register`` declares the inputs (TensorDesc parameters, first), the
attributes (annotated int, float, str, bool, bytes or
``numpy.typing.NDArray[dtype]``) and the outputs (the returned TensorDescs:
shape expressions over the inputs' dimensions and a dtype). ``impl`` is the
enqueue: input Tensors, a subset of the attributes, ``outputs`` (a tuple of
Tensors) and ``stream`` (an int; 0 on the CPU), optionally ``tactic``.
``autotune`` lists the type / layout combinations the plugin takes
(AutoTuneCombination); without it the plugin takes float inputs as float32,
other inputs as they come, linear layouts, and outputs of the types
``register`` gives.

Underneath, the plugin is a :class:`kiln.plugin.Plugin` registered in
kiln's C registry as ``name`` in namespace ``ns`` (the id "ns::name"; an
ONNX node reaches it as op_type ``name`` in domain ``ns``, or with a
``plugin_namespace`` attribute), its attributes are its fields and go into
plans, so a plan loads where the same decorators ran first.
"""
from __future__ import annotations

import builtins
import inspect
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _kiln
from .plugin import FieldSpec, FieldType, Plugin, register_plugin

__all__ = ["register", "impl", "autotune", "TensorDesc", "Tensor", "ShapeExpr", "ShapeExprs",
           "Shape", "AutoTuneCombination", "cdiv", "min", "max", "from_shape_expr"]


def _errors():
    from . import InvalidArgumentError, NotFoundError, UnsupportedError
    return InvalidArgumentError, NotFoundError, UnsupportedError


# --------------------------------------------------------------------------
# shape expressions


def _op(a, b, name: str):
    """a op b where each is an int or a kiln DimExpr (None: fake)."""
    if a is None or b is None:
        return None
    ai, bi = isinstance(a, int), isinstance(b, int)
    if ai and bi:
        if name == "add":
            return a + b
        if name == "sub":
            return a - b
        if name == "mul":
            return a * b
        if name == "floordiv":
            return a // b
        if name == "cdiv":
            return -((-a) // b)
        if name == "min":
            return builtins.min(a, b)
        return builtins.max(a, b)
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "floordiv":
        return a // b
    if name == "cdiv":
        return a.ceil_div(b) if not ai else (a + b - 1) // b
    if name == "min":
        return a.min(b) if not ai else b.min(a)
    return a.max(b) if not ai else b.max(a)


class ShapeExpr:
    """A symbolic dimension (TensorRT's tensorrt.plugin.ShapeExpr): an int,
    an expression over the inputs' dimensions (+, -, *, //, cdiv, min, max),
    or fake where only the types are asked for."""
    __slots__ = ("_e",)

    def __init__(self, value: Union[int, "ShapeExpr", None] = None) -> None:
        if isinstance(value, ShapeExpr):
            value = value._e
        elif isinstance(value, (int, np.integer)):
            value = int(value)
        self._e = value

    @staticmethod
    def _val(x):
        if isinstance(x, ShapeExpr):
            return x._e
        if isinstance(x, (int, np.integer)):
            return int(x)
        raise TypeError(f"a shape expression takes ints and ShapeExprs, not {type(x).__name__}")

    def _bin(self, other, name, swap=False):
        try:
            o = ShapeExpr._val(other)
        except TypeError:
            return NotImplemented
        a, b = (o, self._e) if swap else (self._e, o)
        return ShapeExpr(_op(a, b, name))

    def __add__(self, o): return self._bin(o, "add")
    def __radd__(self, o): return self._bin(o, "add", True)
    def __sub__(self, o): return self._bin(o, "sub")
    def __rsub__(self, o): return self._bin(o, "sub", True)
    def __mul__(self, o): return self._bin(o, "mul")
    def __rmul__(self, o): return self._bin(o, "mul", True)
    def __floordiv__(self, o): return self._bin(o, "floordiv")
    def __rfloordiv__(self, o): return self._bin(o, "floordiv", True)

    @property
    def is_fake(self) -> bool:
        return self._e is None

    @property
    def is_constant(self) -> bool:
        if self._e is None:
            raise RuntimeError("a fake ShapeExpr (only the output types are being asked for) "
                               "has no value")
        return isinstance(self._e, int) or bool(self._e.is_constant())

    def constant_value(self) -> int:
        if not self.is_constant:
            raise RuntimeError("the dimension is not a build-time constant")
        return self._e if isinstance(self._e, int) else int(self._e.constant_value())

    @property
    def is_size_tensor(self) -> bool:
        return False

    def __repr__(self) -> str:
        if self._e is None:
            return "ShapeExpr(fake)"
        return f"ShapeExpr({self._e if isinstance(self._e, int) else 'expr'})"


def cdiv(first, second) -> ShapeExpr:
    """ceil(first / second), symbolically."""
    return ShapeExpr(_op(ShapeExpr._val(first), ShapeExpr._val(second), "cdiv"))


def min(first, second) -> ShapeExpr:  # noqa: A001 - TensorRT's name
    return ShapeExpr(_op(ShapeExpr._val(first), ShapeExpr._val(second), "min"))


def max(first, second) -> ShapeExpr:  # noqa: A001 - TensorRT's name
    return ShapeExpr(_op(ShapeExpr._val(first), ShapeExpr._val(second), "max"))


class ShapeExprs:
    """A tensor's shape as ShapeExprs (TensorRT's tensorrt.plugin.ShapeExprs)."""

    def __init__(self, length: int = 0, _is_dummy: bool = False) -> None:
        self._exprs: List[ShapeExpr] = [ShapeExpr() for _ in range(int(length))]
        self._is_dummy = _is_dummy
        self._any_rank = False

    @classmethod
    def from_tuple(cls, shape_exprs: Iterable[Union[int, ShapeExpr]]) -> "ShapeExprs":
        s = cls(0)
        s._exprs = [ShapeExpr(e) for e in shape_exprs]
        for e in s._exprs:
            ShapeExpr._val(e)
        return s

    @classmethod
    def _fake(cls, rank: Optional[int]) -> "ShapeExprs":
        s = cls(rank or 0, _is_dummy=True)
        s._any_rank = rank is None
        return s

    def __len__(self) -> int:
        return len(self._exprs)

    def __iter__(self):
        return iter(self._exprs)

    def __getitem__(self, i):
        if self._any_rank and isinstance(i, int):
            return ShapeExpr()      # rank not known yet: every dimension is fake
        r = self._exprs[i]
        return ShapeExprs.from_tuple(r) if isinstance(i, slice) else r

    def __setitem__(self, i, v) -> None:
        self._exprs[i] = ShapeExpr(v)

    def numel(self) -> ShapeExpr:
        n = ShapeExpr(1)
        for e in self._exprs:
            n = n * e
        return ShapeExpr() if self._any_rank else n

    def __repr__(self) -> str:
        return f"ShapeExprs({self._exprs!r})"


def _shape_exprs(x) -> ShapeExprs:
    return x if isinstance(x, ShapeExprs) else ShapeExprs.from_tuple(x)


class TensorDesc:
    """A tensor's description, no data (TensorRT's tensorrt.plugin.TensorDesc)."""

    def __init__(self, shape_expr: Union[ShapeExprs, Sequence[Union[int, ShapeExpr]], None] = None,
                 dtype: Any = None, format: Any = None, scale: Optional[float] = None) -> None:
        from . import DataType, TensorFormat
        self._shape_expr = None if shape_expr is None else _shape_exprs(shape_expr)
        self.dtype = None if dtype is None else DataType(int(dtype))
        self.format = TensorFormat.LINEAR if format is None else TensorFormat(int(format))
        self.scale = scale

    @property
    def shape_expr(self) -> ShapeExprs:
        if self._shape_expr is None:
            raise ValueError("this TensorDesc has no shape expression")
        return self._shape_expr

    @shape_expr.setter
    def shape_expr(self, v) -> None:
        self._shape_expr = _shape_exprs(v)

    @property
    def has_shape(self) -> bool:
        return self._shape_expr is not None

    @property
    def ndim(self) -> int:
        return len(self.shape_expr)

    @property
    def is_size_tensor(self) -> bool:
        return False

    @property
    def is_aliased(self) -> bool:
        return False

    def like(self) -> "TensorDesc":
        """A TensorDesc of the same shape, type and format."""
        d = TensorDesc(None, self.dtype, self.format, self.scale)
        if self._shape_expr is not None:    # a copy: changing it leaves this one alone
            s = self._shape_expr
            d._shape_expr = ShapeExprs(0, s._is_dummy)
            d._shape_expr._exprs = list(s._exprs)
            d._shape_expr._any_rank = s._any_rank
        return d

    def aliased(self) -> "TensorDesc":
        raise _errors()[2]("kiln.plugin: aliased outputs (an output sharing an input's buffer) "
                           "are not supported; return x.like() and write the output")

    def __repr__(self) -> str:
        return f"TensorDesc(shape_expr={self._shape_expr!r}, dtype={self.dtype!r})"


def from_shape_expr(shape_expr, dtype: Any) -> TensorDesc:
    """A TensorDesc of the given shape expressions and type."""
    return TensorDesc(_shape_exprs(shape_expr), dtype)


# --------------------------------------------------------------------------
# tensors at run time


class Shape(tuple):
    """A concrete shape (TensorRT's tensorrt.plugin.Shape)."""

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))

    @property
    def is_dynamic(self) -> bool:
        return False

    min = opt = max = property(lambda self: tuple(self))


class Tensor:
    """A plugin's input or output buffer in impl (TensorRT's
    tensorrt.plugin.Tensor). On a GPU engine it has
    ``__cuda_array_interface__`` (``torch.as_tensor(t, device="cuda")``,
    ``cupy.asarray(t)``); on a CPU engine it is a numpy buffer
    (``np.asarray(t)``, ``t.numpy()``, DLPack), written in place."""

    def __init__(self, buf: Any, dtype: Any, fmt: Any = 0) -> None:
        from . import DataType, TensorFormat
        self._buf = buf
        self._host = isinstance(buf, np.ndarray)
        self.dtype = DataType(int(dtype))
        self.format = TensorFormat(int(fmt))

    @property
    def shape(self) -> Shape:
        return Shape(self._buf.shape)

    @property
    def ndim(self) -> int:
        return len(self._buf.shape)

    def numel(self) -> int:
        return self.shape.numel()

    @property
    def data_ptr(self) -> int:
        if self._host:
            return int(self._buf.__array_interface__["data"][0])
        return int(self._buf.address)

    @property
    def is_data_dependent(self) -> bool:
        return False

    @property
    def is_aliased(self) -> bool:
        return False

    @property
    def on_device(self) -> bool:
        """kiln's: True for a GPU engine's buffer, False for host memory."""
        return not self._host

    @property
    def __cuda_array_interface__(self):
        if self._host:
            raise AttributeError("a CPU engine's Tensor is host memory (np.asarray(t))")
        return self._buf.__cuda_array_interface__

    def __array__(self, dtype=None, copy=None):
        if not self._host:
            raise TypeError("a GPU engine's Tensor is device memory: use "
                            "torch.as_tensor(t, device='cuda') or cupy.asarray(t)")
        if copy:
            return np.array(self._buf, dtype=dtype)
        return self._buf if dtype is None else self._buf.astype(dtype, copy=False)

    def __dlpack__(self, *args, **kwargs):
        if not self._host:
            raise TypeError("kiln.plugin.Tensor offers DLPack for host memory only; on the GPU "
                            "use __cuda_array_interface__")
        return self._buf.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        if not self._host:
            return (2, 0)
        return self._buf.__dlpack_device__()

    def numpy(self) -> np.ndarray:
        """kiln's: the numpy view of a CPU engine's buffer."""
        return self.__array__()

    def aliased(self, shape=None) -> "Tensor":
        """A Tensor over the same data with another shape of the same volume."""
        shape = tuple(self.shape if shape is None else shape)
        if int(np.prod(shape, dtype=np.int64)) != self.numel():
            raise ValueError(f"aliased: shape {shape} has another volume than {tuple(self.shape)}")
        if self._host:
            buf = self._buf.reshape(shape)
        else:
            from ._tensors import DeviceArray
            b = self._buf
            buf = DeviceArray(b.address, shape, int(self.dtype), b.stream, b._readonly)
        return Tensor(buf, self.dtype, self.format)

    def __repr__(self) -> str:
        kind = "host" if self._host else "device"
        return f"Tensor({kind}, shape={tuple(self.shape)}, dtype={self.dtype.name})"


# --------------------------------------------------------------------------
# autotune combinations

_TYPE_NAMES = {"FP32": "FLOAT", "FLOAT32": "FLOAT", "FP16": "HALF", "FLOAT16": "HALF",
               "BF16": "BF16", "BFLOAT16": "BF16", "FP8": "FP8", "FP64": "DOUBLE"}


def _parse_types(s: str):
    from . import DataType
    out = []
    for part in s.split(","):
        part = part.strip()
        sep = "|" if "|" in part else "*" if "*" in part else ""
        opts = []
        for t in (part.split(sep) if sep else [part]):
            t = t.strip().upper()
            try:
                opts.append(DataType[_TYPE_NAMES.get(t, t)])
            except KeyError:
                raise _errors()[0](f"AutoTuneCombination: unknown type {t!r} in {s!r} "
                                   f"(FP32, FP16, BF16, INT8, INT32, INT64, BOOL, ...)") from None
        out.append((opts, sep == "|"))
    return out


def _parse_layouts(s: str):
    from . import TensorFormat
    out = []
    for part in s.split(","):
        part = part.strip()
        sep = "|" if "|" in part else "*" if "*" in part else ""
        opts = []
        for t in (part.split(sep) if sep else [part]):
            t = t.strip().upper()
            if t in ("LINEAR", "HWC", "NHWC"):
                opts.append(TensorFormat[t])
            else:
                opts.append(None)   # a layout kiln does not have: never matches
        out.append((opts, sep == "|"))
    return out


class AutoTuneCombination:
    """The I/O type / layout combinations a plugin takes (TensorRT's
    tensorrt.plugin.AutoTuneCombination): ``"FP32|FP16, FP32|FP16"`` (one entry
    a position; ``|`` ties positions to the same choice, ``*`` leaves them
    free), layouts the same way (``"LINEAR"``), and tactics. kiln does not
    time a Python plugin's tactics: it takes the first one listed."""

    def __init__(self, io_types: Optional[str] = None, layouts: Optional[str] = None,
                 tactics: Optional[Iterable[int]] = None) -> None:
        self._types = _parse_types(io_types) if io_types else []
        self._layouts = _parse_layouts(layouts) if layouts else []
        self._pos_types: Dict[int, Any] = {}
        self._pos_layouts: Dict[int, Any] = {}
        self._tactics = [int(t) for t in tactics] if tactics else []

    def pos(self, pos: Union[int, Sequence[int]], io_types: str, layouts: str = "LINEAR") -> None:
        """Types and layouts for one position or several tied positions."""
        ps = [pos] if isinstance(pos, int) else list(pos)
        t = _parse_types(io_types)[0]
        lay = _parse_layouts(layouts)[0]
        for p in ps:
            self._pos_types[p] = (t[0], len(ps) > 1 or t[1])
            self._pos_layouts[p] = (lay[0], len(ps) > 1 or lay[1])

    def tactics(self, tactics: Iterable[int]) -> None:
        self._tactics = [int(t) for t in tactics]

    def _entries(self, which: str, n: int):
        base = self._types if which == "t" else self._layouts
        extra = self._pos_types if which == "t" else self._pos_layouts
        if which == "l" and not base and not extra:
            from . import TensorFormat
            return [([TensorFormat.LINEAR], False)] * n
        if len(base) == 1 and n > 1:
            base = base * n         # one entry for every position
        if base and len(base) != n:
            raise _errors()[0](f"AutoTuneCombination: {len(base)} entries for {n} inputs and "
                               f"outputs")
        out = list(base) if base else [None] * n
        for p, e in extra.items():
            if 0 <= p < n:
                out[p] = e
        return out

    def _matches(self, pos: int, descs, n: int) -> bool:
        for which, get in (("t", lambda d: int(d.dtype)), ("l", lambda d: int(d.format))):
            entries = self._entries(which, n)
            ks = None
            for p in range(pos + 1):
                e = entries[p]
                if e is None:
                    continue
                opts, tied = e
                hit = {k for k, o in enumerate(opts) if o is not None and int(o) == get(descs[p])}
                if not hit:
                    return False
                if tied:
                    ks = hit if ks is None else ks & hit
                    if not ks:
                        return False
        return True


# --------------------------------------------------------------------------
# the definitions


def _split_id(plugin_id: str) -> Tuple[str, str]:
    if not isinstance(plugin_id, str) or plugin_id.count("::") != 1:
        raise _errors()[0](f"plugin id {plugin_id!r}: write it as \"namespace::name\"")
    ns, name = plugin_id.split("::")
    if not ns or not name:
        raise _errors()[0](f"plugin id {plugin_id!r}: write it as \"namespace::name\"")
    return ns, name


def _is_desc(ann) -> bool:
    if ann is TensorDesc:
        return True
    return isinstance(ann, str) and ann.split(".")[-1] == "TensorDesc"


_NP_FIELD = {np.dtype(np.int8): FieldType.INT8, np.dtype(np.int16): FieldType.INT16,
             np.dtype(np.int32): FieldType.INT32, np.dtype(np.int64): FieldType.INT64,
             np.dtype(np.float16): FieldType.FLOAT16, np.dtype(np.float32): FieldType.FLOAT32,
             np.dtype(np.float64): FieldType.FLOAT64, np.dtype(np.bool_): FieldType.INT8}


def _attr_kind(plugin_id: str, pname: str, ann):
    """(FieldType, length, converter) of an attribute annotation."""
    if ann is int:
        return FieldType.INT64, 1, int
    if ann is float:
        return FieldType.FLOAT32, 1, float
    if ann is bool:
        return FieldType.INT8, 1, lambda v: bool(int(v))
    if ann is str:
        return FieldType.STRING, -1, str
    if ann is bytes:
        return FieldType.BYTES, -1, lambda v: v if isinstance(v, bytes) else str(v).encode()
    if typing.get_origin(ann) is np.ndarray:
        args = typing.get_args(ann)
        dt = None
        if len(args) == 2:
            inner = typing.get_args(args[1])
            if inner:
                dt = np.dtype(inner[0])
        if dt in _NP_FIELD:
            return _NP_FIELD[dt], -1, lambda v, dt=dt: np.asarray(
                [v] if np.isscalar(v) else v, dtype=dt)
    raise _errors()[0](f"{plugin_id}: attribute {pname!r} has annotation {ann!r}; kiln.plugin "
                       "takes int, float, str, bool, bytes or numpy.typing.NDArray[dtype]")


class _Def:
    def __init__(self, plugin_id: str, fn: Callable, lazy: bool) -> None:
        self.id = plugin_id
        self.ns, self.name = _split_id(plugin_id)
        self.fn = fn
        self.impl_fn: Optional[Callable] = None
        self.impl_attrs: List[str] = []
        self.impl_tactic = False
        self.autotune_fn: Optional[Callable] = None
        self.cls = None
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            hints = dict(getattr(fn, "__annotations__", {}))
        sig = inspect.signature(fn)
        self.inputs: List[str] = []
        self.attrs: Dict[str, Tuple[FieldType, int, Callable]] = {}
        self.defaults: Dict[str, Any] = {}
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise _errors()[0](f"{plugin_id}: register function: *args / **kwargs are not "
                                   "supported (name each input and attribute)")
            ann = hints.get(p.name, p.annotation)
            if ann is inspect.Parameter.empty:
                raise _errors()[0](f"{plugin_id}: register function: parameter {p.name!r} needs a "
                                   "type hint (TensorDesc for an input, or an attribute type)")
            if _is_desc(ann):
                if self.attrs:
                    raise _errors()[0](f"{plugin_id}: register function: input {p.name!r} comes "
                                       "after an attribute; inputs come first")
                self.inputs.append(p.name)
            else:
                self.attrs[p.name] = _attr_kind(plugin_id, p.name, ann)
                if p.default is not inspect.Parameter.empty:
                    self.defaults[p.name] = p.default
        if not self.inputs:
            raise _errors()[0](f"{plugin_id}: register function takes no TensorDesc input")
        ret = hints.get("return", sig.return_annotation)
        self.num_outputs = self._count_outputs(ret)

    def _count_outputs(self, ret) -> int:
        if _is_desc(ret):
            return 1
        if typing.get_origin(ret) in (tuple, Tuple):
            args = typing.get_args(ret)
            if args and Ellipsis not in args and all(_is_desc(a) for a in args):
                return len(args)
            if Ellipsis in args:
                raise _errors()[0](f"{self.id}: register function: kiln needs the number of "
                                   "outputs in the return annotation (Tuple[TensorDesc, "
                                   "TensorDesc], not Tuple[TensorDesc, ...])")
        raise _errors()[0](f"{self.id}: register function needs a return annotation: TensorDesc "
                           "or Tuple[TensorDesc, ...] with one entry per output")

    # calls into the user's functions

    def call_desc(self, descs: List[TensorDesc], attrs: Dict[str, Any]) -> List[TensorDesc]:
        if len(descs) != len(self.inputs):
            raise ValueError(f"{self.id}: the node has {len(descs)} inputs, the register "
                             f"function takes {len(self.inputs)}")
        r = self.fn(*descs, **attrs)
        outs = list(r) if isinstance(r, (tuple, list)) else [r]
        if len(outs) != self.num_outputs or not all(isinstance(o, TensorDesc) for o in outs):
            raise TypeError(f"{self.id}: the register function returned {r!r}; it must return "
                            f"{'a TensorDesc' if self.num_outputs == 1 else 'a tuple of ' + str(self.num_outputs) + ' TensorDescs'}")
        for i, o in enumerate(outs):
            if o.dtype is None:
                raise TypeError(f"{self.id}: output {i} of the register function has no dtype")
        return outs


_defs: Dict[str, _Def] = {}


class _QDPPlugin(Plugin):
    """A Plugin whose callbacks are a tensorrt.plugin-style definition."""
    _def: _Def
    _net_types: Dict[str, Tuple[int, ...]] = {}

    def __init__(self, **fields: Any) -> None:
        d = self._def
        if d.impl_fn is None:
            raise NotImplementedError(
                f"plugin '{d.id}' has no implementation: define one with "
                f"@kiln.plugin.impl(\"{d.id}\") before building or loading")
        self.attrs: Dict[str, Any] = {}
        for name, (ft, length, conv) in d.attrs.items():
            if name in fields:
                self.attrs[name] = conv(fields[name])
            elif name in d.defaults:
                self.attrs[name] = d.defaults[name]
        self._dtypes: Optional[List[Any]] = None
        self._ranks: Optional[List[int]] = None
        self._combos = None
        self._tactic: Optional[int] = None
        self._in_types: Optional[List[int]] = None
        self._out_types: Optional[List[int]] = None

    def get_fields(self) -> Dict[str, Any]:
        out = {}
        for k, v in self.attrs.items():
            out[k] = v.tolist() if isinstance(v, np.ndarray) else (int(v) if isinstance(v, bool) else v)
        return out

    def clone(self) -> "Plugin":
        c = type(self)(**self.get_fields())
        c._in_types, c._out_types, c._tactic = self._in_types, self._out_types, self._tactic
        return c

    # build phase

    def _out_descs(self, dtypes, ranks=None) -> List[TensorDesc]:
        descs = [TensorDesc(ShapeExprs._fake(None if ranks is None else ranks[i]), dt)
                 for i, dt in enumerate(dtypes)]
        return self._def.call_desc(descs, self.attrs)

    def output_dtypes(self, input_dtypes):
        self._dtypes = list(input_dtypes)
        return [o.dtype for o in self._out_descs(input_dtypes, self._ranks)]

    def output_shapes(self, input_shapes):
        self._ranks = [len(s) for s in input_shapes]
        dts = self._dtypes or [None] * len(input_shapes)
        descs = [TensorDesc(ShapeExprs.from_tuple([ShapeExpr(e) for e in s]), dt)
                 for s, dt in zip(input_shapes, dts)]
        outs = self._def.call_desc(descs, self.attrs)
        shapes = []
        for i, o in enumerate(outs):
            if not o.has_shape:
                raise ValueError(f"{self._def.id}: output {i} of the register function has no "
                                 "shape expression")
            dims = []
            for k, e in enumerate(o.shape_expr):
                if e.is_fake:
                    raise ValueError(f"{self._def.id}: output {i} dimension {k} is not an "
                                     "expression of the inputs' dimensions")
                dims.append(e._e)
            shapes.append(dims)
        return shapes

    def _combinations(self, descs, n_in):
        if self._combos is None:
            ins = [TensorDesc(ShapeExprs.from_tuple([ShapeExpr(int(x)) if x >= 0 else ShapeExpr()
                                                     for x in d.shape]), d.dtype)
                   for d in descs[:n_in]]
            outs = self._def.call_desc(
                [TensorDesc(ShapeExprs._fake(len(d.shape)), d.dtype) for d in descs[:n_in]],
                self.attrs)
            sel = _select_args(self._def.autotune_fn, self._def)
            kw = {a: self.attrs[a] for a in sel if a in self.attrs}
            r = self._def.autotune_fn(*ins, **kw, outputs=tuple(outs))
            combos = list(r) if isinstance(r, (list, tuple)) else [r]
            if not combos or not all(isinstance(c, AutoTuneCombination) for c in combos):
                raise TypeError(f"{self._def.id}: the autotune function must return a list of "
                                f"AutoTuneCombination, not {r!r}")
            self._combos = combos
        return self._combos

    def supports_format(self, pos, descs, num_inputs, num_outputs):
        from . import DataType
        n = num_inputs + num_outputs
        if self._def.autotune_fn is not None:
            return any(c._matches(pos, descs, n) for c in self._combinations(descs, num_inputs))
        if int(descs[pos].format) != 0:
            return False
        dt = int(descs[pos].dtype)
        if pos < num_inputs:     # inputs as they come, floats as float32
            return dt not in (int(DataType.HALF), int(DataType.BF16), int(DataType.FP8))
        want = self._out_descs([d.dtype for d in descs[:num_inputs]],
                               [len(d.shape) for d in descs[:num_inputs]])
        return dt == int(want[pos - num_inputs].dtype)

    def _remember(self, ins, outs):
        self._in_types = [int(d.dtype) for d in ins]
        self._out_types = [int(d.dtype) for d in outs]
        self._formats = [int(d.format) for d in list(ins) + list(outs)]
        if self._def.autotune_fn is not None:
            descs = list(ins) + list(outs)
            n = len(descs)
            for c in self._combinations(descs, len(ins)):
                if c._matches(n - 1, descs, n):
                    self._tactic = c._tactics[0] if c._tactics else 0
                    break

    def configure(self, inputs, outputs):
        self._remember(inputs, outputs)

    def on_shape_change(self, inputs, outputs):
        self._remember(inputs, outputs)

    # run time

    def enqueue(self, inputs, outputs, workspace, stream):
        from ._tensors import kiln_dtype_of
        d = self._def

        def types(bufs, known):
            if known and len(known) == len(bufs):
                return known
            return [int(kiln_dtype_of(b.dtype)) for b in bufs]
        ti, to = types(inputs, self._in_types), types(outputs, self._out_types)
        a = [Tensor(b, t) for b, t in zip(inputs, ti)]
        o = tuple(Tensor(b, t) for b, t in zip(outputs, to))
        kw = {k: self.attrs[k] for k in d.impl_attrs if k in self.attrs}
        if d.impl_tactic:
            kw["tactic"] = self._tactic if self._tactic is not None else 0
        d.impl_fn(*a, **kw, outputs=o, stream=int(stream or 0))


def _select_args(fn, d: _Def) -> List[str]:
    """The attribute names fn takes after its inputs."""
    ps = list(inspect.signature(fn).parameters.values())
    return [p.name for p in ps[len(d.inputs):] if p.name in d.attrs]


def _install(d: _Def) -> None:
    if d.cls is not None:
        return
    specs = {n: FieldSpec(n, ft, length, n not in d.defaults) for n, (ft, length, _) in d.attrs.items()}
    cls = type(f"QDP_{d.ns}_{d.name}", (_QDPPlugin,),
               {"name": d.name, "namespace": d.ns, "version": "1", "fields": specs,
                "num_outputs": d.num_outputs, "_def": d})
    register_plugin(cls)
    d.cls = cls


def register(plugin_id: str, lazy_register: bool = False) -> Callable:
    """Decorator: describe a plugin's inputs, attributes and outputs
    (TensorRT's tensorrt.plugin.register). The plugin goes into kiln's
    registry at once (lazy_register=True: when its impl is defined)."""
    _split_id(plugin_id)
    if plugin_id in _defs:
        raise _errors()[0](f"plugin '{plugin_id}' is already registered")

    def deco(fn: Callable) -> Callable:
        d = _Def(plugin_id, fn, lazy_register)
        if not lazy_register:
            _install(d)
        _defs[plugin_id] = d
        return fn
    return deco


def _def_of(plugin_id: str, what: str) -> _Def:
    d = _defs.get(plugin_id)
    if d is None:
        raise _errors()[1](f"@kiln.plugin.{what}(\"{plugin_id}\"): no plugin of that id; "
                           f"register it first with @kiln.plugin.register(\"{plugin_id}\")")
    return d


def impl(plugin_id: str) -> Callable:
    """Decorator: the plugin's enqueue (TensorRT's tensorrt.plugin.impl):
    ``fn(inp0: Tensor, ..., attr..., outputs: Tuple[Tensor], stream: int[,
    tactic: int])``."""
    d = _def_of(plugin_id, "impl")

    def deco(fn: Callable) -> Callable:
        ps = list(inspect.signature(fn).parameters.values())
        names = [p.name for p in ps]
        if len(ps) < len(d.inputs) + 2:
            raise _errors()[0](f"{plugin_id}: the impl function takes {names}; it needs the "
                               f"{len(d.inputs)} input(s) first, then attributes, then "
                               "'outputs' and 'stream'")
        rest = names[len(d.inputs):]
        for n in ("outputs", "stream"):
            if n not in rest:
                raise _errors()[0](f"{plugin_id}: the impl function has no {n!r} parameter "
                                   f"(it takes {names})")
        unknown = [n for n in rest if n not in d.attrs and n not in ("outputs", "stream", "tactic")]
        if unknown:
            raise _errors()[0](f"{plugin_id}: the impl function takes {unknown}, which are not "
                               f"attributes of the register function ({list(d.attrs)})")
        d.impl_attrs = [n for n in rest if n in d.attrs]
        d.impl_tactic = "tactic" in rest
        d.impl_fn = fn
        _install(d)
        return fn
    return deco


def autotune(plugin_id: str) -> Callable:
    """Decorator: the type / layout combinations (and tactics) the plugin
    takes (TensorRT's tensorrt.plugin.autotune):
    ``fn(inp0: TensorDesc, ..., attr..., outputs: Tuple[TensorDesc]) ->
    List[AutoTuneCombination]``."""
    d = _def_of(plugin_id, "autotune")

    def deco(fn: Callable) -> Callable:
        names = list(inspect.signature(fn).parameters)
        if "outputs" not in names[len(d.inputs):]:
            raise _errors()[0](f"{plugin_id}: the autotune function has no 'outputs' parameter "
                               f"(it takes {names})")
        d.autotune_fn = fn
        return fn
    return deco


def _deregister(plugin_id: str) -> None:
    """kiln's: remove a decorated plugin from the registry (refused while an
    engine uses it)."""
    from .plugin import deregister_plugin
    d = _def_of(plugin_id, "deregister")
    if d.cls is not None:
        deregister_plugin(d.cls)
    del _defs[plugin_id]
