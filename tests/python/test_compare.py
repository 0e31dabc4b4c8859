"""kiln.compare: kiln against ONNX Runtime, per-output verdicts."""
import numpy as np
import pytest

import kiln
from kiln.accuracy import compare_arrays, random_inputs

pytest.importorskip("onnxruntime")


def test_compare_passes_in_float(tiny_onnx):
    r = kiln.compare(tiny_onnx, shapes={"input": (2, 3, 64, 64)}, atol=1e-4, rtol=1e-4, seed=3)
    assert r.passed and bool(r)
    o = r["output"]
    assert o.shape == (2, 10) and o.count == 20 and o.max_abs < 1e-4
    assert "PASSED" in r.table()


def _forced_fp16(onnx_path):
    # FP16 only allows the type (TensorRT's meaning); a "*" layer precision forces it
    logger = kiln.Logger(kiln.Logger.ERROR)
    builder = kiln.Builder(logger)
    network = builder.create_network(0)
    assert kiln.OnnxParser(network, logger).parse_from_file(onnx_path)
    config = builder.create_builder_config()
    config.set_flag(kiln.BuilderFlag.FP16)
    config.set_flag(kiln.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    config.set_layer_precision("*", kiln.DataType.HALF)
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (2, 3, 64, 64), (2, 3, 64, 64), (2, 3, 64, 64))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    return kiln.Runtime(logger).deserialize_cuda_engine(plan)


def test_compare_fails_fp16_at_tight_tolerance(tiny_onnx):
    e = _forced_fp16(tiny_onnx)
    r = kiln.compare(tiny_onnx, e, atol=1e-7, rtol=1e-7)
    assert not r.passed and r["output"].failing > 0 and "FAILED" in r.table()
    loose = kiln.compare(tiny_onnx, e, atol={"output": 5e-2}, rtol=5e-2)
    assert loose.passed


def test_same_inputs_both_sides(tiny_onnx):
    e = kiln.build(tiny_onnx, shapes={"input": (1, 3, 64, 64)})
    feeds = random_inputs(e, seed=7)
    again = random_inputs(e, seed=7)
    np.testing.assert_array_equal(feeds["input"], again["input"])
    r = kiln.compare(tiny_onnx, e, inputs=feeds, atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(r.inputs["input"], feeds["input"])


def test_compare_arrays_rules():
    ref = np.array([1.0, 2.0, np.nan, np.inf, 0.0])
    same = compare_arrays("t", ref.copy(), ref, 1e-6, 1e-6)
    assert same.passed and same.max_abs == 0
    got = ref.copy()
    got[4] = 1e-3                       # ref 0: infinite relative error, abs over atol
    r = compare_arrays("t", got, ref, 1e-6, 1e-6)
    assert not r.passed and r.failing == 1 and r.worst_index == (4,)
    assert compare_arrays("t", got, ref, 1e-2, 1e-6).passed   # either tolerance holds
    nan = ref.copy()
    nan[0] = np.nan
    assert not compare_arrays("t", nan, ref).passed
    assert not compare_arrays("t", np.zeros(3), np.zeros(4)).passed
    assert compare_arrays("t", got, ref, 1e-6, 1e-6, "median").passed
