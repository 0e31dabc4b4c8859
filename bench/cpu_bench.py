#!/usr/bin/env python3
"""cpu_bench.py - kiln against ONNX Runtime on the CPU, in one process and one
run: ResNet-50 and BERT-base (sequence 128), FP32, batch 1 and 8, equal
thread counts. Prints a Markdown table with the median latency of each and
the ratio kiln/ORT, plus kiln's accuracy against ORT (||kiln - ort|| / ||ort||).

kiln is driven through its public C API (libkiln.so via ctypes): parse,
build (tactics timed), load the plan, one execution context, caller-bound
input and output buffers. ORT gets the same inputs and the same threads
(intra-op = threads, inter-op = 1, sequential, all graph optimizations).

Timing: after warm-up, rounds of `block` runs of kiln then `block` runs of ORT
(a short pause between blocks lets the other runtime's worker threads stop
spinning) until each has `runs` timed runs; the median is reported. The
machine is shared, so only ratios from one run are compared.

Usage:
  bench/cpu_bench.py [--lib build-fast/libkiln.so] [--models DIR]
                     [--threads 2] [--runs 20] [--batches 1,8]
                     [--which resnet50,bert] [--omp-wait active|passive]

--omp-wait sets OMP_WAIT_POLICY for kiln's OpenMP threads (oneDNN and the
reference kernels) before the library loads; left out, libgomp's default
(spin a while, then sleep) applies. On an oversubscribed machine passive
waiting avoids burning the time slices the partner thread needs.
Models come from scripts/gen_models.py (resnet50.onnx, bert.onnx in DIR);
zoo_<name> (zoo_densenet121, zoo_resnet50, zoo_squeezenet, zoo_inception_v2,
zoo_vgg19, ...) is the ONNX model zoo's opset-9 graph from onnx's backend
test data with random weights (fixed seed), written to DIR on first use; it
runs at its own static batch (1) only. The kiln context gets --threads too
(kiln_context_set_threads), not only the builder.
"""

import argparse
import ctypes as C
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

KILN_OK = 0
DTYPE_FLOAT, DTYPE_INT64 = 1, 7
NP_DTYPES = {DTYPE_FLOAT: np.float32, DTYPE_INT64: np.int64}


class Kiln:
    """The few public kiln entry points the benchmark needs."""

    def __init__(self, path):
        self.lib = L = C.CDLL(path)
        vp, pp = C.c_void_p, C.POINTER(C.c_void_p)
        i64p = C.POINTER(C.c_int64)
        sig = {
            "kiln_last_error": (C.c_char_p, []),
            "kiln_version_string": (C.c_char_p, []),
            "kiln_onnx_parse_file": (C.c_int, [C.c_char_p, pp]),
            "kiln_network_destroy": (None, [vp]),
            "kiln_builder_config_create": (C.c_int, [pp]),
            "kiln_builder_config_destroy": (None, [vp]),
            "kiln_builder_config_set_threads": (None, [vp, C.c_int]),
            "kiln_builder_config_add_profile": (C.c_int, [vp, C.POINTER(C.c_int)]),
            "kiln_builder_config_set_shape": (C.c_int, [vp, C.c_int, C.c_char_p, C.c_int,
                                                        i64p, i64p, i64p]),
            "kiln_build_serialized": (C.c_int, [vp, vp, pp, C.POINTER(C.c_size_t)]),
            "kiln_free": (None, [vp]),
            "kiln_engine_load": (C.c_int, [vp, C.c_size_t, pp]),
            "kiln_engine_destroy": (None, [vp]),
            "kiln_engine_num_io_tensors": (C.c_int, [vp]),
            "kiln_engine_io_tensor_name": (C.c_char_p, [vp, C.c_int]),
            "kiln_engine_tensor_io_mode": (C.c_int, [vp, C.c_char_p]),
            "kiln_engine_tensor_dtype": (C.c_int, [vp, C.c_char_p]),
            "kiln_context_create": (C.c_int, [vp, pp]),
            "kiln_context_destroy": (None, [vp]),
            "kiln_context_set_threads": (None, [vp, C.c_int]),
            "kiln_context_set_input_shape": (C.c_int, [vp, C.c_char_p, C.c_int, i64p]),
            "kiln_context_tensor_shape": (C.c_int, [vp, C.c_char_p, i64p]),
            "kiln_context_set_tensor_address": (C.c_int, [vp, C.c_char_p, vp]),
            "kiln_context_enqueue": (C.c_int, [vp, vp]),
        }
        for name, (res, args) in sig.items():
            f = getattr(L, name)
            f.restype, f.argtypes = res, args

    def check(self, st, what):
        if st != KILN_OK:
            raise RuntimeError("%s: %s" % (what, self.lib.kiln_last_error().decode()))


