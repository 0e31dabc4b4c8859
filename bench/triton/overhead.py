#!/usr/bin/env python3
"""overhead.py - the backend's own time per request at batch 1 (issue 31's
target: at most 50 us over the plan's own latency). One client (c=1) sends
requests of batch 1 in a loop, through tritonclient gRPC and HTTP, to a plan
served by one KIND_CPU kiln instance, with zero_copy on and off; the
server's statistics give each request's compute_input, compute_infer and
compute_output (the backend's part of an execution) and its whole time in
the server; `kiln exec` on the same plan at batch 1, run after each series,
gives the plan's own latency (its Enqueue Time: the host's time per run,
median and mean; on a loaded machine the mean carries the preemptions,
which the server's means, the only figures Triton gives, carry as well).

Plans: "add" (y = x + 1, x [N, 16] FP32: almost no compute, so nearly all
of the time is overhead) and examples/tiny_cnn.onnx, both batch 1 to 64.

  overhead.py --kiln build/kiln --build build [--requests 2000] [--out F.md]
Every response is checked against x + 1 / kiln exec. Seeded."""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "triton"))
sys.path.insert(0, HERE)
import triton_harness as th  # noqa: E402
import load_test as lt  # noqa: E402


def make_add_onnx(path):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    m = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "add", [x], [y],
                                            initializer=[one]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def exec_latency(kiln, plan, in_name, dims, gpu, duration=2.0):
    """kiln exec's time per iteration at batch 1, median and mean, in us: on
    the CPU its Enqueue Time (the run happens inside the enqueue), on a GPU
    its Latency (copies in and out and the compute)."""
    cmd = [kiln, "exec", "--loadEngine=" + plan, "--shapes=%s:%s" % (in_name, "x".join(str(d) for d in [1] + dims)),
           "--duration=%g" % duration, "--warmUp=200"] + ([] if gpu else ["--threads=1"])
    r = subprocess.run(cmd, capture_output=True, text=True)
    key = r"\] Latency" if gpu else "Enqueue Time"
    m = re.search(key + r": .*?mean = ([0-9.e+-]+) ms, median = ([0-9.e+-]+) ms", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        return float("nan"), float("nan")
    return float(m.group(2)) * 1e3, float(m.group(1)) * 1e3


class RawClient:
    """KServe v2 over HTTP/1.1 keep-alive with binary tensors, the standard
    library only (for machines without tritonclient)."""

    def __init__(self, port, model, x, in_name, out_name):
        import http.client
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        head = json.dumps({"inputs": [{"name": in_name, "shape": list(x.shape), "datatype": "FP32",
                                       "parameters": {"binary_data_size": x.nbytes}}],
                           "outputs": [{"name": out_name, "parameters": {"binary_data": True}}]}).encode()
        self.body = head + np.ascontiguousarray(x).tobytes()
        self.hdr = {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}
        self.path = "/v2/models/%s/infer" % model

    def infer(self):
        self.conn.request("POST", self.path, body=self.body, headers=self.hdr)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, data[:300]))
        hl = int(r.getheader("Inference-Header-Content-Length") or len(data))
        o = json.loads(data[:hl])["outputs"][0]
        return np.frombuffer(data[hl:hl + o["parameters"]["binary_data_size"]], np.float32).reshape(o["shape"])


def series(srv, model, proto, x, in_name, out_name, ref, n):
    if proto == "raw":
        rc = RawClient(srv.http, model, x, in_name, out_name)
        return measure(srv, model, rc.infer, ref, n)
    import tritonclient.grpc as tg
    import tritonclient.http as thttp
    mod = tg if proto == "grpc" else thttp
    c = tg.InferenceServerClient("127.0.0.1:%d" % srv.grpc) if proto == "grpc" else \
        thttp.InferenceServerClient("127.0.0.1:%d" % srv.http)
    i = mod.InferInput(in_name, list(x.shape), "FP32")
    if proto == "grpc":
        i.set_data_from_numpy(x)
        o = [mod.InferRequestedOutput(out_name)]
    else:
        i.set_data_from_numpy(x, binary_data=True)
        o = [mod.InferRequestedOutput(out_name, binary_data=True)]
    return measure(srv, model, lambda: c.infer(model, [i], outputs=o).as_numpy(out_name), ref, n)


