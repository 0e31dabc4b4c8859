"""Plugins from Python: load plugin libraries, list the registry, and define
plugins in Python that register through kiln's C registry
(include/kiln/kiln_plugin.h) like any library's, so they build into plans
(their fields are stored there) and run on the CPU and GPU backends.

A Python plugin is a subclass of :class:`Plugin`::

    class Scale(kiln.Plugin):
        name = "PyScale"                      # the ONNX op_type it serves
        fields = {"alpha": kiln.FieldType.FLOAT32}
        def __init__(self, alpha=1.0):        # from the node's attributes
            self.alpha = alpha
        def enqueue(self, inputs, outputs, workspace, stream):
            np.multiply(inputs[0], self.alpha, out=outputs[0])

    kiln.register_plugin(Scale)

On a CPU engine enqueue gets numpy arrays over kiln's buffers (no copies;
write the outputs in place); on a GPU engine it gets DeviceArray objects
(``__cuda_array_interface__``: ``torch.as_tensor(x, device="cuda")``,
``cupy.asarray(x)``) and the stream as an int: enqueue the work on that
stream, since the context may capture the run into a CUDA graph and replay
it without calling Python again (``context.cuda_graphs = False`` calls it
every run). The callbacks run with the GIL held, on the thread that builds
or runs the plan.

A plan with a Python plugin loads only in a process that registered the same
plugin (name, version, namespace) first, as a plan with a library plugin
needs the library.
"""
from __future__ import annotations

import copy
import enum
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
                    Type, Union)

import numpy as np

from . import _kiln
from ._tensors import DeviceArray, host_array, numpy_dtype


class FieldType(enum.IntEnum):
    """kiln_field_type: the types of a plugin's fields (its ONNX attributes)."""
    INT8 = 0
    INT16 = 1
    INT32 = 2
    INT64 = 3
    FLOAT16 = 4
    BFLOAT16 = 5
    FLOAT32 = 6
    FLOAT64 = 7
    STRING = 8
    BYTES = 9


_FIELD_NP = {FieldType.INT8: np.int8, FieldType.INT16: np.int16, FieldType.INT32: np.int32,
             FieldType.INT64: np.int64, FieldType.FLOAT16: np.float16,
             FieldType.FLOAT32: np.float32, FieldType.FLOAT64: np.float64}


class FieldSpec(NamedTuple):
    name: str
    type: FieldType
    length: int = 1        # -1: any length; 1: a scalar
    required: bool = False


class PluginTensorDesc(NamedTuple):
    """A plugin tensor: type, layout and dims (-1 where not known yet)."""
    dtype: Any          # kiln.DataType
    format: Any         # kiln.TensorFormat
    shape: Tuple[int, ...]


class PluginCreatorInfo(NamedTuple):
    name: str
    version: str
    namespace: str
    source: Optional[str]
    fields: List[FieldSpec]
    library: Optional[str]


def _desc(t) -> PluginTensorDesc:
    from . import DataType, TensorFormat
    dt, layout, dims = t
    try:
        dt = DataType(dt)
    except ValueError:
        pass
    return PluginTensorDesc(dt, TensorFormat(layout), tuple(dims))


def _decode_field(ftype: int, length: int, raw: bytes, spec: Optional[FieldSpec]):
    ft = FieldType(ftype)
    if ft == FieldType.STRING:
        return raw.decode("utf-8")
    if ft == FieldType.BYTES:
        return raw
    if ft == FieldType.BFLOAT16:
        bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        vals = bits.view(np.float32).astype(np.float64)
    else:
        vals = np.frombuffer(raw, _FIELD_NP[ft])
    out = vals.tolist()
    scalar = (spec.length == 1) if spec is not None else (length == 1)
    return out[0] if scalar and len(out) == 1 else out


