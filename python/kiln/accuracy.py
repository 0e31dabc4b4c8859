"""Accuracy against ONNX Runtime (Polygraphy's Comparator in spirit): run a
plan and ONNX Runtime on the same inputs and compare every output.

    result = kiln.compare("model.onnx", fp16=True, atol=1e-2, rtol=1e-2)
    print(result.table())
    assert result            # passed

The verdict follows kiln compare (docs/accuracy.md): with
check_error_stat="elemwise" (default) an output fails when any element is
over both atol and rtol; with "max", "mean" or "median" when that statistic
of the absolute error is over atol and the same statistic of the relative
error is over rtol. A shape mismatch fails at once; the same NaN (or
same-signed Inf) in the same place counts as equal, any other NaN/Inf
difference as an infinite error.

The statistics and the verdict are the C library's kiln_compare_tensors
(include/kiln/kiln_tools.h), the one `kiln compare` and `kiln debug` use;
load_npz / save_npz / load_npy / save_npy are its .npy/.npz code, the one
behind `kiln exec --loadInputs / --exportOutput` and `kiln compare
--load-inputs / --save-results`. Running kiln and ONNX Runtime is Python.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np


class OutputComparison(NamedTuple):
    name: str
    shape: tuple
    ref_shape: tuple
    max_abs: float
    mean_abs: float
    median_abs: float
    max_rel: float
    mean_rel: float
    median_rel: float
    failing: int           # elements over both tolerances
    count: int
    worst_index: Optional[tuple]
    atol: float
    rtol: float
    passed: bool

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if self.shape != self.ref_shape:
            return f"{verdict} {self.name!r}: shape {self.shape} vs reference {self.ref_shape}"
        return (f"{verdict} {self.name!r}: max abs {self.max_abs:.6g}, mean abs "
                f"{self.mean_abs:.6g}, max rel {self.max_rel:.6g}, {self.failing} of "
                f"{self.count} over atol={self.atol:g} and rtol={self.rtol:g}")


class CompareResult:
    """Per-output comparisons; truthy when every output passed."""

    def __init__(self, outputs: List[OutputComparison], inputs: Dict[str, np.ndarray],
                 kiln_outputs: Dict[str, np.ndarray], ref_outputs: Dict[str, np.ndarray]):
        self.outputs = outputs
        self.inputs = inputs
        self.kiln_outputs = kiln_outputs
        self.ref_outputs = ref_outputs

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def __bool__(self) -> bool:
        return self.passed

    def __getitem__(self, name: str) -> OutputComparison:
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def table(self) -> str:
        head = f"{'output':<24} {'shape':<18} {'max abs':>11} {'mean abs':>11} {'max rel':>11} " \
               f"{'failing':>9}  verdict"
        rows = [head, "-" * len(head)]
        for o in self.outputs:
            rows.append(f"{o.name[:24]:<24} {str(o.shape)[:18]:<18} {o.max_abs:>11.4g} "
                        f"{o.mean_abs:>11.4g} {o.max_rel:>11.4g} {o.failing:>9}  "
                        f"{'PASS' if o.passed else 'FAIL'}")
        rows.append(("PASSED" if self.passed else "FAILED") +
                    f": {sum(o.passed for o in self.outputs)} of {len(self.outputs)} output(s) "
                    "within tolerance (kiln vs onnxruntime)")
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"CompareResult(passed={self.passed}, outputs={[o.name for o in self.outputs]})"


def _tol(value: Union[float, Mapping[str, float]], name: str, default: float) -> float:
    if isinstance(value, Mapping):
        return float(value.get(name, value.get("", default)))
    return float(value)


_STATS = {"elemwise": 0, "max": 1, "mean": 2, "median": 3}


def _as_tensor(name: str, a: np.ndarray):
    """(name, kiln dtype, dims, buffer) of an array for the C calls; arrays of
    a dtype kiln has not (float128, ...) go as float64."""
    from ._tensors import kiln_dtype_of
    a = np.asarray(a)
    try:
        dt = kiln_dtype_of(a.dtype)
    except TypeError:
        a = a.astype(np.float64)
        dt = kiln_dtype_of(a.dtype)
    shape = tuple(int(d) for d in a.shape)      # (np.ascontiguousarray makes 0-d 1-d)
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    return (name, dt, shape, a.reshape(-1).view(np.uint8))


def _as_array(item) -> np.ndarray:
    from ._tensors import numpy_dtype
    _name, dt, dims, data = item
    return np.frombuffer(data, dtype=numpy_dtype(dt)).reshape(dims)


def load_npz(path: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """Every array of a .npz file (or the one of a .npy file, named by its
    stem), in file order, through kiln's own reader: bounded by
    KILN_MAX_INPUT_BYTES, errors (kiln.ParseError, kiln.FileError) name the
    file and byte offset. bfloat16 arrays come back as their uint16 bits."""
    from . import _kiln
    return {item[0]: _as_array(item) for item in _kiln.tensors_load_file(os.fspath(path))}


def load_npy(path: Union[str, os.PathLike]) -> np.ndarray:
    """The array of a .npy file (kiln's reader)."""
    arrays = load_npz(path)
    if len(arrays) != 1:
        raise ValueError(f"{os.fspath(path)!r} holds {len(arrays)} arrays, not one")
    return next(iter(arrays.values()))


def save_npz(path: Union[str, os.PathLike], arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays as an uncompressed .npz (members "<name>.npy"), as kiln
    writes --exportOutput / --save-results files."""
    from . import _kiln
    _kiln.tensors_save(os.fspath(path), [_as_tensor(k, v) for k, v in arrays.items()], True)


def save_npy(path: Union[str, os.PathLike], array: np.ndarray) -> None:
    """Write one array as .npy (kiln's writer)."""
    from . import _kiln
    _kiln.tensors_save(os.fspath(path), [_as_tensor("array", array)], False)


def compare_arrays(name: str, got: np.ndarray, ref: np.ndarray, atol: float = 1e-5,
                   rtol: float = 1e-5, check_error_stat: str = "elemwise") -> OutputComparison:
    """Compare one output with its reference (the C library's
    kiln_compare_tensors: the numbers `kiln compare` prints)."""
    from . import _kiln
    stat = _STATS.get(check_error_stat)
    if stat is None:
        raise ValueError(f"check_error_stat {check_error_stat!r}: use elemwise, max, mean or median")
    got = np.asarray(got)
    ref = np.asarray(ref)
    r = _kiln.compare_tensors(_as_tensor(name, got), _as_tensor(name, ref), float(atol),
                              float(rtol), stat, 0.99)
    if not r["same_shape"]:
        inf = float("inf")
        return OutputComparison(name, got.shape, ref.shape, inf, inf, inf, inf, inf, inf,
                                int(ref.size), int(ref.size), None, atol, rtol, False)
    n = r["count"]
    worst = tuple(int(i) for i in np.unravel_index(r["worst_index"], got.shape)) if n else None
    return OutputComparison(name, got.shape, ref.shape, r["max_abs"], r["mean_abs"],
                            r["median_abs"], r["max_rel"], r["mean_rel"], r["median_rel"],
                            r["mismatches"], n, worst, atol, rtol, bool(r["passed"]))


def random_inputs(engine, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                  seed: int = 0) -> Dict[str, np.ndarray]:
    """Inputs for an engine: float inputs uniform in [-1, 1), integer inputs
    in [0, 4), booleans at random; dynamic dims at the first profile's opt
    point unless ``shapes`` gives them. Seeded (numpy's default_rng)."""
    from ._tensors import numpy_dtype
    rng = np.random.default_rng(seed)
    out = {}
    for name in engine.input_names:
        if engine._c.tensor_kind(name) > 0:
            raise ValueError(f"random inputs: input '{name}' is a sequence or optional; "
                             "give the feeds (inputs=)")
        if shapes and name in shapes:
            shape = tuple(shapes[name])
        else:
            shape = tuple(engine.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                shape = tuple(engine.get_tensor_profile_shape(name, 0)[1])
        dt = numpy_dtype(int(engine.get_tensor_dtype(name)))
        if dt.kind == "f":
            a = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
        elif dt.kind == "b":
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            a = rng.integers(0, 4, size=shape).astype(dt)
        out[name] = a
    return out


def run_onnxruntime(onnx_path: Union[str, os.PathLike], feeds: Mapping[str, np.ndarray],
                    outputs: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """ONNX Runtime's CPU results for the same inputs."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(os.fspath(onnx_path), so, providers=["CPUExecutionProvider"])
    names = list(outputs) if outputs else [o.name for o in sess.get_outputs()]
    want = {i.name for i in sess.get_inputs()}
    res = sess.run(names, {k: v for k, v in feeds.items() if k in want})
    return dict(zip(names, res))


def compare(onnx_path: Union[str, os.PathLike], engine: Any = None, *,
            inputs: Optional[Mapping[str, np.ndarray]] = None,
            shapes: Optional[Mapping[str, Sequence[int]]] = None,
            atol: Union[float, Mapping[str, float]] = 1e-5,
            rtol: Union[float, Mapping[str, float]] = 1e-5,
            check_error_stat: str = "elemwise", seed: int = 0,
            reference: Optional[Mapping[str, np.ndarray]] = None,
            **build_options: Any) -> CompareResult:
    """Run kiln and ONNX Runtime on the same inputs; compare every output.

    engine: an ICudaEngine, a plan path / bytes, or None to build one from
    the model with ``build_options`` (kiln.build's: fp16=, backend=, ...;
    ``shapes`` also serves as the build's profile). inputs: the feeds
    (random, seeded, when not given). atol / rtol: one value or
    {output name: value} ("" for the default). reference: results to
    compare against instead of running ONNX Runtime."""
    from . import ICudaEngine, load
    from ._convenience import build
    if engine is None:
        engine = build(onnx_path, shapes=shapes, **build_options)
    elif not isinstance(engine, ICudaEngine):
        engine = load(engine)
    feeds = dict(inputs) if inputs is not None else random_inputs(engine, shapes, seed)
    got = engine.infer(feeds)
    ref = dict(reference) if reference is not None else run_onnxruntime(onnx_path, feeds, list(got))
    results = []
    for name in got:
        if name not in ref:
            raise KeyError(f"compare: the reference has no output '{name}'")
        results.extend(_compare_value(name, got[name], ref[name], _tol(atol, name, 1e-5),
                                      _tol(rtol, name, 1e-5), check_error_stat))
    return CompareResult(results, feeds, got, ref)


def _compare_value(name: str, got: Any, ref: Any, atol: float, rtol: float,
                   stat: str) -> List[OutputComparison]:
    """An output's comparisons: one for a tensor; for a sequence (a list)
    its length, then element i as `name[i]`; an empty optional (None)
    matches only None."""
    def verdict(ok: bool, shape: tuple, ref_shape: tuple) -> OutputComparison:
        bad = 0.0 if ok else float("inf")
        return OutputComparison(name, shape, ref_shape, bad, bad, bad, bad, bad, bad,
                                0 if ok else 1, 0, None, atol, rtol, ok)
    if got is None or ref is None:
        return [verdict(got is None and ref is None, () if got is None else ("value",),
                        () if ref is None else ("value",))]
    if isinstance(got, (list, tuple)) or isinstance(ref, (list, tuple)):
        if not isinstance(got, (list, tuple)) or not isinstance(ref, (list, tuple)) or \
                len(got) != len(ref):
            n = len(got) if isinstance(got, (list, tuple)) else -1
            m = len(ref) if isinstance(ref, (list, tuple)) else -1
            return [verdict(False, (n,), (m,))]
        out = []
        for i, (a, b) in enumerate(zip(got, ref)):
            out.extend(_compare_value(f"{name}[{i}]", a, b, atol, rtol, stat))
        return out
    return [compare_arrays(name, got, ref, atol, rtol, stat)]