def dims(shape):
    return (C.c_int64 * len(shape))(*shape)


class KilnModel:
    """Parse, build for exactly the given input shapes, load, bind."""

    def __init__(self, k, path, inputs, threads):
        self.k, L = k, k.lib
        net, cfg, plan, size = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_size_t()
        k.check(L.kiln_onnx_parse_file(path.encode(), C.byref(net)), "parse " + path)
        try:
            k.check(L.kiln_builder_config_create(C.byref(cfg)), "config")
            L.kiln_builder_config_set_threads(cfg, threads)
            prof = C.c_int()
            k.check(L.kiln_builder_config_add_profile(cfg, C.byref(prof)), "profile")
            for name, arr in inputs.items():
                d = dims(arr.shape)
                k.check(L.kiln_builder_config_set_shape(cfg, prof.value, name.encode(),
                                                        arr.ndim, d, d, d), "shape " + name)
            t0 = time.perf_counter()
            k.check(L.kiln_build_serialized(net, cfg, C.byref(plan), C.byref(size)), "build")
            self.build_s = time.perf_counter() - t0
        finally:
            L.kiln_builder_config_destroy(cfg)
            L.kiln_network_destroy(net)
        self.engine, self.ctx = C.c_void_p(), C.c_void_p()
        try:
            k.check(L.kiln_engine_load(plan, size, C.byref(self.engine)), "load")
        finally:
            L.kiln_free(plan)
        k.check(L.kiln_context_create(self.engine, C.byref(self.ctx)), "context")
        L.kiln_context_set_threads(self.ctx, threads)  # the context's threads, not the cores
        self.keep = []
        for name, arr in inputs.items():
            arr = np.ascontiguousarray(arr)
            self.keep.append(arr)
            k.check(L.kiln_context_set_input_shape(self.ctx, name.encode(), arr.ndim,
                                                   dims(arr.shape)), "input shape " + name)
            k.check(L.kiln_context_set_tensor_address(self.ctx, name.encode(),
                                                      arr.ctypes.data), "bind " + name)
        self.outputs = {}
        for i in range(L.kiln_engine_num_io_tensors(self.engine)):
            name = L.kiln_engine_io_tensor_name(self.engine, i)
            if L.kiln_engine_tensor_io_mode(self.engine, name) != 2:
                continue
            d = (C.c_int64 * 8)()
            rank = L.kiln_context_tensor_shape(self.ctx, name, d)
            if rank < 0:
                raise RuntimeError("output shape: " + L.kiln_last_error().decode())
            # float when the engine does not record the output's type
            dt = NP_DTYPES.get(L.kiln_engine_tensor_dtype(self.engine, name), np.float32)
            out = np.empty([d[j] for j in range(rank)], dt)
            k.check(L.kiln_context_set_tensor_address(self.ctx, name, out.ctypes.data),
                    "bind output")
            self.outputs[name.decode()] = out

    def run(self):
        self.k.check(self.k.lib.kiln_context_enqueue(self.ctx, None), "enqueue")

    def close(self):
        self.k.lib.kiln_context_destroy(self.ctx)
        self.k.lib.kiln_engine_destroy(self.engine)


ZOO = ("densenet121", "resnet50", "squeezenet", "inception_v2", "vgg19", "inception_v1",
       "shufflenet", "bvlc_alexnet", "zfnet512")


