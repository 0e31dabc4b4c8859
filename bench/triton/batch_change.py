#!/usr/bin/env python3
"""batch_change.py - Triton's compute_infer when the batch size changes every
request: one tritonclient HTTP client (c=1) sends N requests whose batch sizes
take SIZES in turn to examples/tiny_cnn.onnx (or PLAN, input DIMS) served by
one KIND_CPU kiln instance with PARAMS, and prints the server's statistics
per execution (bench/results/2026-12-03-triton-cpu.md).

  batch_change.py BUILD SIZES PARAMS N [PLAN [DIMS]]
  e.g. batch_change.py build 2,8,1,16 cpu_threads=1 400"""
import sys, os, json, time, tempfile, urllib.request
import numpy as np
sys.path.insert(0, "tests/triton"); sys.path.insert(0, "bench/triton")
import triton_harness as th
build, sizes, params, n = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], sys.argv[3], int(sys.argv[4])
kiln = os.path.join(build, "kiln")
work = tempfile.mkdtemp()
plan = sys.argv[5] if len(sys.argv) > 5 else os.path.join(work, "m.plan")
dims = sys.argv[6] if len(sys.argv) > 6 else "3x64x64"
if len(sys.argv) <= 5:
    th.build_plan(kiln, "examples/tiny_cnn.onnx", plan, [("input:1x3x64x64", "input:64x3x64x64", "input:64x3x64x64")])
repo = th.make_repo()
ps = "".join('parameters { key: "%s" value: { string_value: "%s" } }\n' % tuple(kv.split("=", 1)) for kv in params.split(",") if kv)
th.add_model(repo, "m", plan, 'backend: "kiln"\nmax_batch_size: 64\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n' + ps, artifact_name="model.plan")
srv = th.Server(repo, th.backend_dir(build)); srv.start()
import tritonclient.http as h
c = h.InferenceServerClient("127.0.0.1:%d" % srv.http)
rng = np.random.RandomState(0)
xs = {b: rng.standard_normal([b] + [int(d) for d in dims.split("x")]).astype(np.float32) for b in set(sizes)}
def stats():
    s = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/v2/models/m/stats" % srv.http).read())["model_stats"][0]
    i = s["inference_stats"]
    return s["execution_count"], {k: int(i[k]["ns"]) for k in ("compute_infer", "compute_input", "compute_output", "queue")}
def go(count):
    t0 = time.perf_counter()
    for k in range(count):
        b = sizes[k % len(sizes)]
        inp = h.InferInput("input", list(xs[b].shape), "FP32"); inp.set_data_from_numpy(xs[b], binary_data=True)
        c.infer("m", [inp])
    return time.perf_counter() - t0
go(3 * len(sizes))  # warm: every size once
e0, s0 = stats(); wall = go(n); e1, s1 = stats()
ne = e1 - e0
print("sizes %s params '%s': %d executions, per execution: compute_infer %.1f us, in %.1f us, out %.1f us, queue %.1f us; client %.1f us/request" % (
    sizes, params, ne, (s1["compute_infer"] - s0["compute_infer"]) / ne / 1e3, (s1["compute_input"] - s0["compute_input"]) / ne / 1e3,
    (s1["compute_output"] - s0["compute_output"]) / ne / 1e3, (s1["queue"] - s0["queue"]) / ne / 1e3, wall / n * 1e6))
srv.stop()
