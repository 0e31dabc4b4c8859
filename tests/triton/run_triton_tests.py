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


def make_nonzero_onnx(path):
    """y = the count of nonzeros of x, through NonZero: a layer whose output
    shape depends on the data (kiln plans do not record the rank of such an
    output itself, so the backend cannot serve it as an output)."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [1])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
             helper.make_node("Shape", ["nz"], ["y"], name="count", start=1, end=2)]
    m = helper.make_model(helper.make_graph(nodes, "nz", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
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
    # warm-up: the backend's own (a context per bucket, on by default; off),
    # Triton's model_warmup samples (checked against the plan at load)
    th.add_model(repo, "tiny_nowarm", tiny, 'backend: "kiln"\n'
                 'parameters { key: "bucket_warmup" value: { string_value: "false" } }\n'
                 'parameters { key: "cpu_threads" value: { string_value: "1" } }\n', artifact_name="model.plan")
    th.add_model(repo, "tiny_warm", tiny, 'backend: "kiln"\n'
                 'parameters { key: "cpu_threads" value: { string_value: "1" } }\n', artifact_name="model.plan")
    wdir = os.path.join(repo, "tiny_mwarm", "warmup")
    os.makedirs(wdir)
    rng0 = np.random.RandomState(5)
    rng0.standard_normal((3, 64, 64)).astype(np.float32).tofile(os.path.join(wdir, "sample.bin"))
    rng0.standard_normal((3, 64, 32)).astype(np.float32).tofile(os.path.join(wdir, "short.bin"))

    def warm(name, bs, key, dt, dims, src, count=1):
        return ('{ name: "%s" batch_size: %d inputs { key: "%s" value: { data_type: %s dims: %s %s } } count: %d }'
                % (name, bs, key, dt, dims, src, count))
    good = [warm("zeros", 4, "input", "TYPE_FP32", "[ 3, 64, 64 ]", "zero_data: true", 2),
            warm("random", 1, "input", "TYPE_FP32", "[ 3, 64, 64 ]", "random_data: true"),
            warm("file", 2, "input", "TYPE_FP32", "[ 3, 64, 64 ]", 'input_data_file: "sample.bin"')]
    th.add_model(repo, "tiny_mwarm", tiny, 'backend: "kiln"\nmodel_warmup [ %s ]\n' % ", ".join(good),
                 artifact_name="model.plan")
    bad_warm = {
        "bw_dims": (warm("s1", 1, "input", "TYPE_FP32", "[ 3, 64, 32 ]", "zero_data: true"),
                    ["model_warmup sample 's1'", "'input'", "[3,64,32]", "[3,64,64]"]),
        "bw_rank": (warm("s2", 1, "input", "TYPE_FP32", "[ 64, 64 ]", "zero_data: true"),
                    ["model_warmup sample 's2'", "'input'", "2 dims"]),
        "bw_name": (warm("s3", 1, "image", "TYPE_FP32", "[ 3, 64, 64 ]", "zero_data: true"),
                    ["model_warmup sample 's3'", "'image'", "not an input"]),
        "bw_type": (warm("s4", 1, "input", "TYPE_FP16", "[ 3, 64, 64 ]", "zero_data: true"),
                    ["model_warmup sample 's4'", "'input'", "TYPE_FP16", "TYPE_FP32"]),
        "bw_nofile": (warm("s5", 1, "input", "TYPE_FP32", "[ 3, 64, 64 ]", 'input_data_file: "none.bin"'),
                      ["model_warmup sample 's5'", "none.bin", "does not exist"]),
        "bw_size": (warm("s6", 1, "input", "TYPE_FP32", "[ 3, 64, 64 ]", 'input_data_file: "short.bin"'),
                    ["model_warmup sample 's6'", "short.bin", "24576 bytes", "49152"]),
    }
    for name, (w, _) in bad_warm.items():
        d = th.add_model(repo, name, tiny, 'backend: "kiln"\nmodel_warmup [ %s ]\n' % w, artifact_name="model.plan")
        shutil.copytree(wdir, os.path.join(d, "warmup"))
    # zero copy (the default) against the gather/scatter path, one kiln thread each
    one = 'parameters { key: "cpu_threads" value: { string_value: "1" } }\n'
    th.add_model(repo, "tiny_zc", tiny, 'backend: "kiln"\nmax_batch_size: 16\ndynamic_batching { max_queue_delay_microseconds: 200000 '
                 'preferred_batch_size: [ 4 ] }\n' + one, artifact_name="model.plan")
    th.add_model(repo, "tiny_gather", tiny, 'backend: "kiln"\n' + one +
                 'parameters { key: "zero_copy" value: { string_value: "false" } }\n', artifact_name="model.plan")
    nz_onnx = os.path.join(work, "nz.onnx")
    make_nonzero_onnx(nz_onnx)
    nz = os.path.join(work, "nz.plan")
    th.build_plan(k, nz_onnx, nz, [])
    th.add_model(repo, "nonzero", nz, 'backend: "kiln"\nmax_batch_size: 0\n', artifact_name="model.plan")
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
        run_warmup_checks(a, srv, repo, work, rng, tiny, bad_warm)
        run_zero_copy_checks(a, srv, repo, work, rng, tiny, multi)
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


def log_lines(srv, start, model, needle):
    """Lines of the server log after line `start` of an instance of `model` holding `needle`."""
    return [ln for ln in srv.log().splitlines()[start:] if ("'%s_" % model) in ln and needle in ln]


def log_len(srv):
    return len(srv.log().splitlines())


def run_warmup_checks(a, srv, repo, work, rng, tiny, bad_warm):
    k = a.kiln
    c = Clients(srv)
    x1 = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    x8 = rng.standard_normal((8, 3, 64, 64)).astype(np.float32)
    ref1 = th.kiln_exec_outputs(k, tiny, {"input": x1}, work)["output"]
    ref8 = th.kiln_exec_outputs(k, tiny, {"input": x8}, work)["output"]
    report = []
    c.grpc.is_server_ready()  # the client's connection is made before the timings
    # ---- the backend's warm-up: one enqueue per batch bucket's context at load
    for model in ("tiny_warm", "tiny_nowarm"):
        n0 = log_len(srv)
        c.http.load_model(model)
        lines = log_lines(srv, n0, model, "warm-up ran")
        if model == "tiny_warm":
            check(len(lines) == 1 and "6 contexts (batch 1, 2, 4, 8, 12, 16)" in lines[0],
                  "bucket_warmup (default): one warm-up enqueue per batch bucket at load", lines or srv.tail(10))
        else:
            check(not lines, "bucket_warmup false: no warm-up at load", lines)
        st = c.http.get_inference_statistics(model)["model_stats"][0]
        check(int(st.get("inference_count", 0)) == 0,
              "%s: the backend's warm-up is not counted as inferences in the statistics" % model, st)
        # the first request of two batch sizes after load, against the steady
        # state: the server's compute_infer (the plan's run through the
        # backend) and the client's latency; a report, not a check
        def infer_ns():
            s = c.http.get_inference_statistics(model)["model_stats"][0]["inference_stats"]["compute_infer"]
            return int(s.get("ns", 0)), int(s.get("count", 0))
        for b, x, ref in ((1, x1, ref1), (8, x8, ref8)):
            n0, k0 = infer_ns()
            t0 = time.perf_counter()
            got = c.infer(model, {"input": x}, proto="grpc").as_numpy("output")
            first = time.perf_counter() - t0
            n1, k1 = infer_ns()
            check(close(got, ref), "%s: the first request of batch %d after load equals kiln exec" % (model, b),
                  maxdiff(got, ref))
            lat = []
            for _ in range(15):
                t0 = time.perf_counter()
                c.infer(model, {"input": x}, proto="grpc")
                lat.append(time.perf_counter() - t0)
            n2, k2 = infer_ns()
            fc, sc = (n1 - n0) / max(1, k1 - k0) / 1e3, (n2 - n1) / max(1, k2 - k1) / 1e3
            report.append("%s batch %d: first request compute_infer %.0f us (client %.2f ms), steady mean %.0f us "
                          "(client median %.2f ms): %.1fx" % (model, b, fc, first * 1e3, sc, np.median(lat) * 1e3,
                                                              fc / max(sc, 1e-9)))
        c.http.unload_model(model)
    for ln in report:
        print("note: " + ln)

    # ---- Triton's model_warmup: its samples run through the backend at load
    # (Triton counts them as inferences); a sample the plan cannot take is
    # refused at load naming the sample and the tensor
    c.http.load_model("tiny_mwarm")
    st = c.http.get_inference_statistics("tiny_mwarm")["model_stats"][0]
    check(int(st.get("inference_count", 0)) == 4 * 2 + 1 + 2 and int(st.get("execution_count", 0)) >= 3,
          "model_warmup: Triton ran the zero, random and file samples through the backend at load (11 inferences)",
          json.dumps(st)[:600])
    got = c.infer("tiny_mwarm", {"input": x8}).as_numpy("output")
    check(close(got, ref8), "model_warmup: the model serves after its warm-up", maxdiff(got, ref8))
    c.http.unload_model("tiny_mwarm")
    for name, (_, needles) in bad_warm.items():
        expect_load_error(c, name, needles, "%s: a bad model_warmup sample refused at load naming it" % name)


def run_zero_copy_checks(a, srv, repo, work, rng, tiny, multi):
    """zero_copy (the default) binds Triton's buffers in place; the same
    requests through the gather/scatter path (zero_copy false) and through
    kiln exec give the same outputs."""
    import tritonclient.grpc as tg
    import tritonclient.utils.shared_memory as sm
    k = a.kiln
    c = Clients(srv)
    c.http.load_model("tiny_zc")
    c.http.load_model("tiny_gather")
    c.http.update_log_settings({"log_verbose_level": 1})
    regions = []

    def shm_infer(model, x, out_bytes):
        tag = "kz%d" % len(regions)
        hi = sm.create_shared_memory_region(tag + "i", "/" + tag + "i", x.nbytes)
        ho = sm.create_shared_memory_region(tag + "o", "/" + tag + "o", out_bytes)
        regions.append((tag, hi, ho))
        sm.set_shared_memory_region(hi, [x])
        c.grpc.register_system_shared_memory(tag + "i", "/" + tag + "i", x.nbytes)
        c.grpc.register_system_shared_memory(tag + "o", "/" + tag + "o", out_bytes)
        i = tg.InferInput("input", list(x.shape), "FP32")
        i.set_shared_memory(tag + "i", x.nbytes)
        o = tg.InferRequestedOutput("output")
        o.set_shared_memory(tag + "o", out_bytes)
        c.grpc.infer(model, [i], outputs=[o])
        return sm.get_contents_as_numpy(ho, np.float32, [x.shape[0], 10]).copy()
    try:
        for proto in ("http", "grpc", "shm"):
            for b in (1, 3):
                x = rng.standard_normal((b, 3, 64, 64)).astype(np.float32)
                ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
                got, lines = {}, {}
                for model in ("tiny_zc", "tiny_gather"):
                    n0 = log_len(srv)
                    if proto == "shm":
                        got[model] = shm_infer(model, x, b * 40)
                    else:
                        got[model] = c.infer(model, {"input": x}, proto=proto).as_numpy("output")
                    lines[model] = log_lines(srv, n0, model, "in place:")
                check(close(got["tiny_zc"], ref) and close(got["tiny_gather"], ref) and
                      close(got["tiny_zc"], got["tiny_gather"], rtol=1e-6, atol=1e-7),
                      "%s batch %d: in place and gathered outputs equal each other and kiln exec" % (proto, b),
                      (maxdiff(got["tiny_zc"], ref), maxdiff(got["tiny_gather"], ref)))
                g = lines["tiny_gather"]
                check(len(g) == 1 and "in place: 0 of 1 inputs, 0 of 1 outputs" in g[0],
                      "%s batch %d: zero_copy false gathers and scatters" % (proto, b), g)
                z = lines["tiny_zc"]
                if b == 3:  # padded to the bucket of 4: the batch is not the request's bytes
                    want = "in place: 0 of 1 inputs, 0 of 1 outputs"
                elif proto == "shm":
                    want = "in place: 1 of 1 inputs, 1 of 1 outputs"
                else:  # the front ends' output buffers are malloc'ed; where their inputs lie varies
                    want = "1 of 1 outputs"
                check(len(z) == 1 and want in z[0], "%s batch %d: zero copy binds what fits (%s)" % (proto, b, want), z)

        # a dynamic batch of four requests whose inputs lie end to end in one
        # shared memory region: right outputs, in place when they arrive in order
        x = rng.standard_normal((4, 3, 64, 64)).astype(np.float32)
        ref = th.kiln_exec_outputs(k, tiny, {"input": x}, work)["output"]
        one = x[0:1].nbytes
        hi = sm.create_shared_memory_region("kzbi", "/kzbi", 4 * one)
        ho = sm.create_shared_memory_region("kzbo", "/kzbo", 4 * 40)
        regions.append(("kzb", hi, ho))
        sm.set_shared_memory_region(hi, [x])
        c.grpc.register_system_shared_memory("kzbi", "/kzbi", 4 * one)
        c.grpc.register_system_shared_memory("kzbo", "/kzbo", 4 * 40)
        bar = threading.Barrier(4)
        errs = []

        def send(r):
            try:
                cli = tg.InferenceServerClient(c.url_grpc)
                i = tg.InferInput("input", [1, 3, 64, 64], "FP32")
                i.set_shared_memory("kzbi", one, offset=r * one)
                o = tg.InferRequestedOutput("output")
                o.set_shared_memory("kzbo", 40, offset=r * 40)
                bar.wait(60)
                time.sleep(0.02 * r)  # arrival in row order, most of the time
                cli.infer("tiny_zc", [i], outputs=[o])
            except Exception as e:
                errs.append(str(e))
        n0 = log_len(srv)
        ts = [threading.Thread(target=send, args=(r,)) for r in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = sm.get_contents_as_numpy(ho, np.float32, [4, 10]).copy()
        check(not errs and close(got, ref), "a batch of four shared-memory requests equals kiln exec", errs or maxdiff(got, ref))
        lines = log_lines(srv, n0, "tiny_zc", "in place:")
        print("note: batch of four requests laid end to end in shared memory: %s" % "; ".join(
            ln.split("kiln: ")[-1].rstrip('"') for ln in lines))

        # two inputs of two types, two outputs; one output asked for, then both again
        xv = rng.standard_normal((2, 4)).astype(np.float32)
        kv = rng.randint(-50, 50, (2, 4)).astype(np.int64)
        ref = th.kiln_exec_outputs(k, multi, {"x": xv, "k": kv}, work)
        c.http.load_model("multi")
        ok = True
        for outs in (None, ["z"], ["y"], None):
            r = c.infer("multi", {"x": xv, "k": kv}, proto="grpc", outputs=outs)
            if outs in (None, ["y"]):
                ok = ok and close(r.as_numpy("y"), ref["y"])
            if outs in (None, ["z"]):
                ok = ok and np.array_equal(r.as_numpy("z"), ref["z"])
        check(ok, "multi: outputs in place with one or both outputs asked for, in turn, equal kiln exec")
        c.http.unload_model("multi")

        # an output whose shape depends on the data: never bound before the run
        c.http.load_model("nonzero")
        for xs in ([0, 1, 0, 2, 0, 3], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]):
            xnz = np.array(xs, np.float32)
            n0 = log_len(srv)
            got = c.infer("nonzero", {"x": xnz}, proto="grpc").as_numpy("y")
            want = np.array([np.count_nonzero(xnz)], np.int64)
            lines = log_lines(srv, n0, "nonzero", "in place:")
            check(got is not None and np.array_equal(got, want) and len(lines) == 1 and "0 of 1 outputs" in lines[0],
                  "NonZero %s: outputs after a data-dependent shape are not bound in place, and are right" % xs, (got, lines))
        c.http.unload_model("nonzero")
    finally:
        c.http.update_log_settings({"log_verbose_level": 0})
        try:
            c.grpc.unregister_system_shared_memory()
        except Exception:
            pass
        for _, hi, ho in regions:
            sm.destroy_shared_memory_region(hi)
            sm.destroy_shared_memory_region(ho)
        c.http.unload_model("tiny_zc")
        c.http.unload_model("tiny_gather")


if __name__ == "__main__":
    sys.exit(main())
