"""examples/python and bench/python_overhead.py run end to end on the CPU."""
import os
import subprocess
import sys


def run(root, *args):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_build_engine_then_infer(root, tiny_onnx, tmp_path):
    plan = str(tmp_path / "tiny.plan")
    out = run(root, "examples/python/build_engine.py", tiny_onnx, plan,
              "--shape", "input:1x3x64x64,2x3x64x64,4x3x64x64",
              "--timing-cache", str(tmp_path / "t.cache"))
    assert "wrote" in out and os.path.getsize(plan) > 0
    assert os.path.getsize(tmp_path / "t.cache") > 0
    out = run(root, "examples/python/infer.py", plan, "--batch", "3", "--iterations", "3")
    assert "shape (3, 10)" in out and "engine.infer agrees: True" in out


def test_overhead_bench_runs(root, tmp_path):
    md = tmp_path / "o.md"
    out = run(root, "bench/python_overhead.py", "--iterations", "500", "--repeats", "2",
              "--markdown", str(md))
    assert "added per call" in out and "execute_async_v3" in md.read_text()
