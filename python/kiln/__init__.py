"""kiln: build ONNX models into plans and run them, from Python.

The classes follow TensorRT's Python API, so a TensorRT script ports by
changing its import (``import kiln as trt``)::

    logger = kiln.Logger(kiln.Logger.WARNING)
    builder = kiln.Builder(logger)
    network = builder.create_network()
    parser = kiln.OnnxParser(network, logger)
    parser.parse_from_file("model.onnx")
    config = builder.create_builder_config()
    config.set_flag(kiln.BuilderFlag.FP16)
    plan = builder.build_serialized_network(network, config)
    engine = kiln.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()

and kiln's own names sit beside them (``config.backend = "cuda"``,
``config.channels_last``, ``Runtime.deserialize_engine(path)``, plugins
defined in Python, ``kiln.build`` / ``engine.infer`` and ``kiln.compare``).
Failures raise :class:`kiln.Error` subclasses carrying kiln's message.
docs/python.md has the full TensorRT-to-kiln name table.
"""
from __future__ import annotations

import atexit
import builtins
import enum
import os
import sys
import threading
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _kiln
from ._kiln import (DeviceError, Error, ExecutionError, FileError, InternalError,
                    InvalidArgumentError, NotFoundError, OutOfMemoryError, ParseError,
                    PlanError, PluginError, ShapeError, UnsupportedError, VersionError)
from ._tensors import DeviceArray, kiln_dtype_of, numpy_dtype, resolve, stream_handle

_bool = builtins.bool
__version__: str = _kiln.version()
atexit.register(_kiln._shutdown)

Shape = Tuple[int, ...]

# --------------------------------------------------------------------------
# enums


class DataType(enum.IntEnum):
    """Tensor element types (kiln_dtype; TensorRT's names, kiln's as aliases)."""
    FLOAT = 1
    HALF = 10
    BF16 = 16
    INT8 = 3
    UINT8 = 2
    INT16 = 5
    UINT16 = 4
    INT32 = 6
    INT64 = 7
    UINT32 = 12
    UINT64 = 13
    BOOL = 9
    DOUBLE = 11
    FP8 = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    FLOAT16 = 10
    BFLOAT16 = 16

    @property
    def itemsize(self) -> int:
        return _kiln.dtype_size(int(self))


float32 = DataType.FLOAT
float16 = DataType.HALF
bfloat16 = DataType.BF16
int8 = DataType.INT8
uint8 = DataType.UINT8
int32 = DataType.INT32
int64 = DataType.INT64
bool = DataType.BOOL  # noqa: A001 - TensorRT's name (trt.bool)
float64 = DataType.DOUBLE


def nptype(dtype: DataType) -> type:
    """The numpy scalar type of a DataType (TensorRT's trt.nptype); bfloat16
    and float8 are their raw bits (uint16 / uint8)."""
    return numpy_dtype(int(dtype)).type