def _encode_field(name: str, value: Any, spec: Optional[FieldSpec]) -> Tuple[str, int, int, bytes]:
    if spec is not None:
        ft = spec.type
    elif isinstance(value, str):
        ft = FieldType.STRING
    elif isinstance(value, (bytes, bytearray)):
        ft = FieldType.BYTES
    elif np.asarray(value).dtype.kind in "iub":
        ft = FieldType.INT64
    else:
        ft = FieldType.FLOAT32
    if ft == FieldType.STRING:
        b = str(value).encode("utf-8")
        return name, int(ft), len(b), b
    if ft == FieldType.BYTES:
        b = bytes(value)
        return name, int(ft), len(b), b
    arr = np.asarray(value).ravel()
    if ft == FieldType.BFLOAT16:
        b = np.array([_kiln.float_to_bfloat16(float(x)) for x in arr], np.uint16).tobytes()
    else:
        b = arr.astype(_FIELD_NP[ft]).tobytes()
    return name, int(ft), int(arr.size), b


class Plugin:
    """Base class of plugins written in Python. Override what differs from
    the defaults: one output of input 0's type and shape, linear float32
    tensors, no workspace, fields read from same-named attributes."""

    #: identity in the registry (name = the ONNX op_type the plugin serves)
    name: str = ""
    version: str = "1"
    namespace: str = ""
    #: {field name: FieldType or (FieldType, length, required)}
    fields: Mapping[str, Any] = {}
    #: number of outputs
    num_outputs: int = 1
    #: types supports_format accepts by default (kiln.DataType values)
    dtypes: Sequence[int] = (1,)

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)

    # build phase
    def output_dtypes(self, input_dtypes: List[Any]) -> List[Any]:
        return [input_dtypes[0]] * self.num_outputs

    def output_shapes(self, input_shapes: List[List[Any]]) -> List[List[Any]]:
        """Output dims as expressions over the inputs' dims (kiln.DimExpr:
        +, -, *, //, ceil_div, min, max, ints), or ints."""
        return [list(input_shapes[0])] * self.num_outputs

    def supports_format(self, pos: int, descs: List[PluginTensorDesc], num_inputs: int,
                        num_outputs: int) -> bool:
        d = descs[pos]
        if int(d.format) != 0 or int(d.dtype) not in [int(t) for t in self.dtypes]:
            return False
        return pos == 0 or int(d.dtype) == int(descs[0].dtype)

    def configure(self, inputs: List[PluginTensorDesc], outputs: List[PluginTensorDesc]) -> None:
        pass

    def workspace_size(self, inputs: List[PluginTensorDesc], outputs: List[PluginTensorDesc]) -> int:
        return 0

    # runtime
    def on_shape_change(self, inputs: List[PluginTensorDesc], outputs: List[PluginTensorDesc]) -> None:
        pass

    def enqueue(self, inputs: List[Any], outputs: List[Any], workspace: Any, stream: Optional[int]) -> None:
        raise NotImplementedError(f"plugin {self.name!r} defines no enqueue")

    def get_fields(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in _specs(type(self)) if hasattr(self, k)}

    def clone(self) -> "Plugin":
        return copy.deepcopy(self)


def _specs(cls) -> Dict[str, FieldSpec]:
    out = {}
    for k, v in dict(cls.fields).items():
        if isinstance(v, FieldSpec):
            out[k] = v
        elif isinstance(v, tuple):
            out[k] = FieldSpec(k, FieldType(v[0]), *v[1:])
        else:
            t = FieldType(v)
            # strings and bytes: any length; numbers: a scalar
            out[k] = FieldSpec(k, t, -1 if t in (FieldType.STRING, FieldType.BYTES) else 1)
    return out


