"""kiln.load_npz / save_npz / load_npy / save_npy and compare_arrays: the C
library's .npy/.npz code and comparison (include/kiln/kiln_tools.h), the
same the CLI uses. Needs numpy only."""
import numpy as np
import pytest

import kiln
from kiln import _kiln


def _arrays():
    rng = np.random.default_rng(5)
    return {
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "f64": rng.standard_normal((1, 1)),
        "i64": np.arange(-3, 3, dtype=np.int64).reshape(2, 3),
        "u8": np.arange(7, dtype=np.uint8),
        "b": np.array([True, False, True]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), np.int32),
    }


def test_npz_round_trip_and_numpy_compatibility(tmp_path):
    a = _arrays()
    p = tmp_path / "a.npz"
    kiln.save_npz(p, a)
    back = kiln.load_npz(p)
    assert list(back) == list(a)
    for k in a:
        assert back[k].dtype == a[k].dtype and back[k].shape == a[k].shape
        np.testing.assert_array_equal(back[k], a[k])
    with np.load(p) as n:                     # numpy reads what kiln writes
        for k in a:
            np.testing.assert_array_equal(n[k], a[k])
    q = tmp_path / "c.npz"
    np.savez_compressed(q, **a)               # kiln reads what numpy writes (deflate)
    for k, v in kiln.load_npz(q).items():
        np.testing.assert_array_equal(v, a[k])
    back["f32"][0, 0, 0] = 1.0                # arrays are writable copies


def test_npy_round_trip(tmp_path):
    x = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    p = tmp_path / "input0.npy"
    kiln.save_npy(p, x)
    np.testing.assert_array_equal(np.load(p), x)
    np.save(tmp_path / "f.npy", x)            # Fortran order, written by numpy
    np.testing.assert_array_equal(kiln.load_npy(tmp_path / "f.npy"), x)
    assert list(kiln.load_npz(p)) == ["input0"]


def test_bad_files_raise_with_the_file_named(tmp_path):
    p = tmp_path / "bad.npz"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(kiln.ParseError, match="bad.npz"):
        kiln.load_npz(p)
    t = tmp_path / "t.npy"
    np.save(t, np.arange(100, dtype=np.float32))
    t.write_bytes(t.read_bytes()[:-9])        # truncated data
    with pytest.raises(kiln.ParseError, match="truncated"):
        kiln.load_npy(t)
    with pytest.raises(kiln.FileError, match="missing.npz"):
        kiln.load_npz(tmp_path / "missing.npz")
    with pytest.raises(kiln.FileError, match="regular file"):
        kiln.load_npz(tmp_path)


def test_budget(tmp_path, monkeypatch):
    p = tmp_path / "big.npz"
    kiln.save_npz(p, {"x": np.zeros(100000, np.float32)})
    monkeypatch.setenv("KILN_MAX_INPUT_BYTES", "1000")
    with pytest.raises(kiln.Error, match="budget"):
        kiln.load_npz(p)


def test_encode_errors():
    x = np.zeros(4, np.float32).view(np.uint8)
    with pytest.raises(kiln.InvalidArgumentError, match="bytes of data"):
        _kiln.tensors_save(None, [("x", 1, (5,), x)], True)   # data shorter than the shape
    with pytest.raises(kiln.InvalidArgumentError, match="twice"):
        _kiln.tensors_save(None, [("x", 1, (4,), x), ("x", 1, (4,), x)], True)
    img = _kiln.tensors_save(None, [("x", 1, (4,), x)], False)
    assert img[:6] == b"\x93NUMPY"
    name, dt, dims, data = _kiln.tensors_decode(img, False, "mem.npy")
    assert (dt, dims, len(data)) == (1, (4,), 16)


def test_compare_arrays_is_the_c_comparison():
    ref = np.linspace(-1, 1, 50, dtype=np.float32).reshape(5, 10)
    got = ref.copy()
    got[3, 7] += 0.25
    r = kiln.compare_arrays("o", got, ref, 1e-3, 1e-3)
    assert not r.passed and r.failing == 1 and r.worst_index == (3, 7)
    assert r.max_abs == pytest.approx(0.25, rel=1e-6) and r.count == 50
    c = _kiln.compare_tensors(("o", 1, (5, 10), got.view(np.uint8).reshape(-1)),
                              ("o", 1, (5, 10), ref.view(np.uint8).reshape(-1)), 1e-3, 1e-3, 0, 0.99)
    assert c["worst_index"] == 37 and c["mismatches"] == 1 and c["max_abs"] == r.max_abs
    assert kiln.compare_arrays("o", got, ref, 0.3, 0).passed
    assert kiln.compare_arrays("o", got, ref, 1e-3, 1e-3, "median").passed
    assert not kiln.compare_arrays("o", got, ref, 1e-3, 1e-3, "max").passed
    # mixed dtypes, a float16 output against a float32 reference
    assert kiln.compare_arrays("o", ref.astype(np.float16), ref, 1e-3, 1e-3).passed
    with pytest.raises(ValueError):
        kiln.compare_arrays("o", got, ref, check_error_stat="p99")
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.compare_arrays("o", got, ref, atol=-1.0)