class TensorIOMode(enum.IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


from ._seq import TensorKind  # noqa: E402  (kiln_tensor_kind)


class IOTensorInfo(NamedTuple):
    """kiln: one I/O value of an engine (engine.inputs / engine.outputs).
    `dtype` is the element type of a sequence or optional; `holds` says what
    an optional holds (TensorKind.TENSOR or SEQUENCE), None for the others;
    `shape` is the shape as built (-1 dynamic), None for a sequence or
    optional."""
    name: str
    mode: TensorIOMode
    kind: TensorKind
    dtype: Union[DataType, int]
    shape: Optional[Shape]
    holds: Optional[TensorKind]


class BuilderFlag(enum.IntEnum):
    """Builder flags. FP16, BF16, TF32, STRONGLY_TYPED are TensorRT's; the
    others are kiln's (kiln_builder_flag). OBEY_PRECISION_CONSTRAINTS and
    PREFER_PRECISION_CONSTRAINTS are accepted and change nothing: kiln always
    obeys layer precision constraints."""
    FP16 = 1 << 2
    BF16 = 1 << 3
    TF32 = 1 << 4
    STRONGLY_TYPED = 1 << 7
    NO_FUSION = 1 << 0
    NO_TIMING = 1 << 1
    REF_TACTICS = 1 << 5
    CHANNELS_LAST = 1 << 6
    FP16_ACCUMULATION = 1 << 8
    TIMED_PRECISION = 1 << 9
    INT8 = 1 << 16
    OBEY_PRECISION_CONSTRAINTS = 1 << 30
    PREFER_PRECISION_CONSTRAINTS = 1 << 29


_FLAG_NOOP = int(BuilderFlag.OBEY_PRECISION_CONSTRAINTS) | int(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
_FLAG_REDUCED = int(BuilderFlag.FP16) | int(BuilderFlag.BF16) | int(BuilderFlag.TF32)


def _c_flags(flags: int) -> int:
    """The C flags for a config's flags: as in TensorRT, FP16 / BF16 / TF32
    allow their type (the builder times each layer and keeps the faster,
    KILN_BUILDER_FLAG_TIMED_PRECISION); layer precisions force it."""
    c = flags & ~_FLAG_NOOP
    if c & _FLAG_REDUCED:
        c |= int(BuilderFlag.TIMED_PRECISION)
    return c


class MemoryPoolType(enum.IntEnum):
    """Memory pools; kiln has one, the per-layer scratch limit."""
    WORKSPACE = 0


class NetworkDefinitionCreationFlag(enum.IntEnum):
    """EXPLICIT_BATCH is accepted and ignored (every kiln network is explicit
    batch); STRONGLY_TYPED sets BuilderFlag.STRONGLY_TYPED when the network is
    built."""
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class OnnxParserFlag(enum.IntEnum):
    """kiln_onnx_flag: a node whose op_type names a registered plugin runs as
    that plugin even when kiln has a built-in op of that name."""
    PLUGINS_OVERRIDE_BUILTINS = 0


class TensorFormat(enum.IntEnum):
    """Layouts as plugins see them (kiln_layout)."""
    LINEAR = 0
    HWC = 1
    NHWC = 1


class LayerInformationFormat(enum.IntEnum):
    ONELINE = 0
    JSON = 1


# --------------------------------------------------------------------------
# logging


class ILogger:
    """A log sink: override ``log(severity, msg)``. kiln's logger is process
    wide: the logger of the last Builder / Runtime / OnnxParser made is used.
    Messages are handed to it on the calling thread after each kiln call
    (kiln may log from its own threads, where Python cannot be entered
    safely)."""

    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR = Severity.INTERNAL_ERROR
    ERROR = Severity.ERROR
    WARNING = Severity.WARNING
    INFO = Severity.INFO
    VERBOSE = Severity.VERBOSE

    def __init__(self) -> None:
        self.min_severity = ILogger.Severity.WARNING

    def log(self, severity: "ILogger.Severity", msg: str) -> None:  # pragma: no cover
        raise NotImplementedError


class Logger(ILogger):
    """TensorRT's default logger: messages at ``min_severity`` or more severe
    go to stderr."""

    def __init__(self, min_severity: "ILogger.Severity" = ILogger.Severity.WARNING) -> None:
        super().__init__()
        self.min_severity = ILogger.Severity(min_severity)

    def log(self, severity: "ILogger.Severity", msg: str) -> None:
        if severity <= self.min_severity:
            tag = "EEWIV"[int(severity)] if int(severity) < 5 else "V"
            print(f"[kiln] [{tag}] {msg}", file=sys.stderr)


_log_lock = threading.Lock()
_logger: Optional[ILogger] = None


def _use_logger(logger: Optional[ILogger]) -> None:
    global _logger
    if logger is None:
        return
    with _log_lock:
        _logger = logger
        trt_sev = int(getattr(logger, "min_severity", ILogger.WARNING))
        # TensorRT severities 0..4 to kiln's 0..3 (INTERNAL_ERROR and ERROR are errors)
        _kiln.set_log_queue(max(0, trt_sev - 1))


def _flush_log() -> None:
    msgs = _kiln.drain_log()
    lg = _logger
    if not msgs or lg is None:
        return
    for sev, msg in msgs:
        lg.log(ILogger.Severity(sev + 1), msg)


def _call(fn, *args):
    """Run a kiln call and hand its log to the Python logger, error or not."""
    try:
        return fn(*args)
    finally:
        _flush_log()


# --------------------------------------------------------------------------
# networks


class ITensor:
    """A named tensor of a network (type and shape as kiln knows them)."""

    def __init__(self, network: "INetworkDefinition", name: str) -> None:
        self._network = network
        self.name = name

    @property
    def dtype(self) -> Optional[DataType]:
        dt = self._network._c.tensor_info(self.name)[0]
        return DataType(dt) if dt else None

    @property
    def shape(self) -> Optional[Shape]:
        return self._network._c.tensor_info(self.name)[1]

    def get_dimension_name(self, index: int) -> Optional[str]:
        """The name of dimension `index` (the ONNX dim_param of a dynamic
        dimension of a network input), or None (TensorRT's name)."""
        return self._network._c.dim_name(self.name, int(index))

    def set_dimension_name(self, index: int, name: Optional[str]) -> None:
        """Name dimension `index` of a network input or output (None removes
        the name); kiln's messages about that dimension use it."""
        self._network._c.set_dim_name(self.name, int(index), name)

    @property
    def dimension_names(self) -> Optional[Tuple[Optional[str], ...]]:
        """kiln's: the names of every dimension (None where unnamed)."""
        shape = self.shape
        if shape is None:
            return None
        return tuple(self.get_dimension_name(i) for i in range(len(shape)))

    @property
    def is_network_input(self) -> bool:
        return self.name in self._network._input_names()

    @property
    def is_network_output(self) -> bool:
        return self.name in self._network._output_names()

    def __repr__(self) -> str:
        return f"ITensor({self.name!r}, shape={self.shape}, dtype={self.dtype.name})"


class ILayer:
    """A node of a network: its name, op type and tensor names."""

    def __init__(self, network: "INetworkDefinition", index: int) -> None:
        self._network = network
        self.index = index
        self.name = network._c.name("node", index)
        self.type = network._c.name("op", index)
        self.inputs, self.outputs = network._c.node_io(index)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def get_input(self, i: int) -> ITensor:
        return ITensor(self._network, self.inputs[i])

    def get_output(self, i: int) -> ITensor:
        return ITensor(self._network, self.outputs[i])

    def __repr__(self) -> str:
        return f"ILayer({self.name!r}, {self.type})"


class INetworkDefinition:
    """A kiln network (kiln_network.h): filled by an OnnxParser, or by hand
    with add_input / add_constant / add_node (ONNX semantics) / mark_output."""

    def __init__(self, flags: int = 0) -> None:
        self._c = _kiln.Network()
        self._flags = int(flags)

    @property
    def strongly_typed(self) -> bool:
        return _bool(self._flags & (1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)))

    def _input_names(self) -> List[str]:
        return [self._c.name("input", i) for i in range(self.num_inputs)]

    def _output_names(self) -> List[str]:
        return [self._c.name("output", i) for i in range(self.num_outputs)]

    @property
    def num_inputs(self) -> int:
        return self._c.counts()[0]

    @property
    def num_outputs(self) -> int:
        return self._c.counts()[1]

    @property
    def num_layers(self) -> int:
        return self._c.counts()[2]

    def get_input(self, index: int) -> ITensor:
        if not 0 <= index < self.num_inputs:
            raise IndexError(f"network input {index} of {self.num_inputs}")
        return ITensor(self, self._c.name("input", index))

    def get_output(self, index: int) -> ITensor:
        if not 0 <= index < self.num_outputs:
            raise IndexError(f"network output {index} of {self.num_outputs}")
        return ITensor(self, self._c.name("output", index))

    def get_layer(self, index: int) -> ILayer:
        if not 0 <= index < self.num_layers:
            raise IndexError(f"layer {index} of {self.num_layers}")
        return ILayer(self, index)

    def __len__(self) -> int:
        return self.num_layers

    def __getitem__(self, index: int) -> ILayer:
        return self.get_layer(index)

    def add_input(self, name: str, dtype: DataType, shape: Sequence[int]) -> ITensor:
        """A graph input; -1 dims are dynamic (set per optimization profile)."""
        self._c.add_input(name, int(dtype), tuple(shape))
        return ITensor(self, name)

    def add_constant_tensor(self, name: str, value: np.ndarray) -> ITensor:
        """A constant (an ONNX initializer), copied."""
        arr = np.require(value, requirements="C")  # a 0-d value stays 0-d
        self._c.add_constant(name, kiln_dtype_of(arr.dtype), arr.shape, arr)
        return ITensor(self, name)

    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
                 attrs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 domain: str = "", opset: int = 17) -> ILayer:
        """A node with ONNX semantics (kiln_network_add_node). Attribute values:
        int, float, str, or sequences of ints / floats."""
        nm = name if name is not None else f"{op_type}_{self.num_layers}"
        idx = self._c.add_node(nm, op_type, domain, int(opset), list(inputs), list(outputs))
        for k, v in (attrs or {}).items():
            if isinstance(v, str):
                self._c.set_attr(idx, k, "string", v)
            elif isinstance(v, (float, np.floating)):
                self._c.set_attr(idx, k, "float", float(v))
            elif isinstance(v, (int, np.integer)):
                self._c.set_attr(idx, k, "int", int(v))
            else:
                seq = list(v)
                if all(isinstance(x, (int, np.integer)) for x in seq):
                    self._c.set_attr(idx, k, "ints", [int(x) for x in seq])
                else:
                    self._c.set_attr(idx, k, "floats", [float(x) for x in seq])
        return ILayer(self, idx)

    def mark_output(self, tensor: Union[ITensor, str]) -> None:
        self._c.mark_output(tensor.name if isinstance(tensor, ITensor) else tensor)

    def set_tensor_info(self, name: str, dtype: DataType, shape: Sequence[int]) -> None:
        self._c.set_tensor_info(name, int(dtype), tuple(shape))

    def extract(self, layers: Iterable[int]) -> "INetworkDefinition":
        """A new network of these layers (kiln_network_extract)."""
        n = INetworkDefinition(self._flags)
        n._c = self._c.extract(list(layers))
        return n

    def write_onnx(self, path: Union[str, os.PathLike]) -> None:
        """Write the network as an ONNX file (kiln_onnx_write_file)."""
        _call(self._c.write_onnx, os.fspath(path))