def measure(srv, model, infer, ref, n):
    bad = 0
    for _ in range(min(200, n)):  # warm: connection, the server's paths
        infer()
    s0 = lt.stats(srv.http, model)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        got = infer()
        lat.append(time.perf_counter() - t0)
        bad += 0 if got is not None and np.allclose(got, ref, rtol=1e-3, atol=1e-3) else 1
    s1 = lt.stats(srv.http, model)
    req = max(1, s1["success"][1] - s0["success"][1])

    def us(key):
        return (s1[key][0] - s0[key][0]) / req / 1e3
    return {"requests": n, "wrong": bad, "client_p50_us": float(np.median(lat)) * 1e6,
            "client_p99_us": float(np.percentile(lat, 99)) * 1e6, "queue_us": us("queue"),
            "in_us": us("compute_input"), "infer_us": us("compute_infer"), "out_us": us("compute_output"),
            "server_us": us("success"), "batch": (s1["inference_count"] - s0["inference_count"]) /
            max(1, s1["execution_count"] - s0["execution_count"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--protos", default="grpc,http", help="grpc, http (tritonclient), raw (the standard library)")
    ap.add_argument("--kind", default="KIND_CPU", help="KIND_CPU, or KIND_GPU (plans built for --backend=cuda)")
    ap.add_argument("--backends", default=None, help="backend folder (default: BUILD/triton/backends)")
    a = ap.parse_args()
    gpu = a.kind == "KIND_GPU"
    backends = a.backends or th.backend_dir(a.build)
    if not backends or not th.find_tritonserver():
        print("skipped: no backend folder or no tritonserver")
        return 77
    work = tempfile.mkdtemp(prefix="kiln_triton_overhead")
    add_onnx = os.path.join(work, "add.onnx")
    make_add_onnx(add_onnx)
    plans = {}
    plans["add"] = (os.path.join(work, "add.plan"), "x", "y", [16])
    bflags = ["--backend=cuda"] if gpu else []
    th.build_plan(a.kiln, add_onnx, plans["add"][0], [("x:1x16", "x:64x16", "x:64x16")], bflags)
    plans["tiny_cnn"] = (os.path.join(work, "tiny.plan"), "input", "output", [3, 64, 64])
    th.build_plan(a.kiln, os.path.join(ROOT, "examples", "tiny_cnn.onnx"), plans["tiny_cnn"][0],
                  [("input:1x3x64x64", "input:64x3x64x64", "input:64x3x64x64")], bflags)
    repo = th.make_repo()
    for name, (plan, _, _, _) in plans.items():
        for zc in ("true", "false"):
            th.add_model(repo, "%s_zc_%s" % (name, zc), plan, 'backend: "kiln"\n'
                         'instance_group [ { kind: %s count: 1 } ]\n'
                         'parameters { key: "cpu_threads" value: { string_value: "1" } }\n'
                         'parameters { key: "zero_copy" value: { string_value: "%s" } }\n' % (a.kind, zc),
                         artifact_name="model.plan")
    srv = th.Server(repo, backends)
    try:
        srv.start()
    except th.Unavailable as e:
        print("skipped: %s" % e)
        return 77
    rng = np.random.RandomState(11)
    rows = []
    try:
        meta = lt.rest(srv.http, "/v2")
        for name, (plan, iname, oname, dims) in plans.items():
            x = rng.standard_normal([1] + dims).astype(np.float32)
            ref = th.kiln_exec_outputs(a.kiln, plan, {iname: x}, work)[oname]
            for proto in a.protos.split(","):
                for zc in ("true", "false"):
                    model = "%s_zc_%s" % (name, zc)
                    r = series(srv, model, proto, x, iname, oname, ref, a.requests)
                    med, mean = exec_latency(a.kiln, plan, iname, dims, gpu)
                    r.update({"plan": name, "proto": proto, "zero_copy": zc, "exec_median_us": med,
                              "exec_mean_us": mean})
                    r["backend_us"] = r["in_us"] + r["infer_us"] + r["out_us"]
                    r["overhead_us"] = r["backend_us"] - r["exec_median_us"]
                    rows.append(r)
                    print("%-8s %-4s zero_copy=%-5s wrong=%d plan %.1f us (mean %.1f) | in %.1f infer %.1f out %.1f -> backend "
                          "%.1f us, over the plan %.1f us | queue %.1f, server %.1f, client p50 %.1f us" % (
                              name, proto, zc, r["wrong"], r["exec_median_us"], r["exec_mean_us"], r["in_us"], r["infer_us"],
                              r["out_us"], r["backend_us"], r["overhead_us"], r["queue_us"], r["server_us"],
                              r["client_p50_us"]))
    finally:
        srv.stop()
    if a.out:
        lines = ["# kiln Triton backend: overhead per request at batch 1 (%s)" % a.kind, "",
                 "Date %s UTC, commit %s, tritonserver %s, %s, %d cores, load average %s; one %s instance%s; "
                 "one client in a loop, %d requests a series; `kiln exec` at batch 1 after each series (%s)." % (
                     time.strftime("%Y-%m-%d %H:%M", time.gmtime()), lt.source_commit(), meta.get("version", "?"),
                     platform.machine(), os.cpu_count() or 0, " ".join("%.1f" % v for v in os.getloadavg()), a.kind,
                     "" if gpu else ", `cpu_threads: 1`", a.requests,
                     "its Latency" if gpu else "`--threads=1`, its Enqueue Time"), "",
                 "| plan | proto | zero_copy | kiln exec median (mean), us | compute_input | compute_infer |"
                 " compute_output | backend in+infer+out | over the plan's median | queue | in the server | client p50 |"
                 " wrong |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append("| %s | %s | %s | %.1f (%.1f) | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %d |" % (
                r["plan"], r["proto"], r["zero_copy"], r["exec_median_us"], r["exec_mean_us"], r["in_us"], r["infer_us"], r["out_us"],
                r["backend_us"], r["overhead_us"], r["queue_us"], r["server_us"], r["client_p50_us"], r["wrong"]))
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1)
        print("wrote", a.out)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
