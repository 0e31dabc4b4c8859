#!/usr/bin/env python3
"""pa_bench.py - a kiln plan served by tritonserver through the kiln backend,
loaded by perf_analyzer (Triton's C++ client: no Python client limit), at
one or more concurrency levels, with the server's own statistics per level
(batch formed, queue, compute_input/infer/output) and `kiln exec` at the
batch Triton formed (the plan's throughput at that batch, H2D and D2H
included).

perf_analyzer: PyPI's `perf-analyzer` is an empty placeholder here, but the
tritonclient 2.36.0 wheel (manylinux1 x86_64) still carries the binary
(tritonclient-2.36.0.data/data/bin/perf_analyzer). It needs libb64.so.0d
(Debian's libb64-0d), libcudart.so.12 (the nvidia-cuda-runtime-cu12 wheel)
and libssl3. bench/triton/pack_gpu.sh gathers all of them into
.device/perf_analyzer.txz; bench_gpu.sh unpacks it and runs this script
with PERF_ANALYZER=1.

  pa_bench.py --kiln build/kiln --backends build/triton/backends --plan P.plan
      --name resnet50 [--kind KIND_GPU] [--instances 2] [--levels 1,64,128]
      [--max-batch 64] [--queue-delay-us 100] [--preferred buckets|triton|4,8,..]
      [--params k=v,...]
      [--shm system|none] [--window-ms 3000] [--stability 25] [--out F.md]
      [--perf-analyzer PATH]
Inputs are perf_analyzer's random data (it checks no outputs; load_test.py
does). Exits 77 when no server or no perf_analyzer can run."""
import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "triton"))
sys.path.insert(0, HERE)
import triton_harness as th  # noqa: E402
import load_test as lt  # noqa: E402