class ParserError:
    """One error of OnnxParser (TensorRT's IParserError)."""

    def __init__(self, exc: Error) -> None:
        self._exc = exc

    def desc(self) -> str:
        return str(self._exc)

    def code(self) -> int:
        return int(getattr(self._exc, "status", 0))

    @property
    def exception(self) -> Error:
        return self._exc

    def __str__(self) -> str:
        return str(self._exc)

    def __repr__(self) -> str:
        return f"ParserError({type(self._exc).__name__}: {self._exc})"


class OnnxParser:
    """Parse an ONNX model into an (empty) network. As TensorRT's, parse()
    returns False on failure and the errors are kept (num_errors,
    get_error(i)); ``raise_on_error=True`` raises the kiln.Error instead."""

    def __init__(self, network: INetworkDefinition, logger: Optional[ILogger] = None) -> None:
        self.network = network
        self._errors: List[ParserError] = []
        self._flags = 0
        _use_logger(logger)

    def set_flag(self, flag: OnnxParserFlag) -> None:
        self._flags |= 1 << int(flag)

    def clear_flag(self, flag: OnnxParserFlag) -> None:
        self._flags &= ~(1 << int(flag))

    def get_flag(self, flag: OnnxParserFlag) -> bool:
        return _bool(self._flags & (1 << int(flag)))

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> ParserError:
        return self._errors[index]

    def clear_errors(self) -> None:
        self._errors.clear()

    def _adopt(self, fn, *args, raise_on_error: bool) -> bool:
        if self.network.num_layers or self.network.num_inputs:
            raise InvalidArgumentError("OnnxParser: the network is not empty")
        try:
            net = _call(fn, *args)
        except Error as e:
            self._errors.append(ParserError(e))
            if raise_on_error:
                raise
            return False
        self.network._c = net
        return True

    def parse(self, model: bytes, path: Optional[str] = None, *, raise_on_error: bool = False) -> bool:
        """Parse a model held in memory; ``path`` is where external data
        files are looked up (the model's folder)."""
        base = os.path.dirname(os.fspath(path)) if path else None
        return self._adopt(_kiln.onnx_parse_memory, model, base, self._flags,
                           raise_on_error=raise_on_error)

    def parse_from_file(self, path: Union[str, os.PathLike], *, raise_on_error: bool = False) -> bool:
        return self._adopt(_kiln.onnx_parse_file, os.fspath(path), self._flags,
                           raise_on_error=raise_on_error)