class _Adapter:
    """What the C creator calls (python/src/kiln_module.c)."""

    def __init__(self, plugin: Plugin, specs: Dict[str, FieldSpec], layer: str) -> None:
        self.p = plugin
        self.specs = specs
        self.layer = layer

    def num_outputs(self) -> int:
        return int(self.p.num_outputs)

    def output_dtypes(self, dtypes):
        from . import DataType
        return [int(t) for t in self.p.output_dtypes([DataType(t) for t in dtypes])]

    def output_shapes(self, shapes):
        return [list(s) for s in self.p.output_shapes(shapes)]

    def supports_format(self, pos, descs, n_in, n_out):
        return bool(self.p.supports_format(pos, [_desc(d) for d in descs], n_in, n_out))

    def configure(self, ins, outs):
        self.p.configure([_desc(d) for d in ins], [_desc(d) for d in outs])

    def workspace_size(self, ins, outs):
        return int(self.p.workspace_size([_desc(d) for d in ins], [_desc(d) for d in outs]))

    def on_shape_change(self, ins, outs):
        self.p.on_shape_change([_desc(d) for d in ins], [_desc(d) for d in outs])

    def enqueue(self, ins, in_ptrs, outs, out_ptrs, workspace, stream):
        if stream:   # a GPU engine: device pointers
            # inputs are not to be written, but they are not marked read-only:
            # torch.as_tensor refuses a read-only __cuda_array_interface__
            a = [DeviceArray(p, d[2], d[0], stream) for d, p in zip(ins, in_ptrs)]
            b = [DeviceArray(p, d[2], d[0], stream) for d, p in zip(outs, out_ptrs)]
            self.p.enqueue(a, b, workspace or None, stream)
        else:
            a = [host_array(p, d[2], d[0], False) for d, p in zip(ins, in_ptrs)]
            b = [host_array(p, d[2], d[0], True) for d, p in zip(outs, out_ptrs)]
            self.p.enqueue(a, b, workspace or None, None)

    def get_fields(self):
        vals = self.p.get_fields() or {}
        return [_encode_field(k, v, self.specs.get(k)) for k, v in vals.items()]

    def clone(self):
        return _Adapter(self.p.clone(), self.specs, self.layer)


_registered: Dict[Tuple[str, str, str], type] = {}


def register_plugin(cls: Type[Plugin]) -> Type[Plugin]:
    """Register a Plugin subclass in kiln's registry (usable as a decorator).
    The registry keeps the class alive until deregister_plugin."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: set the plugin's name")
    specs = _specs(cls)

    def factory(layer: str, fields, phase: int):
        kwargs = {}
        for name, ftype, length, raw in fields:
            kwargs[name] = _decode_field(ftype, length, raw, specs.get(name))
        inst = cls(**kwargs)
        return _Adapter(inst, specs, layer)

    spec_list = [(s.name, int(s.type), int(s.length), bool(s.required)) for s in specs.values()]
    _kiln.register_python_plugin(cls.name, str(cls.version), cls.namespace, spec_list, factory)
    _registered[(cls.name, str(cls.version), cls.namespace)] = cls
    return cls


def deregister_plugin(plugin: Union[Type[Plugin], str], version: str = "1",
                      namespace: str = "") -> None:
    """Remove a Python plugin (refused while an engine uses it)."""
    if isinstance(plugin, type):
        key = (plugin.name, str(plugin.version), plugin.namespace)
    else:
        key = (plugin, version, namespace)
    _kiln.plugin_deregister(*key)
    _registered.pop(key, None)


def define_plugin(name: str, enqueue: Callable, *, output_shapes: Optional[Callable] = None,
                  output_dtypes: Optional[Callable] = None,
                  supports_format: Optional[Callable] = None, dtypes: Sequence[int] = (1,),
                  num_outputs: int = 1, fields: Optional[Mapping[str, Any]] = None,
                  version: str = "1", namespace: str = "", register: bool = True) -> Type[Plugin]:
    """A plugin from functions: ``enqueue(inputs, outputs, fields: dict,
    stream)``, ``output_shapes(input_shapes, fields) -> shapes``,
    ``output_dtypes(input_dtypes, fields) -> dtypes``,
    ``supports_format(pos, descs, num_inputs, num_outputs) -> bool`` (default:
    linear tensors of ``dtypes``, all of one type); registered unless
    register=False. Returns the Plugin subclass."""
    body: Dict[str, Any] = {"name": name, "version": version, "namespace": namespace,
                            "fields": dict(fields or {}), "num_outputs": num_outputs,
                            "dtypes": tuple(dtypes)}

    def _enqueue(self, ins, outs, ws, stream):
        enqueue(ins, outs, self.get_fields(), stream)
    body["enqueue"] = _enqueue
    if output_shapes is not None:
        body["output_shapes"] = lambda self, s: output_shapes(s, self.get_fields())
    if output_dtypes is not None:
        body["output_dtypes"] = lambda self, d: output_dtypes(d, self.get_fields())
    if supports_format is not None:
        body["supports_format"] = lambda self, pos, descs, n_in, n_out: supports_format(
            pos, descs, n_in, n_out)
    cls = type(name, (Plugin,), body)
    return register_plugin(cls) if register else cls


PluginLibrary = _kiln.PluginLibrary
_libraries: List[Any] = []


def load_plugin_library(path, namespace: Optional[str] = None, sha256: Optional[str] = None,
                        embed: bool = False) -> "_kiln.PluginLibrary":
    """dlopen a plugin library and register its creators
    (kiln_plugin_load_library; with sha256, kiln_plugin_load_library_sha256).
    embed=True: plans built from now on carry the library's bytes."""
    import os
    from . import _call
    lib = _call(_kiln.plugin_load_library, os.fspath(path), namespace, sha256)
    if embed:
        lib.set_embedded(True)
    _libraries.append(lib)
    return lib