def find_pa(given):
    for p in [given, os.environ.get("KILN_PERF_ANALYZER"), "perf_analyzer"]:
        if not p:
            continue
        try:
            r = subprocess.run([p, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if "error while loading shared libraries" not in r.stderr:
            return p
    return None


def exec_throughput(kiln, plan, inputs, rows, gpu):
    """kiln exec's throughput (inf/s: rows x its qps) at batch `rows`."""
    shapes = ",".join("%s:%s" % (n, "x".join(str(d) for d in [rows] + dims)) for n, dims in inputs)
    r = subprocess.run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + shapes, "--duration=3", "--warmUp=200"]
                       + ([] if gpu else ["--threads=1"]), capture_output=True, text=True)
    m = re.search(r"Throughput: ([0-9.e+]+) qps", r.stdout + r.stderr)
    return float(m.group(1)) * rows if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--backends", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--name", default="model")
    ap.add_argument("--kind", default="KIND_GPU")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--levels", default="1,64")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--queue-delay-us", type=int, default=100)
    ap.add_argument("--preferred", default="buckets",
                    help="preferred_batch_size: buckets (the backend's), triton (Triton's own), or a list 4,8,16")
    ap.add_argument("--params", default="")
    ap.add_argument("--shm", default="system", choices=["system", "none"])
    ap.add_argument("--window-ms", type=int, default=3000)
    ap.add_argument("--protocol", default="grpc", choices=["grpc", "http"])
    ap.add_argument("--stability", type=int, default=25, help="perf_analyzer's --stability-percentage")
    ap.add_argument("--perf-analyzer", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    pa = find_pa(a.perf_analyzer)
    if not pa:
        print("skipped: no perf_analyzer runs here (KILN_PERF_ANALYZER or --perf-analyzer)")
        return 77
    if not th.find_tritonserver():
        print("skipped: no tritonserver")
        return 77
    gpu = a.kind == "KIND_GPU"
    params = "".join('parameters { key: "%s" value: { string_value: "%s" } }\n' % tuple(kv.split("=", 1))
                     for kv in a.params.split(",") if "=" in kv)
    repo = th.make_repo()
    th.add_model(repo, a.name, a.plan, 'backend: "kiln"\nmax_batch_size: %d\n'
                 'instance_group [ { kind: %s count: %d } ]\n'
                 'dynamic_batching { max_queue_delay_microseconds: %d%s }\n%s' % (
                     a.max_batch, a.kind, a.instances, a.queue_delay_us, lt.preferred_clause(a.preferred, a.max_batch),
                     params), artifact_name="model.plan")
    log = os.path.join(tempfile.mkdtemp(prefix="kiln_pa"), "server.log")
    srv = th.Server(repo, a.backends, log=log)
    try:
        srv.start()
    except th.Unavailable as e:
        print("skipped: %s" % e)
        return 77
    rows = []
    try:
        meta = lt.rest(srv.http, "/v2")
        cfg = lt.rest(srv.http, "/v2/models/%s/config" % a.name)
        inputs = [(i["name"], [int(d) for d in i["dims"]]) for i in cfg["input"]]
        print("preferred_batch_size %s, max_queue_delay %s us, %d %s instances" % (
            cfg.get("dynamic_batching", {}).get("preferred_batch_size"),
            cfg.get("dynamic_batching", {}).get("max_queue_delay_microseconds"), a.instances, a.kind))
        url = "127.0.0.1:%d" % (srv.grpc if a.protocol == "grpc" else srv.http)
        for level in [int(x) for x in a.levels.split(",")]:
            csvf = tempfile.mktemp(suffix=".csv")
            cmd = [pa, "-m", a.name, "-u", url, "-i", a.protocol, "-b", "1",
                   "--concurrency-range", "%d:%d" % (level, level), "--measurement-interval", str(a.window_ms),
                   "--stability-percentage", str(a.stability), "--max-trials", "10", "-f", csvf]
            if a.shm == "system":
                cmd += ["--shared-memory", "system"]
            s0 = lt.stats(srv.http, a.name)
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            s1 = lt.stats(srv.http, a.name)
            if r.returncode != 0 or not os.path.exists(csvf):
                print("perf_analyzer failed at concurrency %d (rc %d):\n%s%s" % (
                    level, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
                return 1
            with open(csvf) as f:
                rec = list(csv.DictReader(f))[0]
            os.unlink(csvf)
            req = max(1, s1["success"][1] - s0["success"][1])
            exe = max(1, s1["execution_count"] - s0["execution_count"])
            batch = (s1["inference_count"] - s0["inference_count"]) / exe

            def us(key):
                return (s1[key][0] - s0[key][0]) / req / 1e3
            thr = float(rec["Inferences/Second"])
            eb = max(1, int(round(batch)))
            ex = exec_throughput(a.kiln, a.plan, inputs, eb, gpu)
            row = {"concurrency": level, "throughput": thr, "p50_us": float(rec.get("p50 latency", "nan")),
                   "p99_us": float(rec.get("p99 latency", "nan")), "batch": batch, "queue_us": us("queue"),
                   "in_us": us("compute_input"), "infer_us": us("compute_infer"), "out_us": us("compute_output"),
                   "compute_per_batch_us": (s1["compute_infer"][0] - s0["compute_infer"][0]) / exe / 1e3,
                   "exec_batch": eb, "exec_throughput": ex, "ratio": thr / ex if ex == ex and ex else float("nan"),
                   "seconds": time.time() - t0}
            rows.append(row)
            print("c=%-4d %8.0f inf/s p50 %.2f ms p99 %.2f ms | batch %.2f, queue %.0f us, in %.1f infer %.1f out "
                  "%.1f us a request | kiln exec b%d %.0f inf/s -> %.2fx" % (
                      level, thr, row["p50_us"] / 1e3, row["p99_us"] / 1e3, batch, row["queue_us"], row["in_us"],
                      row["infer_us"], row["out_us"], eb, ex, row["ratio"]))
    finally:
        srv.stop()
    if a.out:
        lines = ["# kiln Triton backend, %s under perf_analyzer (%s)" % (a.name, a.kind), "",
                 "Date %s UTC, commit %s, tritonserver %s, %s, %d cores; %d %s instances, max_batch_size %d, "
                 "max_queue_delay %d us, preferred sizes %s, parameters `%s`; perf_analyzer %s, batch-1 requests, %s shared memory, "
                 "%d ms windows. Throughput ratio against `kiln exec` at the batch Triton formed." % (
                     time.strftime("%Y-%m-%d %H:%M", time.gmtime()), lt.source_commit(), meta.get("version", "?"),
                     platform.machine(), os.cpu_count() or 0, a.instances, a.kind, a.max_batch, a.queue_delay_us,
                     a.preferred, a.params or "-", a.protocol, a.shm, a.window_ms), "",
                 "| concurrency | inf/s | p50 / p99 (ms) | batch formed | queue (us) | in / infer / out per request (us) "
                 "| compute per batch (us) | kiln exec at that batch (inf/s) | ratio |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append("| %d | %.0f | %.2f / %.2f | %.2f | %.0f | %.1f / %.1f / %.1f | %.0f | %.0f (b%d) | %.2fx |" % (
                r["concurrency"], r["throughput"], r["p50_us"] / 1e3, r["p99_us"] / 1e3, r["batch"], r["queue_us"],
                r["in_us"], r["infer_us"], r["out_us"], r["compute_per_batch_us"], r["exec_throughput"],
                r["exec_batch"], r["ratio"]))
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1)
        print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