# --------------------------------------------------------------------------
# builder


class IOptimizationProfile:
    """min / opt / max shapes of dynamic inputs (and values of shape-tensor
    inputs); added to a config with add_optimization_profile."""

    def __init__(self) -> None:
        self._shapes: Dict[str, Tuple[Shape, Shape, Shape]] = {}
        self._values: Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int],
                  max: Sequence[int]) -> None:
        self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    def get_shape(self, input: str) -> List[Shape]:
        return list(self._shapes.get(input, ()))

    def set_shape_input(self, input: str, min: Sequence[int], opt: Sequence[int],
                        max: Sequence[int]) -> None:
        """Values of a shape-tensor input (int64 unless given as arrays)."""
        conv = [np.ascontiguousarray(v if isinstance(v, np.ndarray) else np.asarray(v, np.int64))
                for v in (min, opt, max)]
        self._values[input] = (conv[0], conv[1], conv[2])

    def get_shape_input(self, input: str) -> List[List[int]]:
        return [v.tolist() for v in self._values.get(input, ())]

    def __bool__(self) -> bool:
        return True

    def _apply(self, c: "_kiln.BuilderConfig", index: int) -> None:
        for name, (a, b, d) in self._shapes.items():
            c.set_shape(index, name, a, b, d)
        for name, (a, b, d) in self._values.items():
            c.set_input_values(index, name, kiln_dtype_of(a.dtype), a, b, d)