def list_plugins() -> List[PluginCreatorInfo]:
    """Every registered creator: identity, where it came from, its fields."""
    out = []
    for name, version, ns, source, fields, lib in _kiln.plugin_list():
        out.append(PluginCreatorInfo(name, version, ns, source,
                                     [FieldSpec(n, FieldType(t), l, bool(r)) for n, t, l, r in fields],
                                     lib))
    return out


class IPluginRegistry:
    """kiln's process-wide registry under TensorRT's names."""

    @property
    def plugin_creator_list(self) -> List[PluginCreatorInfo]:
        return list_plugins()

    all_creators = plugin_creator_list

    def get_creator(self, name: str, version: Optional[str] = None,
                    plugin_namespace: str = "") -> Optional[PluginCreatorInfo]:
        for c in list_plugins():
            if c.name == name and c.namespace == plugin_namespace and (
                    version is None or c.version == version):
                return c
        return None

    get_plugin_creator = get_creator

    def load_library(self, path, namespace: Optional[str] = None) -> "_kiln.PluginLibrary":
        return load_plugin_library(path, namespace)

    def deregister_library(self, handle: "_kiln.PluginLibrary") -> None:
        handle.deregister()
        if handle in _libraries:
            _libraries.remove(handle)

    def register_creator(self, plugin: Type[Plugin], plugin_namespace: str = "") -> bool:
        if plugin_namespace:
            plugin = type(plugin.__name__, (plugin,), {"namespace": plugin_namespace})
        register_plugin(plugin)
        return True

    def deregister_creator(self, plugin: Type[Plugin]) -> bool:
        deregister_plugin(plugin)
        return True

    @property
    def allow_embedded_libraries(self) -> bool:
        return getattr(self, "_allow", False)

    @allow_embedded_libraries.setter
    def allow_embedded_libraries(self, on: bool) -> None:
        _kiln.plugin_allow_embedded_libraries(on)
        self._allow = bool(on)

    def allow_embedded_sha256(self, sha256: Optional[str]) -> None:
        """Add a SHA-256 to the allow-list of embedded libraries (None empties it)."""
        _kiln.plugin_allow_embedded_sha256(sha256)


_registry = IPluginRegistry()


def get_plugin_registry() -> IPluginRegistry:
    return _registry


def plan_plugins(plan: bytes) -> Dict[str, Any]:
    """The plugin records of a plan (kiln_plan_plugins_json), parsed."""
    import json
    return json.loads(_kiln.plan_plugins_json(plan))


# TensorRT 10's tensorrt.plugin decorators (``import kiln.plugin as trtp``);
# min / max are its shape-expression functions, as in tensorrt.plugin.
from ._qdp import (AutoTuneCombination, Shape, ShapeExpr, ShapeExprs, Tensor,  # noqa: E402,F401
                   TensorDesc, autotune, cdiv, from_shape_expr, impl, max, min, register)