def zoo_model(name, out_dir):
    """The ONNX model zoo graph `name` (opset 9, as onnx's backend test data
    ships it: light_<name>.onnx, weights as ConstantOfShape) with the
    weights materialized as random initializers (fixed seed), saved as
    out_dir/zoo_<name>.onnx; its path."""
    import onnx
    from onnx import numpy_helper
    dst = os.path.join(out_dir, "zoo_%s.onnx" % name)
    if os.path.exists(dst):
        return dst
    src = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                       "light_%s.onnx" % name)
    m = onnx.load(src)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    rng = np.random.default_rng(35)
    keep, new_inits, dropped = [], [], set()
    for n in g.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = [int(v) for v in numpy_helper.to_array(inits[n.input[0]])]
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        val = (rng.standard_normal(shape) * np.sqrt(1.0 / max(fan_in, 1))).astype(np.float32)
        if "var" in n.output[0]:
            val = np.abs(val) + 0.5
        new_inits.append(numpy_helper.from_array(val, n.output[0]))
        dropped.add(n.input[0])
    del g.node[:]
    g.node.extend(keep)
    # BatchNormalization parameters stored as values (the light models'
    # variances are random normals, some negative: NaN everywhere) are
    # redrawn: scale in [0.5, 1), small shift and mean, variance in [0.5, 1.5)
    fresh = {}
    for n in g.node:
        if n.op_type != "BatchNormalization":
            continue
        for j, (lo, hi) in zip(range(1, 5), ((0.5, 1.0), (-0.1, 0.1), (-0.1, 0.1), (0.5, 1.5))):
            name = n.input[j]
            shape = None
            if name in inits:
                shape = numpy_helper.to_array(inits[name]).shape
            for t in new_inits:
                if t.name == name:
                    shape = tuple(t.dims)
            if shape is not None:
                fresh[name] = numpy_helper.from_array(
                    rng.uniform(lo, hi, shape).astype(np.float32), name)
    new_inits = [fresh.pop(t.name, t) for t in new_inits]
    others = [fresh.pop(i.name, i) for i in g.initializer if i.name not in dropped]
    others += list(fresh.values())
    del g.initializer[:]
    g.initializer.extend(others + new_inits)
    names = set(i.name for i in g.initializer)
    ins = [i for i in g.input if i.name not in names and i.name not in dropped]
    del g.input[:]
    g.input.extend(ins)
    m.ir_version = max(m.ir_version, 4)  # initializers need not be listed as inputs
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(m, dst)
    return dst


