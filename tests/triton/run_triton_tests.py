#!/usr/bin/env python3
"""run_triton_tests.py - kiln's Triton backend in the real server.

Starts the tritonserver that nvidia-pytriton carries on loopback ports, in
explicit model-control mode, with a repository of kiln plans built here by
the kiln CLI, and checks through tritonclient's HTTP and gRPC clients:
outputs against `kiln exec` on the same inputs (--loadInputs/--exportOutput);
config auto-complete; dynamic batching (several requests in one enqueue),
two optimization profiles and a ragged batch padded into the second; a
non-batching configuration; several CPU instances sharing one engine; a
model.onnx built at load with a timing cache beside it; plugin libraries and
the plan trust rules; configurations the plan does not take, refused naming
the tensor; bad requests answered with errors while the server goes on; and
load / unload / reload while another model is being served.

Exit 0 when every check passes, 1 on a failure, 77 (skip) when the server
cannot start here. Seeded: numpy RandomState(2026)."""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton_harness as th  # noqa: E402

FAILS = []
SEED = 2026


def check(cond, what, detail=""):
    print(("ok    " if cond else "FAIL  ") + what + ("" if cond or not detail else "\n      " + str(detail)[:2000]))
    if not cond:
        FAILS.append(what)


def close(a, b, rtol=1e-4, atol=1e-5):
    return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, rtol=rtol, atol=atol)


def maxdiff(a, b):
    try:
        return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    except Exception:
        return "shapes %s vs %s" % (getattr(a, "shape", None), getattr(b, "shape", None))


def make_multi_onnx(path):
    """Two inputs of two types, two outputs: y = x + float(k), z = k + k."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, ["N", 4])
    nodes = [helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["x", "kf"], ["y"], name="add"),
             helper.make_node("Add", ["k", "k"], ["z"], name="twice")]
    m = helper.make_model(helper.make_graph(nodes, "multi", [x, k], [y, z]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def make_act_onnx(path):
    """CustomAct (plugins/custom_act) then a residual Add."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    act = helper.make_node("CustomAct", ["x"], ["a"], name="act", domain="kiln.plugins", alpha=0.8,
                           plugin_version="1")
    add = helper.make_node("Add", ["a", "x"], ["y"], name="residual")
    m = helper.make_model(helper.make_graph([act, add], "act", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("kiln.plugins", 1)])
    m.ir_version = 8
    onnx.save(m, path)


def act_ref(x):
    return x * 0.5 * (1.0 + np.tanh(0.8 * (x + 0.044715 * x ** 3))) + x


class Clients:
    def __init__(self, srv):
        import tritonclient.grpc as tg
        import tritonclient.http as thttp
        self.http_mod, self.grpc_mod = thttp, tg
        self.url_http = "127.0.0.1:%d" % srv.http
        self.url_grpc = "127.0.0.1:%d" % srv.grpc
        self.http = thttp.InferenceServerClient(self.url_http, network_timeout=300, connection_timeout=300)
        self.grpc = tg.InferenceServerClient(self.url_grpc)

    def infer(self, model, inputs, proto="http", outputs=None, client=None):
        mod = self.http_mod if proto == "http" else self.grpc_mod
        c = client or (self.http if proto == "http" else self.grpc)
        ins = []
        for name, arr in inputs.items():
            dt = {np.float32: "FP32", np.float16: "FP16", np.int64: "INT64", np.int32: "INT32"}[arr.dtype.type]
            i = mod.InferInput(name, list(arr.shape), dt)
            i.set_data_from_numpy(arr)
            ins.append(i)
        outs = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
        r = c.infer(model, ins, outputs=outs)
        return r

    def new_http(self):
        return self.http_mod.InferenceServerClient(self.url_http, network_timeout=300, connection_timeout=300)


def config_of(c, model):
    return c.http.get_model_config(model)


def expect_load_error(c, model, needles, what):
    try:
        c.http.load_model(model)
        ok, msg = False, "loaded"
    except Exception as e:
        msg = str(e)
        ok = all(n in msg for n in needles)
    check(ok, what, msg)
    return msg


