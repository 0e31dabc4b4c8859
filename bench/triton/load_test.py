#!/usr/bin/env python3
"""load_test.py - a bounded load test of kiln's Triton backend: the
tritonserver of the nvidia-pytriton wheel serves one kiln plan with dynamic
batching, closed-loop clients (tritonclient, HTTP or gRPC, threads spread over
processes, optionally through system shared memory) keep C requests in flight
for each concurrency C, and every response is checked against `kiln exec` on
the same input. Recorded per level: requests, failed requests, mismatched
outputs, throughput, p50/p99 latency, the batch size Triton formed, the
backend's own time per request (Triton's compute_input + compute_output, the
part of an execution outside the plan's enqueue), and `kiln exec` on the same
plan at the batch Triton formed.

perf_analyzer is not used: PyPI's perf-analyzer 0.1.0 is a placeholder without
the binary, so the clients' own concurrency drives the load.

  load_test.py --kiln build/kiln --build build [--onnx examples/tiny_cnn.onnx]
               [--plan P] [--levels 1,2,4,8,16,32,64] [--duration 4]
               [--proto http|grpc] [--shm] [--procs N] [--kind KIND_CPU|KIND_GPU]
               [--out bench/results/DATE-triton-cpu.md]
  --quick: 0.5 s a level (the ctest run); exit 1 on any failed or wrong response.
Seeded: numpy RandomState(7)."""
import argparse
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "triton"))
import triton_harness as th  # noqa: E402

NP = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32,
      "TYPE_INT8": np.int8, "TYPE_UINT8": np.uint8, "TYPE_BOOL": np.bool_, "TYPE_FP64": np.float64}


def make_inputs(cfg, batch, rng):
    out = {}
    for i in cfg["input"]:
        dims = [batch] + [int(d) for d in i["dims"]]
        dt = NP[i["data_type"]]
        if np.issubdtype(dt, np.floating):
            out[i["name"]] = rng.standard_normal(dims).astype(dt)
        else:  # ids and masks alike: 0 or 1 is in range for both
            out[i["name"]] = rng.randint(0, 2, dims).astype(dt)
    return out


def tolerances(refs, rtol, atol):
    """Per output: the reference in float32 and atol + rtol * |ref|, made
    once, so that a client's check of a response is one subtraction and one
    comparison (the checks of big outputs took the clients' cores)."""
    out = {}
    for name, ref in refs.items():
        r32 = np.asarray(ref, np.float32)
        out[name] = (r32, atol + rtol * np.abs(r32))
    return out


def compare(got, ref, tol):
    """(max |got - ref|, got within tolerance), np.allclose's rule."""
    r32, lim = tol
    if got is None or got.shape != ref.shape:
        return float("inf"), False
    d = np.abs(np.asarray(got, np.float32) - r32)
    return float(d.max()) if d.size else 0.0, bool(np.all(d <= lim))