class ITimingCache:
    """Tactic timings. kiln keeps them in a file (trtexec's
    --timingCacheFile): a cache made from bytes lives in a temporary file
    (removed with the object); ``ITimingCache(path=...)`` uses a file of the
    caller's. serialize() gives the current bytes."""

    def __init__(self, data: bytes = b"", path: Optional[str] = None) -> None:
        self._own = path is None
        if path is None:
            import tempfile
            fd, path = tempfile.mkstemp(prefix="kiln-timing-", suffix=".cache")
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(data))
        self.path = os.fspath(path)

    def serialize(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def combine(self, other: "ITimingCache", ignore_mismatch: bool = False) -> bool:
        raise UnsupportedError("kiln: timing caches cannot be combined (one file per cache)")

    def reset(self) -> bool:
        open(self.path, "wb").close()
        return True

    def __del__(self) -> None:
        if getattr(self, "_own", False):
            try:
                os.unlink(self.path)
            except OSError:
                pass


class IBuilderConfig:
    """Build options (kiln_builder_config)."""

    def __init__(self) -> None:
        self._c = _kiln.BuilderConfig()
        self._flags = 0
        self._pools: Dict[int, int] = {}
        self._level = 3
        self._backend = "cpu"
        self._profiles: List[IOptimizationProfile] = []
        self._timing_cache: Optional[ITimingCache] = None
        self._threads = 0

    # flags
    def set_flag(self, flag: BuilderFlag) -> None:
        self._flags |= int(flag)
        self._c.set_flags(_c_flags(self._flags))

    def clear_flag(self, flag: BuilderFlag) -> None:
        self._flags &= ~int(flag)
        self._c.set_flags(_c_flags(self._flags))

    def get_flag(self, flag: BuilderFlag) -> bool:
        return _bool(self._flags & int(flag))

    @property
    def flags(self) -> int:
        return self._flags

    @flags.setter
    def flags(self, value: int) -> None:
        self._flags = int(value)
        self._c.set_flags(_c_flags(self._flags))

    @property
    def channels_last(self) -> bool:
        """kiln's --channelsLast: NHWC regions around 2-D convolutions."""
        return self.get_flag(BuilderFlag.CHANNELS_LAST)

    @channels_last.setter
    def channels_last(self, on: bool) -> None:
        (self.set_flag if on else self.clear_flag)(BuilderFlag.CHANNELS_LAST)

    # memory
    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        if MemoryPoolType(pool) != MemoryPoolType.WORKSPACE:
            raise UnsupportedError(f"kiln has no memory pool {pool!r}")
        self._pools[int(pool)] = int(pool_size)
        self._c.set_workspace_limit(int(pool_size))

    def get_memory_pool_limit(self, pool: MemoryPoolType) -> int:
        return self._pools.get(int(pool), 0)

    # tactic search
    @property
    def builder_optimization_level(self) -> int:
        return self._level

    @builder_optimization_level.setter
    def builder_optimization_level(self, level: int) -> None:
        self._c.set_optimization_level(int(level))
        self._level = int(level)

    # kiln's own
    @property
    def backend(self) -> str:
        """"cpu" (default) or "cuda"."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        self._c.set_backend(name)
        self._backend = name

    @property
    def threads(self) -> int:
        """CPU threads the build (and the plan's default) uses; 0 = one per core."""
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        self._c.set_threads(int(n))
        self._threads = int(n)

    def set_layer_precision(self, layer: str, dtype: Optional[DataType]) -> None:
        """Keep a layer in FLOAT, or run it in HALF / BF16 (None removes it)."""
        self._c.set_layer_precision(layer, 0 if dtype is None else int(dtype))

    def set_input_type(self, index: int, dtype: DataType) -> None:
        """The type input ``index`` (-1: every float input) has in the plan."""
        self._c.set_io_type(0, int(index), int(dtype))

    def set_output_type(self, index: int, dtype: DataType) -> None:
        self._c.set_io_type(1, int(index), int(dtype))

    # profiles
    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        index = self._c.add_profile()
        profile._apply(self._c, index)
        self._profiles.append(profile)
        return index

    @property
    def num_optimization_profiles(self) -> int:
        return len(self._profiles)

    # timing caches
    def create_timing_cache(self, serialized_timing_cache: bytes = b"") -> ITimingCache:
        return ITimingCache(serialized_timing_cache)

    def set_timing_cache(self, cache: Optional[ITimingCache], ignore_mismatch: bool = False) -> bool:
        self._c.set_timing_cache(cache.path if cache is not None else None)
        self._timing_cache = cache
        return True

    def get_timing_cache(self) -> Optional[ITimingCache]:
        return self._timing_cache


class IHostMemory(bytes):
    """A serialized plan (bytes, with TensorRT's nbytes)."""

    @property
    def nbytes(self) -> int:
        return len(self)

    @property
    def dtype(self) -> DataType:
        return DataType.UINT8


def _cuda_available() -> bool:
    try:
        _kiln.backend_describe("cuda")
        return True
    except Error:
        return False


class Builder:
    """Makes networks, configs and profiles, and builds plans."""

    def __init__(self, logger: Optional[ILogger] = None) -> None:
        self.logger = logger
        _use_logger(logger)

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    @property
    def platform_has_fast_fp16(self) -> bool:
        """True when this process can build for a CUDA device (FP16 is fast
        there); kiln's CPU FP16 runs through conversions."""
        return _cuda_available()

    @property
    def platform_has_tf32(self) -> bool:
        return _cuda_available()

    def build_serialized_network(self, network: INetworkDefinition,
                                 config: IBuilderConfig) -> IHostMemory:
        """Build a plan (the GIL is released while kiln builds). Raises a
        kiln.Error where TensorRT would return None."""
        if network.strongly_typed and not config.get_flag(BuilderFlag.STRONGLY_TYPED):
            config._c.set_flags(_c_flags(config._flags | int(BuilderFlag.STRONGLY_TYPED)))
        return IHostMemory(_call(_kiln.build_serialized, network._c, config._c))


# --------------------------------------------------------------------------
# runtime


class EngineInspector:
    """Layer information of an engine (TensorRT's IEngineInspector)."""

    def __init__(self, engine: "ICudaEngine") -> None:
        self.engine = engine

    def get_engine_information(self, format: LayerInformationFormat = LayerInformationFormat.JSON) -> str:
        if format == LayerInformationFormat.JSON:
            return self.engine._c.layer_info_json()
        return "\n".join(f"{n} [{op}] tactic={t}" for n, op, t in self.engine._c.layers())

    def get_layer_information(self, layer: int,
                              format: LayerInformationFormat = LayerInformationFormat.JSON) -> str:
        n, op, t = self.engine._c.layers()[layer]
        if format == LayerInformationFormat.JSON:
            import json
            return json.dumps({"name": n, "op": op, "tactic": t})
        return f"{n} [{op}] tactic={t}"


class ICudaEngine:
    """A loaded plan (kiln_engine): immutable, shared by threads; each thread
    runs its own execution context. (TensorRT's name; a CPU plan is an engine
    too.) Contexts keep their engine alive."""

    def __init__(self, c: "_kiln.Engine", plan: Optional[bytes] = None,
                 path: Optional[str] = None) -> None:
        self._c = c
        self._plan = plan
        self._path = path
        self._infer_ctx: Optional[IExecutionContext] = None
        self._infer_lock = threading.Lock()

    # I/O
    @property
    def num_io_tensors(self) -> int:
        return self._c.num_io_tensors()

    def get_tensor_name(self, index: int) -> str:
        name = self._c.io_tensor_name(index)
        if name is None:
            raise IndexError(f"I/O tensor {index} of {self.num_io_tensors}")
        return name

    def _names(self) -> List[str]:
        return [self._c.io_tensor_name(i) for i in range(self._c.num_io_tensors())]

    @property
    def input_names(self) -> List[str]:
        return [n for n in self._names() if self._c.tensor_io_mode(n) == 1]

    @property
    def output_names(self) -> List[str]:
        return [n for n in self._names() if self._c.tensor_io_mode(n) == 2]

    def _check(self, name: str) -> None:
        if self._c.tensor_io_mode(name) == 0:
            raise NotFoundError(f"the engine has no I/O tensor '{name}' (it has: "
                                f"{', '.join(self._names())})")

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode(self._c.tensor_io_mode(name))

    def get_tensor_dtype(self, name: str) -> DataType:
        self._check(name)
        return DataType(self._c.tensor_dtype(name))

    def get_tensor_shape(self, name: str) -> Shape:
        """Shape as built: dynamic dims are -1."""
        s = self._c.tensor_shape(name)
        if s is None:
            self._check(name)
        return s

    def get_tensor_kind(self, name: str) -> TensorKind:
        """kiln: TENSOR, SEQUENCE (a list of arrays) or OPTIONAL (None, or an
        array / a list of arrays: get_tensor_info(name).holds says which)."""
        self._check(name)
        return TensorKind(self._c.tensor_kind(name))

    def get_tensor_info(self, name: str) -> IOTensorInfo:
        """kiln: name, mode, kind, element dtype, shape, what an optional holds."""
        self._check(name)
        kind = TensorKind(self._c.tensor_kind(name))
        dt = self._c.tensor_dtype(name)
        try:
            dt = DataType(dt)
        except ValueError:
            pass
        shape = self._c.tensor_shape(name) if kind == TensorKind.TENSOR else None
        holds = (TensorKind(self._c.tensor_element_kind(name))
                 if kind == TensorKind.OPTIONAL else None)
        return IOTensorInfo(name, TensorIOMode(self._c.tensor_io_mode(name)), kind, dt, shape,
                            holds)

    @property
    def inputs(self) -> List[IOTensorInfo]:
        """kiln: the inputs' descriptions (get_tensor_info), in order."""
        return [self.get_tensor_info(n) for n in self.input_names]

    @property
    def outputs(self) -> List[IOTensorInfo]:
        """kiln: the outputs' descriptions (get_tensor_info), in order."""
        return [self.get_tensor_info(n) for n in self.output_names]

    def is_shape_inference_io(self, name: str) -> bool:
        return self._c.tensor_is_shape_input(name)

    @property
    def num_optimization_profiles(self) -> int:
        return self._c.num_profiles()

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> List[Shape]:
        """[min, opt, max] of an input in a profile."""
        return list(self._c.profile_shape(int(profile_index), name))

    # layers
    @property
    def num_layers(self) -> int:
        return len(self._c.layers())

    @property
    def layers(self) -> List[Tuple[str, str, str]]:
        """kiln: [(name, op, tactic)] after fusion."""
        return self._c.layers()

    def create_engine_inspector(self) -> EngineInspector:
        return EngineInspector(self)

    @property
    def backend(self) -> str:
        """kiln: "cpu" or "cuda"."""
        return self._c.backend()

    @property
    def device_memory_is_host(self) -> bool:
        return self.backend == "cpu"

    def serialize(self) -> IHostMemory:
        """The plan's bytes (the file's, for an engine loaded from a path)."""
        if self._plan is None and self._path is not None:
            with open(self._path, "rb") as f:
                self._plan = f.read()
        return IHostMemory(self._plan or b"")

    def create_execution_context(self) -> "IExecutionContext":
        return IExecutionContext(self)

    # memory (kiln_engine_alloc / copy), so callers need no CUDA library
    def alloc(self, nbytes: int, host: bool = False) -> int:
        """Engine memory (device memory for a GPU engine; ``host=True``:
        pinned host memory). Free with free()."""
        return self._c.alloc(int(nbytes), host)

    def free(self, address: int, host: bool = False) -> None:
        self._c.free(address, host)

    def memcpy_htod(self, dst: int, src: Any, nbytes: Optional[int] = None) -> None:
        b = resolve(src, False, "source")
        self._c.copy(dst, b.address, nbytes if nbytes is not None else b.nbytes, 0)

    def memcpy_dtoh(self, dst: Any, src: int, nbytes: Optional[int] = None) -> None:
        b = resolve(dst, True, "destination")
        self._c.copy(b.address, src, nbytes if nbytes is not None else b.nbytes, 1)

    def memcpy(self, dst: int, src: int, nbytes: int, direction: int,
               stream: Any = None) -> None:
        """kiln_engine_copy (stream None) or kiln_engine_copy_async: direction
        0 host to device, 1 device to host, 2 device to device."""
        if stream is None:
            self._c.copy(dst, src, int(nbytes), int(direction))
        else:
            self._c.copy(dst, src, int(nbytes), int(direction), True, stream_handle(stream))

    def create_stream(self) -> Optional[int]:
        """A stream of the engine's backend (None on the CPU)."""
        return self._c.stream_create() or None

    def destroy_stream(self, stream: Optional[int]) -> None:
        self._c.stream_destroy(stream)

    def create_event(self) -> "_kiln.Event":
        return _kiln.Event(self._c)

    # convenience
    def infer(self, feeds: Mapping[str, Any], stream: Any = None) -> Dict[str, Any]:
        """Run once: {input name: array} -> {output name: array}, arrays of the
        inputs' kind (numpy in, numpy out; torch in, torch out; CuPy in, CuPy
        out). One context per engine serves infer(); calls are serialised."""
        from ._infer import infer
        with self._infer_lock:
            if self._infer_ctx is None:
                self._infer_ctx = self.create_execution_context()
            return infer(self, self._infer_ctx, feeds, stream)

    def __repr__(self) -> str:
        def desc(names: List[str]) -> List[str]:
            out = []
            for n in names:
                k = self._c.tensor_kind(n)
                out.append(n if k <= 0 else f"{n}: {TensorKind(k).name.lower()}")
            return out
        return (f"ICudaEngine(backend={self.backend!r}, inputs={desc(self.input_names)}, "
                f"outputs={desc(self.output_names)})")


class IExecutionContext:
    """Activation memory and bindings for running an engine (kiln_context).
    Tensors bound with set_tensor_address stay referenced by the context."""

    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self._c = _kiln.Context(engine._c)
        self._bound: Dict[str, Any] = {}
        self._profile = 0
        self._graphs = True
        self._enqueue = self._c.enqueue

    @property
    def active_optimization_profile(self) -> int:
        return self._profile

    @active_optimization_profile.setter
    def active_optimization_profile(self, index: int) -> None:
        self._c.set_profile(int(index))
        self._profile = int(index)

    def set_optimization_profile_async(self, profile_index: int, stream_handle: Any = None) -> bool:
        self.active_optimization_profile = profile_index
        return True

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        """Set an input's shape; raises kiln.ShapeError when it is outside the
        profile (TensorRT returns False)."""
        self._c.set_input_shape(name, tuple(shape))
        return True

    def get_tensor_shape(self, name: str) -> Shape:
        return self._c.tensor_shape(name)

    def set_tensor_address(self, name: str, memory: Any) -> bool:
        """Bind memory to an I/O tensor: an int address, or an array (numpy
        for a CPU engine; torch / CuPy / __cuda_array_interface__ / DLPack for
        a GPU engine), used in place and kept alive by the context."""
        if isinstance(memory, int):
            self._c.set_tensor_address(name, memory)
            self._bound.pop(name, None)
            return True
        b = resolve(memory, self.engine._c.tensor_io_mode(name) == 2, name)
        want = "cpu" if (self.engine.backend == "cpu" or
                         self.engine._c.tensor_is_shape_input(name)) else "cuda"
        if b.device is not None and b.device != want:
            raise InvalidArgumentError(
                f"tensor '{name}': {type(memory).__name__} is {b.device} memory but this "
                f"{self.engine.backend} engine needs {want} memory here")
        self._c.set_tensor_address(name, b.address)
        self._bound[name] = b.keep
        return True

    def get_tensor_address(self, name: str) -> int:
        return self._c.tensor_address(name)

    # sequences and optionals (CPU engines)
    def set_input_value(self, name: str, value: Any) -> None:
        """kiln: give a sequence input a list of arrays, an optional input
        None (no element) or its element (an array; a list of arrays for an
        optional of a sequence). Converted to the element type and copied now."""
        from ._seq import set_input_value
        set_input_value(self.engine._c, self._c, name, value)

    def get_output_value(self, name: str) -> Any:
        """kiln: after a run, a sequence output as a list of numpy arrays, an
        optional output as None or its element (an array, or a list)."""
        from ._seq import get_output_value
        return get_output_value(self.engine._c, self._c, name)

    def execute_async_v3(self, stream_handle: Any = None) -> bool:
        """Run once on a stream (int, torch.cuda.Stream, CuPy stream, None).
        On the CPU it returns when outputs are ready. The GIL is released
        while kiln runs. Raises kiln.Error on failure."""
        if stream_handle is None or type(stream_handle) is int:
            self._enqueue(stream_handle or None)
        else:
            self._enqueue(stream_handle_of(stream_handle))
        return True

    def execute_v2(self, bindings: Sequence[Any]) -> bool:
        """Synchronous run with addresses in I/O tensor order (inputs first)."""
        names = self.engine._names()
        if len(bindings) != len(names):
            raise InvalidArgumentError(f"execute_v2: {len(bindings)} bindings for "
                                       f"{len(names)} I/O tensors")
        for n, b in zip(names, bindings):
            self.set_tensor_address(n, b)
        self._enqueue(None)
        self._c.synchronize(None)
        return True

    def synchronize(self, stream_handle: Any = None) -> None:
        self._c.synchronize(stream_handle_of(stream_handle))

    # kiln's own
    @property
    def threads(self) -> int:
        return getattr(self, "_threads", 0)

    @threads.setter
    def threads(self, n: int) -> None:
        self._c.set_threads(int(n))
        self._threads = int(n)

    @property
    def cuda_graphs(self) -> bool:
        """Capture and replay CUDA graphs (default on; no effect on the CPU)."""
        return self._graphs

    @cuda_graphs.setter
    def cuda_graphs(self, on: bool) -> None:
        self._c.set_graphs(on)
        self._graphs = _bool(on)

    def set_profiling(self, on: bool) -> None:
        self._c.set_profiling(on)

    def layer_times(self) -> List[Tuple[str, float, int]]:
        """[(layer, total ms, runs)] while profiling is on."""
        return [(n, *self._c.layer_time(i)) for i, (n, _op, _t) in enumerate(self.engine._c.layers())]

    def infer(self, feeds: Mapping[str, Any], stream: Any = None) -> Dict[str, Any]:
        """engine.infer on this context."""
        from ._infer import infer
        return infer(self.engine, self, feeds, stream)


def stream_handle_of(stream: Any) -> Optional[int]:
    return stream_handle(stream)


class Runtime:
    """Loads plans into engines."""

    def __init__(self, logger: Optional[ILogger] = None) -> None:
        self.logger = logger
        _use_logger(logger)

    def deserialize_cuda_engine(self, serialized_engine: Any) -> ICudaEngine:
        """Load a plan from bytes (TensorRT's name; CPU plans too). The GIL is
        released while kiln checks and loads it. Raises kiln.Error where
        TensorRT would return None."""
        data = bytes(serialized_engine) if not isinstance(serialized_engine, bytes) else serialized_engine
        return ICudaEngine(_call(_kiln.engine_load, data), plan=data)

    def deserialize_engine(self, plan: Union[str, os.PathLike, bytes]) -> ICudaEngine:
        """kiln: load a plan from a file (mapped) or bytes."""
        if isinstance(plan, (bytes, bytearray, memoryview)):
            return self.deserialize_cuda_engine(plan)
        path = os.fspath(plan)
        return ICudaEngine(_call(_kiln.engine_load_file, path), path=path)


def plan_info(plan: Union[bytes, str, os.PathLike]) -> Dict[str, Any]:
    """What a plan's header says (kiln_plan_read_info): format and kiln
    versions, backend, target, libraries, size."""
    if not isinstance(plan, (bytes, bytearray, memoryview)):
        with open(os.fspath(plan), "rb") as f:
            plan = f.read(4096)
    return _kiln.plan_read_info(plan)


def backend_info(backend: str) -> Tuple[str, str]:
    """(target, libraries) this process binds plans of ``backend`` to."""
    return _kiln.backend_describe(backend)


def get_include() -> str:
    """The folder holding kiln/*.h (installed package)."""
    return os.path.join(os.path.dirname(__file__), "include")


def get_cmake_dir() -> str:
    """The folder of kilnConfig.cmake (installed package)."""
    return os.path.join(os.path.dirname(__file__), "lib", "cmake", "kiln")


# --------------------------------------------------------------------------
# plugins, convenience, accuracy

from .plugin import (FieldType, IPluginRegistry, Plugin, PluginLibrary,  # noqa: E402
                     PluginTensorDesc, define_plugin, deregister_plugin, get_plugin_registry,
                     load_plugin_library, list_plugins, register_plugin)
from ._convenience import build, load  # noqa: E402
from .accuracy import (compare, compare_arrays, CompareResult, OutputComparison,  # noqa: E402
                       load_npz, load_npy, save_npz, save_npy)

__all__ = [
    "Error", "InvalidArgumentError", "ParseError", "UnsupportedError", "ShapeError",
    "OutOfMemoryError", "FileError", "PlanError", "VersionError", "DeviceError", "PluginError",
    "NotFoundError", "ExecutionError", "InternalError",
    "DataType", "TensorIOMode", "TensorKind", "IOTensorInfo", "BuilderFlag", "MemoryPoolType",
    "NetworkDefinitionCreationFlag",
    "OnnxParserFlag", "TensorFormat", "LayerInformationFormat", "nptype",
    "ILogger", "Logger", "Builder", "INetworkDefinition", "ITensor", "ILayer", "OnnxParser",
    "ParserError", "IBuilderConfig", "IOptimizationProfile", "ITimingCache", "IHostMemory",
    "Runtime", "ICudaEngine", "IExecutionContext", "EngineInspector", "DeviceArray",
    "plan_info", "backend_info", "get_include", "get_cmake_dir",
    "FieldType", "Plugin", "PluginTensorDesc", "PluginLibrary", "IPluginRegistry",
    "define_plugin", "register_plugin", "deregister_plugin", "get_plugin_registry",
    "load_plugin_library", "list_plugins",
    "build", "load", "compare", "compare_arrays", "CompareResult", "OutputComparison",
    "load_npz", "load_npy", "save_npz", "save_npy",
]