def expect_infer_error(c, model, inputs, needles, what, proto="http"):
    try:
        c.infer(model, inputs, proto=proto)
        ok, msg = False, "no error"
    except Exception as e:
        msg = str(e)
        ok = all(n.lower() in msg.lower() for n in needles)
    check(ok, what, msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the kiln CLI")
    ap.add_argument("--build", required=True, help="build folder (triton/backends/kiln inside)")
    ap.add_argument("--plugins", default=None, help="folder of the example plugin libraries")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    backends = th.backend_dir(a.build)
    if not backends:
        print("skipped: no %s/triton/backends/kiln/libtriton_kiln.so (KILN_TRITON=OFF?)" % a.build)
        return 77
    if not th.find_tritonserver():
        print("skipped: no tritonserver (the nvidia-pytriton wheel, scripts/requirements.txt)")
        return 77
    try:
        import tritonclient.grpc  # noqa: F401
        import tritonclient.http  # noqa: F401
    except ImportError as e:
        print("skipped: tritonclient is missing (%s)" % e)
        return 77
    rng = np.random.RandomState(SEED)
    print("seed %d" % SEED)
    work = tempfile.mkdtemp(prefix="kiln_triton_work")
    repo = th.make_repo()
    k = a.kiln
    tiny_onnx = os.path.join(a.root, "examples", "tiny_cnn.onnx")

    # ---- plans
    tiny = os.path.join(work, "tiny.plan")
    th.build_plan(k, tiny_onnx, tiny, [("input:1x3x64x64", "input:8x3x64x64", "input:16x3x64x64")])
    tiny2p = os.path.join(work, "tiny2p.plan")
    th.build_plan(k, tiny_onnx, tiny2p, [("input:1x3x64x64", "input:4x3x64x64", "input:4x3x64x64"),
                                         ("input:8x3x64x64", "input:16x3x64x64", "input:16x3x64x64")])
    multi_onnx = os.path.join(work, "multi.onnx")
    make_multi_onnx(multi_onnx)
    multi = os.path.join(work, "multi.plan")
    th.build_plan(k, multi_onnx, multi, [("x:1x4,k:1x4", "x:4x4,k:4x4", "x:8x4,k:8x4")])

    # ---- the repository
    th.add_model(repo, "tiny", tiny, 'backend: "kiln"\n'
                 'dynamic_batching { max_queue_delay_microseconds: 100000 }\n'
                 'instance_group [ { kind: KIND_CPU count: 2 } ]\n'
                 'parameters { key: "cpu_threads" value: { string_value: "1" } }\n',
                 artifact_name="model.plan")
    th.add_model(repo, "tiny2p", tiny2p, 'backend: "kiln"\nmax_batch_size: 16\n'
                 'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 64, 64 ] } ]\n'
                 'output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
                 'dynamic_batching { max_queue_delay_microseconds: 100000 }\n'
                 'instance_group [ { kind: KIND_CPU count: 1 } ]\n', artifact_name="model.plan")
    th.add_model(repo, "tiny_nb", tiny, 'backend: "kiln"\nmax_batch_size: 0\n'
                 'input [ { name: "input" data_type: TYPE_FP32 dims: [ -1, 3, 64, 64 ] } ]\n'
                 'output [ { name: "output" data_type: TYPE_FP32 dims: [ -1, 10 ] } ]\n'
                 'instance_group [ { kind: KIND_CPU } ]\n', artifact_name="model.plan")
    th.add_model(repo, "multi", multi, 'backend: "kiln"\n', artifact_name="model.plan")
    th.add_model(repo, "tiny_buckets", tiny, 'backend: "kiln"\n'
                 'parameters { key: "graph_contexts" value: { string_value: "3" } }\n'
                 'parameters { key: "batch_buckets" value: { string_value: "4;8;16" } }\n',
                 artifact_name="model.plan")
    th.add_model(repo, "tiny_auto", tiny, 'backend: "kiln"\n'
                 'parameters { key: "cpu_threads" value: { string_value: "1" } }\n', artifact_name="model.plan")
    th.add_model(repo, "tiny_nobuckets", tiny, 'backend: "kiln"\n'
                 'parameters { key: "batch_buckets" value: { string_value: "none" } }\n'
                 'parameters { key: "graph_contexts" value: { string_value: "1" } }\n', artifact_name="model.plan")
    th.add_model(repo, "tiny_onnx", tiny_onnx, 'backend: "kiln"\nmax_batch_size: 4\n'
                 'instance_group [ { kind: KIND_CPU } ]\n', artifact_name="model.onnx")
    bad = {
        "bad_dims": ('input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 64, 32 ] } ]\n',
                     ["'input'", "dims"]),
        "bad_type": ('input [ { name: "input" data_type: TYPE_FP16 dims: [ 3, 64, 64 ] } ]\n',
                     ["'input'", "TYPE_FP16", "TYPE_FP32"]),
        "bad_name": ('input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 64, 64 ] } ]\n',
                     ["'image'", "not an input of the plan"]),
        "bad_out": ('output [ { name: "output" data_type: TYPE_FP32 dims: [ 11 ] } ]\n',
                    ["'output'", "dims"]),
        "bad_batch": ("max_batch_size: 64\n", ["max_batch_size 64", "largest batch 16"]),
        "bad_threads": ('parameters { key: "cpu_threads" value: { string_value: "-1" } }\n', ["cpu_threads"]),
        "bad_contexts": ('parameters { key: "graph_contexts" value: { string_value: "0" } }\n',
                         ["graph_contexts"]),
        "bad_buckets": ('parameters { key: "batch_buckets" value: { string_value: "8;4" } }\n',
                        ["batch_buckets"]),
        "bad_plugin": ('parameters { key: "plugin_libraries" value: { string_value: "libnope.so" } }\n',
                       ["libnope.so"]),
    }
    for name, (cfg, _) in bad.items():
        th.add_model(repo, name, tiny, 'backend: "kiln"\n' + cfg, artifact_name="model.plan")

    plugin_lib = None
    if a.plugins:
        cand = os.path.join(a.plugins, "libkiln_plugin_custom_act.so")
        plugin_lib = os.path.abspath(cand) if os.path.exists(cand) else None
    if plugin_lib:
        act_onnx = os.path.join(work, "act.onnx")
        make_act_onnx(act_onnx)
        act_plan = os.path.join(work, "act.plan")
        shapes = [("x:1x8", "x:8x8", "x:16x8")]
        th.build_plan(k, act_onnx, act_plan, shapes, ["--staticPlugins=" + plugin_lib])
        emb_plan = os.path.join(work, "act_emb.plan")
        th.build_plan(k, act_onnx, emb_plan, shapes, ["--dynamicPlugins=" + plugin_lib,
                                                       "--setPluginsToSerialize=" + plugin_lib])
        with open(plugin_lib, "rb") as f:
            lib_sha = hashlib.sha256(f.read()).hexdigest()
        par = lambda kv: "".join('parameters { key: "%s" value: { string_value: "%s" } }\n' % p for p in kv)  # noqa: E731
        th.add_model(repo, "act", act_plan, 'backend: "kiln"\n' + par([("plugin_libraries", plugin_lib)]),
                     artifact_name="model.plan")
        th.add_model(repo, "act_sha_bad", act_plan, 'backend: "kiln"\n' +
                     par([("plugin_libraries", plugin_lib), ("plugin_library_sha256", "0" * 64)]),
                     artifact_name="model.plan")
        th.add_model(repo, "act_noplugin", act_plan, 'backend: "kiln"\n', artifact_name="model.plan")
        th.add_model(repo, "emb_denied", emb_plan, 'backend: "kiln"\n', artifact_name="model.plan")
        th.add_model(repo, "emb_allowed", emb_plan, 'backend: "kiln"\n' +
                     par([("allow_embedded_plugins", "true")]), artifact_name="model.plan")
        th.add_model(repo, "emb_wrong_sha", emb_plan, 'backend: "kiln"\n' +
                     par([("embedded_plugin_sha256", "1" * 64)]), artifact_name="model.plan")
        th.add_model(repo, "emb_sha", emb_plan, 'backend: "kiln"\n' +
                     par([("embedded_plugin_sha256", lib_sha)]), artifact_name="model.plan")

    srv = th.Server(repo, backends, explicit=True, load=["tiny", "tiny2p", "tiny_nb"])
    try:
        srv.start()
    except th.Unavailable as e:
        print("skipped: %s" % e)
        return 77
    try:
        run_checks(a, srv, repo, work, rng, tiny, tiny2p, multi, plugin_lib, bad)
    finally:
        srv.stop()
        log = srv.log()
        check("Segmentation" not in log and "Aborted" not in log, "the server log shows no crash", srv.tail())
        if FAILS or a.keep:
            print("server log: %s\nwork: %s\nrepo: %s" % (srv.log_path, work, repo))
            print(srv.tail(40))
        else:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(repo, ignore_errors=True)
    print("%d failed" % len(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


def run_checks(a, srv, repo, work, rng, tiny, tiny2p, multi, plugin_lib, bad):
    k = a.kiln
    c = Clients(srv)

    # ---- auto-complete from the plan
    cfg = config_of(c, "tiny")
    ins, outs = cfg.get("input", []), cfg.get("output", [])
    check(cfg.get("max_batch_size") == 16, "auto-complete: max_batch_size from the profile's batch range",
          cfg.get("max_batch_size"))
    check(len(ins) == 1 and ins[0]["name"] == "input" and ins[0]["data_type"] == "TYPE_FP32" and
          [int(d) for d in ins[0]["dims"]] == [3, 64, 64], "auto-complete: the input", ins)
    check(len(outs) == 1 and outs[0]["name"] == "output" and [int(d) for d in outs[0]["dims"]] == [10],
          "auto-complete: the output", outs)
    check("dynamic_batching" in cfg, "auto-complete keeps the dynamic batcher", cfg.keys())

    # ---- outputs against kiln exec, HTTP and gRPC
    for proto in ("http", "grpc"):
        for b in (1, 3, 16):
            x = rng.standard_normal((b, 3, 64, 64)).astype(np.float32)
            got = c.infer("tiny", {"input": x}, proto=proto).as_numpy("output")
            ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
            check(close(got, ref), "tiny %s batch %d equals kiln exec" % (proto, b), maxdiff(got, ref))

    # ---- dynamic batching: concurrent requests gathered into one enqueue
    xs = [rng.standard_normal((bs, 3, 64, 64)).astype(np.float32) for bs in (1, 2, 1, 3, 1, 2, 1, 1)]
    ref_all = th.kiln_exec_outputs(k, tiny, {"input": np.concatenate(xs)}, work)["output"]
    before = c.http.get_inference_statistics("tiny")["model_stats"][0]
    results, errors = [None] * len(xs), []
    start = threading.Barrier(len(xs))  # the requests arrive together, inside the queue delay

    def worker(i, model="tiny"):
        try:
            cli = c.new_http()
            start.wait(60)
            results[i] = c.infer(model, {"input": xs[i]}, client=cli).as_numpy("output")
        except Exception as e:
            errors.append(str(e))
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "concurrent requests all answered", errors[:3])
    row = 0
    ok = not errors
    for i, x in enumerate(xs):
        ok = ok and results[i] is not None and close(results[i], ref_all[row:row + len(x)])
        row += len(x)
    check(ok, "batched responses split back equal kiln exec on the same rows")
    after = c.http.get_inference_statistics("tiny")["model_stats"][0]
    n_exec = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    n_inf = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    check(n_inf == sum(len(x) for x in xs) and 0 < n_exec < len(xs),
          "the dynamic batcher gathered requests (%d rows in %d executions)" % (n_inf, n_exec),
          json.dumps(after.get("batch_stats", []))[:800])

    # ---- statistics: the three phases are reported for every execution,
    # compute (the plan's run) takes time, and each phase lies within the
    # execution (compute_input + compute_infer + compute_output <= its total)
    def delta(key, field):
        return (int(after.get("inference_stats", {}).get(key, {}).get(field, 0)) -
                int(before.get("inference_stats", {}).get(key, {}).get(field, 0)))
    ns = {key: delta(key, "ns") for key in ("success", "compute_input", "compute_infer", "compute_output")}
    ns["count"] = delta("compute_infer", "count")
    check(ns["count"] == len(xs) and ns["compute_infer"] > 0 and
          ns["compute_input"] >= 0 and ns["compute_output"] >= 0,
          "statistics: compute_input / compute_infer / compute_output reported per request", ns)

    # ---- the verbose log: one line per batch with its copy-in, compute and copy-out times
    c.http.update_log_settings({"log_verbose_level": 1})
    c.infer("tiny", {"input": rng.standard_normal((2, 3, 64, 64)).astype(np.float32)})
    c.http.update_log_settings({"log_verbose_level": 0})
    lines = [ln for ln in srv.log().splitlines() if "batch of 2: copy-in" in ln]
    check(len(lines) >= 1 and "compute" in lines[-1] and "copy-out" in lines[-1] and " us" in lines[-1],
          "verbose log: a batch's copy-in / compute / copy-out microseconds", lines[-1:] or srv.tail(10))

    # ---- two profiles; a ragged batch padded into the second
    for b in (3, 6, 12):
        x = rng.standard_normal((b, 3, 64, 64)).astype(np.float32)
        got = c.infer("tiny2p", {"input": x}).as_numpy("output")
        if b in (5, 6, 7):
            pad = np.concatenate([x, np.zeros((8 - b, 3, 64, 64), np.float32)])
            ref = th.kiln_exec_outputs(k, tiny2p, {"input": pad}, work, profile=1)["output"][:b]
            what = "tiny2p batch %d (no profile takes it: padded to 8 in profile 1) equals kiln exec" % b
        else:
            ref = th.kiln_exec_outputs(k, tiny2p, {"input": x}, work, profile=0 if b <= 4 else 1)["output"]
            what = "tiny2p batch %d (profile %d) equals kiln exec" % (b, 0 if b <= 4 else 1)
        check(close(got, ref), what, maxdiff(got, ref))
    x = rng.standard_normal((5, 3, 64, 64)).astype(np.float32)
    got = c.infer("tiny2p", {"input": x}, proto="grpc").as_numpy("output")
    ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
    check(close(got, ref), "tiny2p ragged batch 5 equals the one-profile plan's rows", maxdiff(got, ref))

    # ---- non-batching configuration: the request's whole shape
    x = rng.standard_normal((5, 3, 64, 64)).astype(np.float32)
    got = c.infer("tiny_nb", {"input": x}).as_numpy("output")
    ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
    check(close(got, ref), "tiny_nb (max_batch_size 0) equals kiln exec", maxdiff(got, ref))

    # ---- bad requests: an error response, and the server goes on
    expect_infer_error(c, "tiny_nb", {"input": np.zeros((20, 3, 64, 64), np.float32)},
                       ["kiln", "'input'", "shape"], "a shape outside every profile: the backend's error")
    expect_infer_error(c, "tiny", {"input": np.zeros((1, 3, 64, 63), np.float32)}, ["shape"],
                       "a wrong shape is refused")
    expect_infer_error(c, "tiny", {"input": np.zeros((1, 3, 64, 64), np.float16)}, ["FP16"],
                       "a wrong type is refused", proto="grpc")
    expect_infer_error(c, "tiny", {"input": np.zeros((17, 3, 64, 64), np.float32)}, ["batch"],
                       "a batch over max_batch_size is refused")
    try:  # declared shape and bytes that do not match
        import tritonclient.http as thttp
        i = thttp.InferInput("input", [2, 3, 64, 64], "FP32")
        i.set_data_from_numpy(np.zeros((1, 3, 64, 64), np.float32))
        c.http.infer("tiny", [i])
        ok, msg = False, "no error"
    except Exception as e:
        ok, msg = True, str(e)
    check(ok, "bytes that do not match the shape are refused", msg)
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    got = c.infer("tiny", {"input": x}).as_numpy("output")
    ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
    check(close(got, ref) and srv.alive(), "after bad requests the server still answers correctly")

    # ---- two types, two outputs, one of them asked for alone
    c.http.load_model("multi")
    cfg = config_of(c, "multi")
    check(cfg.get("max_batch_size") == 8 and {i["name"]: i["data_type"] for i in cfg["input"]} ==
          {"x": "TYPE_FP32", "k": "TYPE_INT64"}, "multi: auto-complete of two inputs of two types", cfg.get("input"))
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    kv = rng.randint(-50, 50, (3, 4)).astype(np.int64)
    ref = th.kiln_exec_outputs(k, multi, {"x": xv, "k": kv}, work)
    r = c.infer("multi", {"x": xv, "k": kv}, proto="grpc")
    check(close(r.as_numpy("y"), ref["y"]) and np.array_equal(r.as_numpy("z"), ref["z"]) and
          np.array_equal(r.as_numpy("z"), kv + kv), "multi: both outputs equal kiln exec")
    r = c.infer("multi", {"x": xv, "k": kv}, outputs=["z"])
    check(r.as_numpy("y") is None and np.array_equal(r.as_numpy("z"), kv + kv), "multi: one requested output")

    # ---- several contexts an instance (one per batch size) and batch buckets
    c.http.load_model("tiny_buckets")
    for b in (1, 3, 5, 9, 3, 16, 1):
        x = rng.standard_normal((b, 3, 64, 64)).astype(np.float32)
        got = c.infer("tiny_buckets", {"input": x}).as_numpy("output")
        ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
        check(close(got, ref), "tiny_buckets batch %d (padded to its bucket, its own context) equals kiln exec" % b,
              maxdiff(got, ref))
    c.http.unload_model("tiny_buckets")

    # ---- default batch buckets (1,2,4,8,12,16 for max_batch_size 16): a
    # context each, kept across executions whose batch size changes, and the
    # batcher's preferred sizes from them; "none": one context re-prepared
    c.http.load_model("tiny_auto")
    c.http.load_model("tiny_nobuckets")
    pref = [int(v) for v in config_of(c, "tiny_auto").get("dynamic_batching", {}).get("preferred_batch_size", [])]
    check(pref == [2, 4, 8, 12, 16], "auto-complete: preferred_batch_size from the default batch buckets", pref)
    pref = [int(v) for v in config_of(c, "tiny_nobuckets").get("dynamic_batching", {}).get("preferred_batch_size", [])]
    check(pref in ([], [16]), "batch_buckets none: no preferred_batch_size from the backend (Triton's own: none "
          "or max_batch_size)", pref)
    seq = (1, 3, 16, 1, 5, 12, 3, 9, 2, 1, 16, 7)
    xs = {b: rng.standard_normal((b, 3, 64, 64)).astype(np.float32) for b in set(seq)}
    refs = {b: th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"] for b, x in xs.items()}
    for model in ("tiny_auto", "tiny_nobuckets"):
        bad_b = []
        for proto in ("http", "grpc"):
            for b in seq:  # every request a batch size other than the last one's
                got = c.infer(model, {"input": xs[b]}, proto=proto).as_numpy("output")
                if not close(got, refs[b]):
                    bad_b.append((proto, b, maxdiff(got, refs[b])))
        check(not bad_b, "%s: a batch size that changes every request (%s) equals kiln exec" % (model, seq), bad_b[:3])
    c.http.unload_model("tiny_auto")
    c.http.unload_model("tiny_nobuckets")

    # ---- model.onnx built at load, with a timing cache beside it
    t0 = time.time()
    c.http.load_model("tiny_onnx")
    cache = os.path.join(repo, "tiny_onnx", "1", "model.onnx.cpu.timing")
    check(os.path.exists(cache), "model.onnx built at load writes its timing cache beside it (%.1f s)" % (time.time() - t0))
    x = rng.standard_normal((4, 3, 64, 64)).astype(np.float32)
    got = c.infer("tiny_onnx", {"input": x}).as_numpy("output")
    ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
    check(close(got, ref, rtol=1e-3, atol=1e-4), "tiny_onnx equals kiln exec of a plan of the same model",
          maxdiff(got, ref))
    c.http.unload_model("tiny_onnx")

    # ---- configurations the plan does not take: refused at load, naming the tensor
    for name, (_, needles) in bad.items():
        expect_load_error(c, name, needles, "%s refused at load naming it" % name)

    # ---- plugins and the plan trust rules
    if plugin_lib:
        # before any build of the library is in the process
        expect_load_error(c, "act_noplugin", ["CustomAct"], "a plan whose plugin is not loaded is refused naming it")
        expect_load_error(c, "emb_denied", ["CustomAct"], "an embedded plugin library is refused by default")
        expect_load_error(c, "emb_wrong_sha", ["CustomAct"], "an embedded library not on the allow-list is refused")
        expect_load_error(c, "act_sha_bad", ["SHA-256"], "a plugin library with the wrong SHA-256 is refused")
        x = rng.standard_normal((5, 8)).astype(np.float32)
        for name in ("emb_sha", "emb_allowed"):
            try:
                c.http.load_model(name)
                got = c.infer(name, {"x": x}).as_numpy("y")
                check(close(got, act_ref(x), rtol=1e-4, atol=1e-4), "%s: the embedded plugin runs" % name,
                      maxdiff(got, act_ref(x)))
                c.http.unload_model(name)
            except Exception as e:
                check(False, "%s loads" % name, e)
        try:
            c.http.load_model("act")
            got = c.infer("act", {"x": x}).as_numpy("y")
            check(close(got, act_ref(x), rtol=1e-4, atol=1e-4), "act: plugin_libraries loads the plugin",
                  maxdiff(got, act_ref(x)))
            c.http.unload_model("act")
        except Exception as e:
            check(False, "act loads with its plugin library", e)
    else:
        print("note: no plugin library given (--plugins): plugin checks left out")

    # ---- load / unload / reload while serving
    stop = threading.Event()
    served = {"ok": 0, "bad": []}
    xs_live = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    ref_live = th.kiln_exec_outputs(k, tiny, {"input": xs_live}, work)["output"]

    def hammer():
        cli = c.new_http()
        while not stop.is_set():
            try:
                got = c.infer("tiny", {"input": xs_live}, client=cli).as_numpy("output")
                if close(got, ref_live):
                    served["ok"] += 1
                else:
                    served["bad"].append("wrong output %s" % maxdiff(got, ref_live))
            except Exception as e:
                served["bad"].append(str(e))
    ht = [threading.Thread(target=hammer) for _ in range(2)]
    for t in ht:
        t.start()
    try:
        c.http.unload_model("multi")
        time.sleep(0.5)
        check(not c.http.is_model_ready("multi"), "multi unloaded while tiny serves")
        c.http.load_model("multi")
        check(c.http.is_model_ready("multi"), "multi loaded again")
        c.http.load_model("tiny")  # reload of a model in use
        check(c.http.is_model_ready("tiny"), "tiny reloaded while being served")
        # a new configuration through the load API: one instance instead of two
        new_cfg = json.dumps({"backend": "kiln", "max_batch_size": 16,
                              "instance_group": [{"kind": "KIND_CPU", "count": 1}]})
        c.http.load_model("tiny", config=new_cfg)
        cfg = config_of(c, "tiny")
        check(c.http.is_model_ready("tiny") and cfg["instance_group"][0]["count"] == 1,
              "tiny reloaded with a new configuration while being served", cfg.get("instance_group"))
        # a new version on disk
        os.makedirs(os.path.join(repo, "tiny", "2"))
        shutil.copy(tiny2p, os.path.join(repo, "tiny", "2", "model.plan"))
        c.http.load_model("tiny")
        time.sleep(0.5)
        check(c.http.is_model_ready("tiny", "2") and not c.http.is_model_ready("tiny", "1"),
              "tiny version 2 replaced version 1 while being served")
        time.sleep(1.0)
    finally:
        stop.set()
        for t in ht:
            t.join()
    check(served["ok"] > 0 and not served["bad"],
          "no request failed during load/unload/reload (%d served)" % served["ok"], served["bad"][:3])
    c.http.unload_model("tiny", unload_dependents=False)
    c.http.unload_model("multi")
    time.sleep(0.5)
    check(not c.http.is_model_ready("tiny"), "tiny unloaded")
    c.http.load_model("tiny")
    x = rng.standard_normal((6, 3, 64, 64)).astype(np.float32)
    got = c.infer("tiny", {"input": x}).as_numpy("output")
    ref = th.kiln_exec_outputs(k, tiny2p, {"input": np.concatenate([x, np.zeros((2, 3, 64, 64), np.float32)])},
                               work, profile=1)["output"][:6]
    check(close(got, ref), "tiny (version 2) after unload and load equals kiln exec", maxdiff(got, ref))


if __name__ == "__main__":
    sys.exit(main())