def worker(args):
    """One process: `threads` closed-loop clients until `deadline`."""
    (proto, url, model, inputs, outputs, refs, threads, start_at, deadline, shm, tag, rtol, atol) = args
    import tritonclient.grpc as tg
    import tritonclient.http as thttp
    mod = thttp if proto == "http" else tg
    lat, fails, bad, maxd = [], [], [0], [0.0]
    lock = threading.Lock()
    tols = tolerances(refs, rtol, atol)

    def one(t):
        c = (thttp.InferenceServerClient(url, network_timeout=120, connection_timeout=120) if proto == "http"
             else tg.InferenceServerClient(url))
        regions = []
        ins = []
        for name, arr in inputs.items():
            i = mod.InferInput(name, list(arr.shape), {np.float32: "FP32", np.float16: "FP16", np.int64: "INT64",
                                                      np.int32: "INT32"}[arr.dtype.type])
            if shm:
                import tritonclient.utils.shared_memory as sm
                rn = "kl_%s_%d_in_%s" % (tag, t, name)
                h = sm.create_shared_memory_region(rn, "/" + rn, arr.nbytes)
                sm.set_shared_memory_region(h, [np.ascontiguousarray(arr)])
                c.register_system_shared_memory(rn, "/" + rn, arr.nbytes)
                regions.append((rn, h))
                i.set_shared_memory(rn, arr.nbytes)
            else:
                i.set_data_from_numpy(arr, binary_data=True) if proto == "http" else i.set_data_from_numpy(arr)
            ins.append(i)
        outs = []
        oregions = {}
        for name, ref in refs.items():
            o = mod.InferRequestedOutput(name, binary_data=True) if proto == "http" else mod.InferRequestedOutput(name)
            if shm:
                import tritonclient.utils.shared_memory as sm
                rn = "kl_%s_%d_out_%s" % (tag, t, name)
                h = sm.create_shared_memory_region(rn, "/" + rn, ref.nbytes)
                c.register_system_shared_memory(rn, "/" + rn, ref.nbytes)
                regions.append((rn, h))
                oregions[name] = h
                o.set_shared_memory(rn, ref.nbytes)
            outs.append(o)
        my_lat = []
        # every client of every process starts at start_at: the window is the same for all
        while time.time() < start_at:
            time.sleep(min(0.01, max(0.0, start_at - time.time())))
        while time.time() < deadline:
            t0 = time.perf_counter()
            try:
                r = c.infer(model, ins, outputs=outs)
                dt = time.perf_counter() - t0
                for name, ref in refs.items():
                    if shm:
                        import tritonclient.utils.shared_memory as sm
                        got = sm.get_contents_as_numpy(oregions[name], ref.dtype, ref.shape)
                    else:
                        got = r.as_numpy(name)
                    d, ok = compare(got, ref, tols[name])
                    with lock:
                        maxd[0] = max(maxd[0], d)
                        bad[0] += 0 if ok else 1
                if time.time() <= deadline:  # requests finishing after the window are not counted
                    my_lat.append(dt)
            except Exception as e:  # a failed request
                with lock:
                    fails.append(str(e)[:300])
        for rn, h in regions:
            try:
                c.unregister_system_shared_memory(rn)
                import tritonclient.utils.shared_memory as sm
                sm.destroy_shared_memory_region(h)
            except Exception:
                pass
        with lock:
            lat.extend(my_lat)
    ts = [threading.Thread(target=one, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return lat, fails, bad[0], maxd[0]

TRITON_DT = {np.float32: "FP32", np.float16: "FP16", np.int64: "INT64", np.int32: "INT32", np.int8: "INT8",
             np.uint8: "UINT8", np.float64: "FP64", np.bool_: "BOOL"}


def raw_worker(args):
    """worker() with the standard library only (no tritonclient): KServe v2
    over HTTP/1.1 keep-alive with the binary tensor extension, or with every
    tensor in system shared memory (proto raw-shm). For machines without
    tritonclient's compiled dependencies (the GPU machine)."""
    (proto, url, model, inputs, outputs, refs, threads, start_at, deadline, shm, tag, rtol, atol) = args
    import http.client
    import mmap
    shm = proto == "raw-shm"

    class Segment:
        """A POSIX shared memory object (/dev/shm/NAME), as shm_open makes
        it, mapped here; without multiprocessing's resource tracker."""

        def __init__(self, name, size):
            self.path = "/dev/shm/" + name
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, size)
                self.map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self.buf = memoryview(self.map)

        def close(self):
            self.buf.release()
            self.map.close()
            try:
                os.unlink(self.path)
            except OSError:
                pass
    host, port = url.split(":")
    lat, fails, bad, maxd = [], [], [0], [0.0]
    lock = threading.Lock()
    tols = tolerances(refs, rtol, atol)

    def post(conn, path, body, headers=None):
        conn.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r, r.read()

    def one(t):
        conn = http.client.HTTPConnection(host, int(port), timeout=300)
        regions = []
        head = {"inputs": [], "outputs": []}
        blobs = []
        for name, arr in inputs.items():
            e = {"name": name, "shape": list(arr.shape), "datatype": TRITON_DT[arr.dtype.type]}
            if shm:
                rn = "kr_%s_%d_i%d" % (tag, t, len(regions))
                seg = Segment(rn, arr.nbytes)
                np.ndarray(arr.shape, arr.dtype, buffer=seg.buf)[...] = arr
                post(conn, "/v2/systemsharedmemory/region/%s/register" % rn,
                     json.dumps({"key": "/" + rn, "offset": 0, "byte_size": arr.nbytes}))
                regions.append((rn, seg))
                e["parameters"] = {"shared_memory_region": rn, "shared_memory_byte_size": arr.nbytes}
            else:
                e["parameters"] = {"binary_data_size": arr.nbytes}
                blobs.append(np.ascontiguousarray(arr).tobytes())
            head["inputs"].append(e)
        oseg = {}
        for name, ref in refs.items():
            e = {"name": name}
            if shm:
                rn = "kr_%s_%d_o%d" % (tag, t, len(regions))
                seg = Segment(rn, ref.nbytes)
                post(conn, "/v2/systemsharedmemory/region/%s/register" % rn,
                     json.dumps({"key": "/" + rn, "offset": 0, "byte_size": ref.nbytes}))
                regions.append((rn, seg))
                oseg[name] = seg
                e["parameters"] = {"shared_memory_region": rn, "shared_memory_byte_size": ref.nbytes}
            else:
                e["parameters"] = {"binary_data": True}
            head["outputs"].append(e)
        hj = json.dumps(head).encode()
        body = hj + b"".join(blobs)
        hdr = {"Inference-Header-Content-Length": str(len(hj)), "Content-Type": "application/octet-stream"}
        path = "/v2/models/%s/infer" % model
        my_lat = []
        while time.time() < start_at:
            time.sleep(min(0.01, max(0.0, start_at - time.time())))
        while time.time() < deadline:
            t0 = time.perf_counter()
            try:
                r, data = post(conn, path, body, hdr)
                dt = time.perf_counter() - t0
                if r.status != 200:
                    raise RuntimeError("HTTP %d: %s" % (r.status, data[:300]))
                hl = int(r.getheader("Inference-Header-Content-Length") or len(data))
                rj = json.loads(data[:hl])
                off = hl
                for o in rj["outputs"]:
                    ref = refs[o["name"]]
                    if shm:
                        got = np.ndarray(ref.shape, ref.dtype, buffer=oseg[o["name"]].buf).copy()
                    else:
                        n = o["parameters"]["binary_data_size"]
                        got = np.frombuffer(data[off:off + n], ref.dtype).reshape(o["shape"])
                        off += n
                    d, ok = compare(got, ref, tols[o["name"]])
                    with lock:
                        maxd[0] = max(maxd[0], d)
                        bad[0] += 0 if ok else 1
                if time.time() <= deadline:
                    my_lat.append(dt)
            except Exception as e:
                with lock:
                    fails.append(str(e)[:300])
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=300)
        for rn, seg in regions:
            try:
                post(conn, "/v2/systemsharedmemory/region/%s/unregister" % rn, b"")
            except Exception:
                pass
            seg.close()
        with lock:
            lat.extend(my_lat)
    ts = [threading.Thread(target=one, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return lat, fails, bad[0], maxd[0]


def rest(port, path, body=None):
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"{}")


def bucket_sizes(max_batch):
    """The backend's default batch buckets (kt_default_buckets): 1, 2, 4, 8,
    then 1.5x and 4/3x steps, and max_batch."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b = 2 * b if b < 8 else (b + b // 2 if b & (b - 1) == 0 else b // 3 * 4)
    return out + [max_batch]


def preferred_clause(spec, max_batch):
    """The dynamic_batching block's preferred_batch_size for `spec`:
    "buckets" (the default) the backend's buckets above 1, "triton" none
    (Triton then fills in [max_batch_size] itself, since the block is given:
    the backend's auto-complete never sees it empty), else a list "4,8,16".
    Batches of the preferred sizes need no padding rows."""
    if spec == "triton":
        return ""
    sizes = [b for b in bucket_sizes(max_batch) if b > 1] if spec == "buckets" else [int(v) for v in spec.split(",")]
    return " preferred_batch_size: [ %s ]" % ", ".join(str(v) for v in sizes)


def stats(port, model):
    s = rest(port, "/v2/models/%s/stats" % model)["model_stats"]
    s = s[0] if s else {}
    inf = s.get("inference_stats", {})

    def ns(key):
        v = inf.get(key, {})
        return int(v.get("ns", 0)), int(v.get("count", 0))
    return {"inference_count": int(s.get("inference_count", 0)), "execution_count": int(s.get("execution_count", 0)),
            "compute_input": ns("compute_input"), "compute_infer": ns("compute_infer"),
            "compute_output": ns("compute_output"), "queue": ns("queue"), "success": ns("success")}


def kiln_exec_rate(kiln, plan, cfg, batch, duration, extra=()):
    shapes = ",".join("%s:%s" % (i["name"], "x".join(str(d) for d in [batch] + [int(x) for x in i["dims"]]))
                      for i in cfg["input"])
    cmd = [kiln, "exec", "--loadEngine=" + plan, "--shapes=" + shapes, "--duration=%g" % duration,
           "--warmUp=200"] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Throughput: ([0-9.e+]+) qps", r.stdout + r.stderr)
    lm = re.search(r"\] Latency: .*?median = ([0-9.e+-]+) ms", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        return None, None
    return float(m.group(1)) * batch, float(lm.group(1)) if lm else None


def pct(xs, p):
    return float(np.percentile(np.array(xs), p)) * 1e3 if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--onnx", default=os.path.join(ROOT, "examples", "tiny_cnn.onnx"))
    ap.add_argument("--plan", default=None, help="serve this plan (else one is built from --onnx)")
    ap.add_argument("--name", default="model")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--shapes", default=None, help="kiln exec profile for --onnx: min;opt;max specs")
    ap.add_argument("--build-args", default="", help="extra kiln exec build flags (e.g. --fp16)")
    ap.add_argument("--exec-args", default="", help="extra flags for the kiln exec baseline")
    ap.add_argument("--levels", default="1,2,4,8,16,32,64")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--proto", default="grpc", choices=["http", "grpc", "raw", "raw-shm"],
                    help="tritonclient http/grpc, or the standard library's HTTP (raw; raw-shm: shared memory)")
    ap.add_argument("--backends", default=None, help="backend folder (default: BUILD/triton/backends)")
    ap.add_argument("--shm", action="store_true", help="inputs and outputs through system shared memory")
    ap.add_argument("--procs", type=int, default=0, help="client processes (default: min(levels, cores))")
    ap.add_argument("--kind", default="KIND_CPU")
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--queue-delay-us", type=int, default=0)
    ap.add_argument("--preferred", default="buckets",
                    help="preferred_batch_size: buckets (the backend's), triton (Triton's own), or a list 4,8,16")
    ap.add_argument("--params", default="", help="backend parameters key=value,key=value")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--out", default=None, help="markdown results (and .json beside it)")
    ap.add_argument("--title", default="kiln Triton backend, CPU")
    a = ap.parse_args()
    if a.quick:
        a.duration = min(a.duration, 0.5)
    backends = a.backends or th.backend_dir(a.build)
    if not backends or not th.find_tritonserver():
        print("skipped: no backend folder under %s or no tritonserver (nvidia-pytriton)" % a.build)
        return 77
    if not a.proto.startswith("raw"):
        try:
            import tritonclient.grpc  # noqa: F401
            import tritonclient.http  # noqa: F401
        except ImportError as e:
            print("skipped: tritonclient missing (%s)" % e)
            return 77
    rng = np.random.RandomState(7)
    work = tempfile.mkdtemp(prefix="kiln_triton_load")
    plan = a.plan
    if not plan:
        plan = os.path.join(work, "model.plan")
        if a.shapes:
            mn, op, mx = a.shapes.split(";")
        else:
            mn, op, mx = ("input:1x3x64x64", "input:%dx3x64x64" % a.max_batch, "input:%dx3x64x64" % a.max_batch)
        th.build_plan(a.kiln, a.onnx, plan, [(mn, op, mx)], a.build_args.split())
    repo = th.make_repo()
    params = "".join('parameters { key: "%s" value: { string_value: "%s" } }\n' % tuple(kv.split("=", 1))
                     for kv in a.params.split(",") if kv)
    th.add_model(repo, a.name, plan, 'backend: "kiln"\nmax_batch_size: %d\n'
                 "dynamic_batching { max_queue_delay_microseconds: %d%s }\n"
                 "instance_group [ { kind: %s count: %d } ]\n%s" % (a.max_batch, a.queue_delay_us,
                                                                   preferred_clause(a.preferred, a.max_batch), a.kind,
                                                                   a.instances, params),
                 artifact_name="model.plan")
    srv = th.Server(repo, backends)
    try:
        srv.start()
    except th.Unavailable as e:
        print("skipped: %s" % e)
        return 77
    rows, fails_all, mism_all = [], 0, 0
    try:
        hc = srv.http
        cfg = rest(hc, "/v2/models/%s/config" % a.name)
        x = make_inputs(cfg, 1, rng)
        ref = th.kiln_exec_outputs(a.kiln, plan, x, work)
        url = "127.0.0.1:%d" % (srv.grpc if a.proto == "grpc" else srv.http)
        meta = rest(hc, "/v2")
        exec_dur = 0.5 if a.quick else min(3.0, a.duration)
        fn = raw_worker if a.proto.startswith("raw") else worker
        for c in [int(v) for v in a.levels.split(",")]:
            procs = a.procs or min(c, max(1, os.cpu_count() or 1))
            procs = min(procs, c)
            per = [c // procs + (1 if p < c % procs else 0) for p in range(procs)]
            s0 = stats(hc, a.name)
            start_at = time.time() + 0.5 + 0.2 * procs  # the start-up of the processes and clients
            deadline = start_at + a.duration
            jobs = [(a.proto, url, a.name, x, None, ref, n, start_at, deadline, a.shm, "%d_%d" % (c, p), a.rtol, a.atol)
                    for p, n in enumerate(per)]
            if procs == 1:
                res = [fn(jobs[0])]
            else:
                with mp.get_context("fork").Pool(procs) as pool:
                    res = pool.map(fn, jobs)
            s1 = stats(hc, a.name)
            lat = [v for r in res for v in r[0]]
            fails = [v for r in res for v in r[1]]
            mism = sum(r[2] for r in res)
            maxd = max(r[3] for r in res)
            n_inf = s1["inference_count"] - s0["inference_count"]
            n_exec = max(1, s1["execution_count"] - s0["execution_count"])
            req = max(1, s1["success"][1] - s0["success"][1])

            def per_req_us(key):
                return (s1[key][0] - s0[key][0]) / req / 1e3
            row = {"concurrency": c, "requests": len(lat), "failed": len(fails), "mismatched": mism,
                   "max_abs_diff": maxd, "throughput": len(lat) / a.duration,
                   "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "batch_formed": n_inf / n_exec,
                   "queue_us": per_req_us("queue"), "backend_in_us": per_req_us("compute_input"),
                   "infer_us": per_req_us("compute_infer"), "backend_out_us": per_req_us("compute_output"),
                   "fail_examples": fails[:3]}
            # kiln exec on the same plan at the batch Triton formed, right after the
            # level (the server idle), so both see the same machine load
            b = max(1, min(a.max_batch, int(round(row["batch_formed"]))))
            row["exec_batch"] = b
            row["exec_throughput"], row["exec_median_ms"] = kiln_exec_rate(a.kiln, plan, cfg, b, exec_dur,
                                                                            a.exec_args.split())
            row["ratio"] = row["throughput"] / row["exec_throughput"] if row["exec_throughput"] else None
            rows.append(row)
            fails_all += len(fails)
            mism_all += mism
            print("c=%-3d req=%-6d failed=%d mismatched=%d thr=%.1f/s p50=%.2f ms p99=%.2f ms batch=%.2f "
                  "backend in+out=%.1f us infer=%.1f us" % (c, row["requests"], row["failed"], mism,
                                                            row["throughput"], row["p50_ms"], row["p99_ms"],
                                                            row["batch_formed"], row["backend_in_us"] +
                                                            row["backend_out_us"], row["infer_us"]))
            if fails:
                print("  e.g.", fails[0])
    finally:
        srv.stop()
    # the backend's load lines (its warm-up among them) in the run's output,
    # and the whole server log beside the report
    for ln in srv.log().splitlines():
        if "warm-up ran" in ln or "failed to load" in ln:
            print("server: " + ln.split("] ", 1)[-1].strip('"'))
    ok = fails_all == 0 and mism_all == 0 and all(r["requests"] > 0 for r in rows)
    if a.out:
        write_report(a, rows, meta, plan, cfg)
        shutil.copy(srv.log_path, os.path.splitext(a.out)[0] + ".server.log")
    print("load test: %s (%d failed, %d mismatched)" % ("passed" if ok else "FAILED", fails_all, mism_all))
    return 0 if ok else 1


def source_commit():
    """The commit of the tree these scripts run from, or "unknown". The
    device runs a copy of the tree: KILN_COMMIT (set by whoever made the
    copy) wins; else git, but only when ROOT itself is the top of a git work
    tree (a copy inside some other checkout would name that checkout's
    commit) and that tree has no uncommitted changes to tracked files."""
    env = os.environ.get("KILN_COMMIT", "").strip()
    if env:
        return env
    try:
        def git(*args):
            r = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True, timeout=20)
            return r.returncode, r.stdout.strip()
        rc, top = git("rev-parse", "--show-toplevel")
        if rc != 0 or os.path.realpath(top) != os.path.realpath(ROOT):
            return "unknown"
        rc, head = git("rev-parse", "--short", "HEAD")
        if rc != 0 or not head:
            return "unknown"
        rc, dirty = git("status", "--porcelain", "--untracked-files=no")
        return head + ("+uncommitted changes" if rc == 0 and dirty else "") if rc == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_report(a, rows, meta, plan, cfg):
    commit = source_commit()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    lines = ["# %s" % a.title, "",
             "Date %s UTC, commit %s, tritonserver %s (nvidia-pytriton), %s, %d cores visible, load average %s." % (
                 time.strftime("%Y-%m-%d %H:%M", time.gmtime()), commit, meta.get("version", "?"), cpu,
                 os.cpu_count() or 0, " ".join("%.1f" % v for v in os.getloadavg())),
             "",
             "Plan `%s` (%s), inputs %s; served with `max_batch_size: %d`, dynamic batching (max queue delay "
             "%d us, preferred sizes: %s), %d x %s instance(s); clients: %s%s, closed loop, %g s a level, requests of "
             "batch 1, every response checked against `kiln exec` on the same input (rtol %g, atol %g)." % (
                 os.path.basename(a.onnx if not a.plan else a.plan), a.build_args or "fp32",
                 ", ".join("%s %s %s" % (i["name"], i["data_type"], i["dims"]) for i in cfg["input"]),
                 a.max_batch, a.queue_delay_us, a.preferred, a.instances, a.kind,
                 ("tritonclient " + a.proto) if not a.proto.startswith("raw") else "Python's http.client (KServe v2, binary tensors)",
                 " through system shared memory" if (a.shm or a.proto == "raw-shm") else "", a.duration, a.rtol, a.atol),
             "",
             "| concurrency | requests | failed | wrong | throughput (inf/s) | p50 (ms) | p99 (ms) | batch formed |"
             " backend in+out a batch (us) | the same a request (us) | compute a batch (us) | kiln exec at that batch (inf/s) | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %d | %d | %d | %.1f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %s | %s |" % (
            r["concurrency"], r["requests"], r["failed"], r["mismatched"], r["throughput"], r["p50_ms"],
            r["p99_ms"], r["batch_formed"], r["backend_in_us"] + r["backend_out_us"],
            (r["backend_in_us"] + r["backend_out_us"]) / max(1.0, r["batch_formed"]), r["infer_us"],
            "%.1f (b%d)" % (r["exec_throughput"], r["exec_batch"]) if r["exec_throughput"] else "-",
            "%.2fx" % r["ratio"] if r["ratio"] else "-"))
    lines += ["",
              "Columns: *batch formed* is Triton's inferences per execution; *backend in+out a batch* is Triton's "
              "compute_input + compute_output as the backend reports them for each request (every request of "
              "an execution carries that execution's times): checking the requests, gathering inputs, binding, "
              "splitting outputs into responses, the backend's own time outside the plan's enqueue; *a request* "
              "divides it by the batch formed; *compute a batch* is compute_infer (the enqueue and its wait, "
              "the plan's own time for the whole batch); *kiln exec "
              "at that batch* runs the same plan with `kiln exec` at the batch Triton formed, rounded, right after "
              "the level with the server idle; *ratio* is Triton's throughput over it.", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump({"args": vars(a), "rows": rows}, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    sys.exit(main())
