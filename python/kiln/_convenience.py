"""kiln.build / kiln.load: the whole Builder -> Runtime flow in one call."""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

ShapeSpec = Union[Sequence[int], Tuple[Sequence[int], Sequence[int], Sequence[int]]]


def _min_opt_max(name: str, spec: ShapeSpec):
    spec = tuple(spec)
    if spec and all(isinstance(s, (list, tuple)) for s in spec):
        if len(spec) != 3:
            raise ValueError(f"shapes[{name!r}]: give one shape or (min, opt, max)")
        return tuple(tuple(int(d) for d in s) for s in spec)
    s = tuple(int(d) for d in spec)
    return s, s, s


def build(onnx_path: Union[str, os.PathLike], *, fp16: bool = False, bf16: bool = False,
          tf32: bool = False, strongly_typed: bool = False, channels_last: bool = False,
          shapes: Optional[Mapping[str, ShapeSpec]] = None, backend: str = "cpu",
          workspace: Optional[int] = None, optimization_level: Optional[int] = None,
          timing_cache: Optional[Union[str, os.PathLike]] = None,
          plugins: Iterable[Union[str, os.PathLike]] = (), threads: int = 0,
          save: Optional[Union[str, os.PathLike]] = None, logger: Any = None):
    """Parse an ONNX file, build it and load the plan: returns an ICudaEngine.

    shapes: {input: shape} (one shape: min = opt = max) or
    {input: (min, opt, max)} for the dynamic inputs (one profile).
    backend: "cpu" or "cuda". plugins: plugin libraries to load first.
    timing_cache: a cache file read before and written after the build.
    save: also write the plan to this file."""
    from . import (Builder, BuilderFlag, Logger, MemoryPoolType, OnnxParser, Runtime,
                   load_plugin_library)
    logger = logger or Logger(Logger.WARNING)
    for lib in plugins:
        load_plugin_library(lib)
    builder = Builder(logger)
    network = builder.create_network()
    parser = OnnxParser(network, logger)
    parser.parse_from_file(onnx_path, raise_on_error=True)
    config = builder.create_builder_config()
    config.backend = backend
    for on, flag in ((fp16, BuilderFlag.FP16), (bf16, BuilderFlag.BF16), (tf32, BuilderFlag.TF32),
                     (strongly_typed, BuilderFlag.STRONGLY_TYPED),
                     (channels_last, BuilderFlag.CHANNELS_LAST)):
        if on:
            config.set_flag(flag)
    if workspace is not None:
        config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, int(workspace))
    if optimization_level is not None:
        config.builder_optimization_level = int(optimization_level)
    if threads:
        config.threads = threads
    if timing_cache is not None:
        from . import ITimingCache
        config.set_timing_cache(ITimingCache(path=os.fspath(timing_cache)))
    if shapes:
        profile = builder.create_optimization_profile()
        for name, spec in shapes.items():
            profile.set_shape(name, *_min_opt_max(name, spec))
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if save is not None:
        with open(os.fspath(save), "wb") as f:
            f.write(plan)
    return Runtime(logger).deserialize_cuda_engine(plan)


def load(plan: Union[str, os.PathLike, bytes], logger: Any = None):
    """Load a plan file (or bytes) into an ICudaEngine."""
    from . import Runtime
    return Runtime(logger).deserialize_engine(plan)