def make_inputs(model, batch, rng, path=None):
    if model.startswith("zoo_"):
        import onnx
        m = onnx.load(path, load_external_data=False)
        inits = set(i.name for i in m.graph.initializer)
        feeds = {}
        for i in m.graph.input:
            if i.name in inits:
                continue
            shape = [d.dim_value if d.dim_value > 0 else batch for d in i.type.tensor_type.shape.dim]
            if shape and shape[0] != batch:
                return None  # a static batch: this model runs at its own only
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        return feeds
    if model == "resnet50":
        return {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    if path and model not in ("bert",):
        # any other model: its own inputs, the batch as dim 0; float inputs
        # get noise, int64 token ids (names with "ids") random ids, other
        # int64 inputs (masks) ones with the tail padded as in bert's
        import onnx
        m = onnx.load(path, load_external_data=False)
        inits = set(i.name for i in m.graph.initializer)
        feeds = {}
        for i in m.graph.input:
            if i.name in inits:
                continue
            dims = i.type.tensor_type.shape.dim
            shape = [batch if k == 0 else (d.dim_value if d.dim_value > 0 else 128)
                     for k, d in enumerate(dims)]
            if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
            elif "ids" in i.name:
                feeds[i.name] = rng.integers(0, 30522, shape, dtype=np.int64)
            else:
                v = np.ones(shape, np.int64)
                if len(shape) == 2:
                    v[:, 100:] = 0
                feeds[i.name] = v
        return feeds
    ids = rng.integers(0, 30522, (batch, 128), dtype=np.int64)
    mask = np.ones((batch, 128), np.int64)
    mask[:, 100:] = 0  # some padding, as real batches have
    return {"input_ids": ids, "attention_mask": mask}


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def bench_pair(km, sess, feeds, runs, block, warmup):
    for _ in range(warmup):
        km.run()
    for _ in range(warmup):
        sess.run(None, feeds)
    tk, to = [], []
    while len(tk) < runs or len(to) < runs:
        time.sleep(0.05)
        tk += [timed(km.run) for _ in range(block)]
        time.sleep(0.05)
        to += [timed(lambda: sess.run(None, feeds)) for _ in range(block)]
    return statistics.median(tk), statistics.median(to)


def git_commit(root):
    try:
        c = subprocess.check_output(["git", "-C", root, "rev-parse", "--short", "HEAD"], text=True)
        dirty = subprocess.call(["git", "-C", root, "diff", "--quiet", "HEAD", "--", "src"])
        return c.strip() + (" (src modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(root, "build-fast", "libkiln.so"))
    ap.add_argument("--models", default="/tmp/models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--which", default="resnet50,bert")
    ap.add_argument("--omp-wait", choices=["active", "passive"])
    ap.add_argument("--commit", help="kiln commit the library was built from (default: this "
                    "checkout's HEAD)")
    ap.add_argument("--ort-spin", choices=["0", "1"],
                    help="ORT session.intra_op.allow_spinning (default: ORT's, which spins)")
    args = ap.parse_args()

    if args.omp_wait:  # read by libgomp when it loads with libkiln, below
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait.upper()
    k = Kiln(args.lib)
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("# kiln vs ONNX Runtime, CPU FP32")
    print()
    print("- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("- machine: %s, %d cores online, %s" % (cpu, os.cpu_count(), platform.platform()))
    print("- load average at start: %s" % " ".join("%.1f" % x for x in os.getloadavg()))
    print("- kiln %s, commit %s, library %s" % (k.lib.kiln_version_string().decode(),
                                                args.commit or git_commit(root), args.lib))
    print("- ONNX Runtime %s (CPUExecutionProvider), numpy %s, Python %s" %
          (ort.__version__, np.__version__, platform.python_version()))
    print("- threads %d each; median of %d timed runs after %d warm-up runs, in blocks of %d"
          % (args.threads, args.runs, args.warmup, args.block))
    print("- OMP_WAIT_POLICY for kiln: %s; ORT intra-op spinning: %s" %
          (os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default)"),
           {"0": "off", "1": "on", None: "ORT default (on)"}[args.ort_spin]))
    print()
    print("| model | batch | kiln build (s) | kiln median (ms) | ORT median (ms) | kiln/ORT |"
          " accuracy ‖kiln−ort‖/‖ort‖ |")
    print("|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    rng = np.random.default_rng(0)
    for model in args.which.split(","):
        path = os.path.join(args.models, model + ".onnx")
        if model.startswith("zoo_"):
            path = zoo_model(model[4:], args.models)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if args.ort_spin is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", args.ort_spin)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        for batch in [int(b) for b in args.batches.split(",")]:
            feeds = make_inputs(model, batch, rng, path)
            if feeds is None:
                continue
            try:
                km = KilnModel(k, path, feeds, args.threads)
            except RuntimeError as e:
                print("| %s | %d | failed: %s | | | | |" % (model, batch, str(e)[:200]))
                sys.stdout.flush()
                continue
            km.run()
            ref = sess.run(None, feeds)[0]
            got = next(iter(km.outputs.values()))
            acc = float(np.linalg.norm(got.astype(np.float64) - ref) /
                        max(np.linalg.norm(ref.astype(np.float64)), 1e-30))
            tk, to = bench_pair(km, sess, feeds, args.runs, args.block, args.warmup)
            print("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.1e |" %
                  (model, batch, km.build_s, tk, to, tk / to, acc))
            sys.stdout.flush()
            km.close()
    print()
    print("- load average at end: %s" % " ".join("%.1f" % x for x in os.getloadavg()))


if __name__ == "__main__":
    main()
