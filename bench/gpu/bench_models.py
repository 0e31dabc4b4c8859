#!/usr/bin/env python3
"""bench_models.py - kiln against PyTorch on the GPU, measured in one run.

Generates torchvision ResNet-50 and transformers BERT-base (seq 128) with fixed
seeds (BatchNorm statistics warmed on random batches so activations are O(1)),
exports them with torch.onnx (opset 17, dynamic batch), builds kiln plans
(dynamic batch 1..64; one tuned at batch 1 for the latency figure, one tuned
at batch 64 for throughput, as TensorRT users build them; in FP16 with
float16 inputs and outputs, as the FP16 PyTorch models) and times, in the
same process and on the same inputs:
  - PyTorch eager FP16, torch.compile(mode="reduce-overhead") FP16,
  - kiln (through libkiln.so with ctypes; inputs and outputs are torch CUDA
    tensors, enqueued on a torch stream of its own),
with CUDA events: median and p99 latency at batch 1 (>= 200 timed runs after
warm-up), throughput at batch 64 from the median, and again with each
block's runs enqueued back to back. The three are timed in interleaved
blocks (--rounds at batch 1, --rounds-b64 at batch 64, of 40 runs each, each
candidate following each of the others equally often), so that each sees
the GPU in the same clock and power state; the log also gives each one's
lowest and highest block median. Accuracy: kiln's outputs
against PyTorch FP32 as ||out - ref|| / ||ref||. Prints a table with the
ratios and writes it (markdown) to --out.

PyTorch runs at its best: cudnn.benchmark on, ResNet-50 in channels_last
memory format, BERT with its default SDPA attention (fused kernels). The ONNX
file is exported from the same weights through a path that reproduces the
model exactly (eager attention, the additive mask built in the wrapper):
transformers' own mask helpers do not trace faithfully.

Usage: python3 bench/gpu/bench_models.py --kiln build/libkiln.so --cli build/kiln
           [--models resnet50,bert] [--precision fp16] [--out results.md]
           [--profile DIR]   (kiln's per-layer times at batch 64 into DIR)
"""
import argparse
import contextlib
import copy
import ctypes
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- models
def make_resnet50(seed):
    import torchvision
    torch.manual_seed(seed)
    m = torchvision.models.resnet50(weights=None)
    m.train()
    with torch.no_grad():  # warm BatchNorm statistics on random batches
        for _ in range(8):
            m(torch.randn(16, 3, 224, 224))
    m.eval()
    return m, {"input": (3, 224, 224)}


def make_bert(seed, attn="sdpa"):
    from transformers import BertConfig, BertModel
    torch.manual_seed(seed)
    # bert-base: 12 layers, hidden 768, 12 heads; the same weights for every
    # attention implementation (the seed fixes them)
    cfg = BertConfig(attn_implementation=attn)
    m = BertModel(cfg, add_pooling_layer=False)
    m.eval()
    return m, None


class BertWrap(torch.nn.Module):
    """What gets exported: embeddings, then the encoder with the additive
    mask made here ((1 - mask) * min, broadcast over heads and queries), as
    the model computes it, so the trace has no data-dependent branches."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        emb = self.m.embeddings(input_ids=input_ids)
        ext = (1.0 - attention_mask[:, None, None, :].to(emb.dtype)) * torch.finfo(emb.dtype).min
        out = self.m.encoder(emb, attention_mask=ext)
        return out[0] if isinstance(out, tuple) else out.last_hidden_state


def inputs_for(name, batch, device, seed=0):
    g = torch.Generator().manual_seed(seed + batch)
    if name == "resnet50":
        return {"input": torch.randn(batch, 3, 224, 224, generator=g).to(device)}
    ids = torch.randint(0, 30522, (batch, 128), generator=g).to(device)
    mask = torch.ones(batch, 128, dtype=torch.int64).to(device)
    return {"input_ids": ids, "attention_mask": mask}


def export(name, model, path):
    x = inputs_for(name, 2, "cpu")
    if name == "resnet50":
        torch.onnx.export(model, (x["input"],), path, input_names=["input"],
                          output_names=["output"], opset_version=17,
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                          dynamo=False)
    else:
        torch.onnx.export(BertWrap(model), (x["input_ids"], x["attention_mask"]), path,
                          input_names=["input_ids", "attention_mask"], output_names=["output"],
                          opset_version=17,
                          dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                                        "output": {0: "batch"}},
                          dynamo=False)


# ---------------------------------------------------------------- timing
def event_times(fn, n, warmup, stream=None):
    """`warmup` untimed runs, then `n` runs each timed with CUDA events on
    `stream` (torch's current stream when None): milliseconds per run."""
    ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e))
        return out


def median_p99(times):
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def time_cuda(fn, iters, warmup):
    return median_p99(event_times(fn, iters, warmup))


def compiled_bert(x, warmup=30):
    """BERT-base (seed 0) in float16 under torch.compile(mode="reduce-overhead"),
    as a call on the inputs x, compiled and its graphs recorded by `warmup`
    runs before it is returned (the probes time it against kiln's plans)."""
    with torch.no_grad():
        mh = copy.deepcopy(make_bert(0)[0]).cuda().half()
        cm = torch.compile(mh, mode="reduce-overhead")

        def fn():
            return cm(input_ids=x["input_ids"], attention_mask=x["attention_mask"])

        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
    return fn


def capture_graph(fn, warmup=2):
    """fn captured into a torch.cuda.CUDAGraph, after `warmup` runs on a side
    stream (PyTorch's recipe: cuBLAS workspaces and lazy set-up happen outside
    the capture). The caller keeps every tensor fn touches alive as long as the
    graph is replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def sustain(fn, ms, stream=None):
    """Untimed runs of fn for at least `ms` milliseconds of wall time, so the
    GPU's clocks and power settle on fn's own load before a timed block."""
    if ms <= 0:
        return
    ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx:
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < ms:
            for _ in range(4):
                fn()
            torch.cuda.synchronize()


def block_order(n, rounds):
    """`rounds` orders of candidates 0..n-1, each a permutation, such that
    over the whole sequence of blocks every candidate follows each of the
    others about equally often (and never itself). Under the power cap a
    block's figure depends on the load before it (a dense predecessor leaves
    the clocks low), so a fixed rotation, where with three candidates one
    predecessor comes seven times in ten, favours whoever that suits."""
    count = {}
    prev, out = n - 1, []
    for _ in range(rounds):
        left, order = list(range(n)), []
        while left:
            # the candidate that has followed `prev` least; then the one that
            # keeps the rest of the round completable without a self-follow
            c = min((x for x in left if x != prev or len(left) == 1),
                    key=lambda x: (count.get((prev, x), 0), x))
            count[(prev, c)] = count.get((prev, c), 0) + 1
            order.append(c)
            left.remove(c)
            prev = c
        out.append(order)
    return out


def burst_time(fn, n, stream=None):
    """Two warm-up runs, then `n` runs enqueued back to back between two CUDA
    events on `stream`: milliseconds a run, as a throughput figure counts
    them (no wait for the host between runs)."""
    ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx:
        for _ in range(2):
            fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / n


def time_interleaved(cands, rounds, iters, sustain_ms=0.0, blocks=None, burst=False):
    """Each candidate (tag, fn, stream, warm-up) timed in `rounds` blocks of
    `iters` runs, the blocks interleaved (block_order: each candidate follows
    every other equally often), so that all see the GPU in the same clock
    and power state: under a long load its power cap lowers the clocks, and
    a candidate timed alone, right after a cool-down, would be favoured.
    With sustain_ms each block starts after that long of the candidate's own
    untimed runs, so it is timed in its own steady state rather than in the
    state the previous block left. burst: a block is its runs back to back
    between two events (burst_time), one figure a block, rather than each
    run timed on its own. Appends (round, tag, previous tag, block median)
    to `blocks`. Returns per tag (median, p99 over all runs, lowest and
    highest round median); in burst mode the median and p99 are over the
    blocks' figures."""
    for tag, fn, stream, warm in cands:
        event_times(fn, 0, warm, stream)
    times = {tag: [] for tag, _, _, _ in cands}
    rmeds = {tag: [] for tag, _, _, _ in cands}
    prev = cands[-1][0]
    for r, order in enumerate(block_order(len(cands), rounds)):
        for i in order:
            tag, fn, stream, _ = cands[i]
            sustain(fn, sustain_ms, stream)
            t = [burst_time(fn, iters, stream)] if burst else event_times(fn, iters, 2, stream)
            times[tag] += t
            rmeds[tag].append(statistics.median(t))
            if blocks is not None:
                blocks.append((r, tag, prev, rmeds[tag][-1]))
            prev = tag
    return {tag: median_p99(t) + (min(rmeds[tag]), max(rmeds[tag])) for tag, t in times.items()}


def paired_ratios(blocks):
    """kiln's time over the best torch candidate's time, one ratio a round
    (each round runs every candidate back to back, so a round's ratio sees
    one GPU state): (median, lowest, highest). The headline figure is the
    ratio of the pooled medians; this is its spread."""
    by = {}
    for r, tag, _, med in blocks:
        by.setdefault(r, {})[tag] = med
    rs = [d["kiln"] / min(v for t, v in d.items() if t != "kiln")
          for d in by.values() if "kiln" in d and len(d) > 1]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None


def block_summary(blocks):
    """Each tag's mean block median by the candidate that ran before it."""
    by = {}
    for _, tag, prev, med in blocks:
        by.setdefault((tag, prev), []).append(med)
    return {f"{t}<-{p}": (round(statistics.mean(v), 4), len(v)) for (t, p), v in sorted(by.items())}


# ---------------------------------------------------------------- kiln via ctypes
class Kiln:
    def __init__(self, lib):
        self.lib = ctypes.CDLL(lib)
        L = self.lib
        L.kiln_last_error.restype = ctypes.c_char_p
        L.kiln_engine_load_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.kiln_context_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        L.kiln_context_set_input_shape.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                                   ctypes.POINTER(ctypes.c_int64)]
        L.kiln_context_set_tensor_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                      ctypes.c_void_p]
        L.kiln_context_enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        L.kiln_context_tensor_shape.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                ctypes.POINTER(ctypes.c_int64)]
        L.kiln_engine_tensor_dtype.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        L.kiln_context_destroy.argtypes = [ctypes.c_void_p]
        L.kiln_engine_destroy.argtypes = [ctypes.c_void_p]

    def check(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what}: {self.lib.kiln_last_error().decode()}")

    def load(self, plan):
        e = ctypes.c_void_p()
        self.check(self.lib.kiln_engine_load_file(plan.encode(), ctypes.byref(e)), "load")
        c = ctypes.c_void_p()
        self.check(self.lib.kiln_context_create(e, ctypes.byref(c)), "context")
        return e, c

    def bind(self, ctx, inputs, out_name, out_dtype, device="cuda"):
        for k, t in inputs.items():
            dims = (ctypes.c_int64 * t.dim())(*t.shape)
            self.check(self.lib.kiln_context_set_input_shape(ctx, k.encode(), t.dim(), dims),
                       f"shape {k}")
            self.check(self.lib.kiln_context_set_tensor_address(ctx, k.encode(),
                                                                ctypes.c_void_p(t.data_ptr())),
                       f"address {k}")
        dims = (ctypes.c_int64 * 8)()
        r = self.lib.kiln_context_tensor_shape(ctx, out_name.encode(), dims)
        if r < 0:
            raise RuntimeError("output shape: " + self.lib.kiln_last_error().decode())
        out = torch.empty(tuple(dims[:r]), dtype=out_dtype, device=device)
        self.check(self.lib.kiln_context_set_tensor_address(ctx, out_name.encode(),
                                                            ctypes.c_void_p(out.data_ptr())),
                   "address out")
        return out

    def enqueue(self, ctx):
        st = self.lib.kiln_context_enqueue(ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if st != 0:
            raise RuntimeError("enqueue: " + self.lib.kiln_last_error().decode())


KILN_DTYPES = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16}


def shape_spec(name, batch):
    return f"input:{batch}x3x224x224" if name == "resnet50" else \
        f"input_ids:{batch}x128,attention_mask:{batch}x128"


def profile_plan(cli, name, plan, shapes, folder):
    """kiln exec's per-layer profile of `plan` at `shapes` (batch 64) and kiln
    inspect's listing of it, into folder/<name>_b64_profile.txt and
    folder/<name>_inspect.txt."""
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ)
    if os.environ.get("KILN_CLI_LIBS"):
        env["LD_LIBRARY_PATH"] = os.environ["KILN_CLI_LIBS"] + ":" + env.get("LD_LIBRARY_PATH", "")
    runs = {"b64_profile": [cli, "exec", f"--loadEngine={plan}", f"--shapes={shapes}", "--backend=cuda",
                            "--dumpProfile", "--separateProfileRun", "--iterations=20", "--duration=0"],
            "inspect": [cli, "inspect", plan]}
    for tag, cmd in runs.items():
        with open(os.path.join(folder, f"{name}_{tag}.txt"), "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0:
            log(f"{name}: {tag} exited with {rc}")


def build_plan(cli, onnx_path, plan, spec, precision, cache, opt, float_inputs=True):
    """One dynamic-batch plan (1..64) tuned at batch `opt`, as a TensorRT user
    builds a latency plan (opt 1) and a throughput plan (opt 64): tactics are
    timed at the opt shape. spec(batch) gives the --shapes string;
    float_inputs=False for models whose inputs are token ids (no input type
    is asked for then: trtexec's one format for a single input names its
    type, and an int64 input cannot be bound as float16)."""
    cmd = [cli, "exec", f"--onnx={onnx_path}", f"--saveEngine={plan}", "--skipInference",
           f"--minShapes={spec(1)}", f"--optShapes={spec(opt)}",
           f"--maxShapes={spec(64)}", "--backend=cuda", f"--timingCacheFile={cache}"]
    if precision == "fp16":
        # as the FP16 PyTorch models: float16 in and out (trtexec's I/O
        # formats), so no conversion from and back to float32 is timed
        cmd += ["--fp16", "--outputIOFormats=fp16:chw"]
        if float_inputs:
            cmd += ["--inputIOFormats=fp16:chw"]
    return run_build(cmd)


def run_build(cmd):
    """Runs a kiln CLI build (KILN_CLI_LIBS: library folders for the CLI
    process only); its wall time in seconds, or RuntimeError with the log's
    tail."""
    env = dict(os.environ)
    extra = os.environ.get("KILN_CLI_LIBS")
    if extra:
        env["LD_LIBRARY_PATH"] = extra + ":" + env.get("LD_LIBRARY_PATH", "")
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError("kiln build failed:\n" + (p.stdout + p.stderr)[-3000:])
    return dt


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing blocks per candidate")
    ap.add_argument("--rounds-b64", type=int, default=10,
                    help="interleaved blocks at batch 64, where the power cap makes one block's "
                         "figure depend on the GPU's state: more blocks, a steadier median")
    ap.add_argument("--sustain-ms", type=float, default=0.0,
                    help="before each timed block, this many ms of the candidate's own untimed "
                         "runs (its steady state under load); 0: two warm-up runs only")
    ap.add_argument("--also-sustain-ms", type=float, default=0.0,
                    help="at batch 64, time the same plans a second time with this --sustain-ms "
                         "(logged as <tag>_b64_sustained, for comparing the two methods)")
    ap.add_argument("--work", default="/tmp/kiln_bench")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", default=None)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    os.makedirs(a.work, exist_ok=True)
    kiln = Kiln(a.kiln)
    kstream = torch.cuda.Stream()
    dev = torch.cuda.get_device_name(0)
    rows = []
    for name in a.models.split(","):
        log(f"== {name}")
        model, _ = make_resnet50(0) if name == "resnet50" else make_bert(0)
        onnx_path = os.path.join(a.work, f"{name}.onnx")
        export(name, model if name == "resnet50" else make_bert(0, "eager")[0], onnx_path)
        try:  # the exported file against the model, through ONNX Runtime (CPU)
            import onnxruntime as ort
            xs = inputs_for(name, 2, "cpu", seed=7)
            sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
            got = sess.run(None, {k: v.numpy() for k, v in xs.items()})[0]
            with torch.no_grad():
                want = model(xs["input"]) if name == "resnet50" else \
                    model(input_ids=xs["input_ids"], attention_mask=xs["attention_mask"]).last_hidden_state
            row_fid = rel_err(torch.from_numpy(got), want)
            log(f"{name}: ONNX Runtime on the exported file vs PyTorch FP32: {row_fid:.2e}")
        except Exception as ex:  # noqa: BLE001 - a missing ORT only loses this check
            row_fid = float("nan")
            log(f"{name}: export check skipped: {ex}")
        plans = {b: os.path.join(a.work, f"{name}_opt{b}.plan") for b in (1, 64)}
        plan = plans[64]
        cache = os.path.join(a.work, f"{name}.cache")
        if os.path.exists(cache):
            os.remove(cache)
        row = {"model": name, "export_err": row_fid}
        spec = lambda b, name=name: shape_spec(name, b)  # noqa: E731
        try:  # the throughput plan cold, again with the cache; then the latency plan
            row["build_cold_s"] = build_plan(a.cli, onnx_path, plan, spec, a.precision, cache, 64)
            row["build_cached_s"] = build_plan(a.cli, onnx_path, plan, spec, a.precision, cache, 64)
            row["build_b1_s"] = build_plan(a.cli, onnx_path, plans[1], spec, a.precision, cache, 1)
        except RuntimeError as ex:
            log(str(ex))
            row["error"] = str(ex).splitlines()[-1][:200]
            rows.append(row)
            continue
        if a.profile:
            profile_plan(a.cli, name, plan, shape_spec(name, 64), a.profile)
        m32 = model.cuda().float()
        mh = copy.deepcopy(m32).half()
        if name == "resnet50":  # PyTorch's fastest convolution layout
            mh = mh.to(memory_format=torch.channels_last)
        for batch in (1, 64):
            eng, ctx = kiln.load(plans[batch])
            x = inputs_for(name, batch, "cuda")
            with torch.no_grad():
                if name == "resnet50":
                    ref = m32(x["input"])
                else:
                    ref = m32(input_ids=x["input_ids"], attention_mask=x["attention_mask"]).last_hidden_state
            # kiln
            out_dtype = KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, b"output"), torch.float32)
            # inputs in the types the plan binds (float16 with --inputIOFormats)
            xk = {k: v.to(KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, k.encode()), v.dtype))
                  if v.is_floating_point() else v for k, v in x.items()}
            out = kiln.bind(ctx, xk, "output", out_dtype)
            kiln.enqueue(ctx)
            torch.cuda.synchronize()
            row[f"kiln_err_b{batch}"] = rel_err(out, ref)
            # PyTorch eager fp16, and torch.compile(mode="reduce-overhead")
            xh = {k: (v.half() if v.is_floating_point() else v) for k, v in x.items()}
            if name == "resnet50":
                xh["input"] = xh["input"].contiguous(memory_format=torch.channels_last)
            fwd = (lambda: mh(xh["input"])) if name == "resnet50" else \
                (lambda: mh(input_ids=xh["input_ids"], attention_mask=xh["attention_mask"]))
            # kiln on a stream of its own, as a deployment enqueues (and
            # trtexec times): on the legacy default stream kiln runs on a
            # private stream and synchronizes before it returns, as TensorRT does
            cands = [("kiln", lambda: kiln.enqueue(ctx), kstream, 20), ("eager", fwd, None, 10)]
            with torch.no_grad():
                if not a.no_compile:
                    cm = torch.compile(mh, mode="reduce-overhead")
                    cf = (lambda: cm(xh["input"])) if name == "resnet50" else \
                        (lambda: cm(input_ids=xh["input_ids"], attention_mask=xh["attention_mask"]))
                    cands.append(("compile", cf, None, 30))
                rounds = a.rounds_b64 if batch == 64 else a.rounds
                blocks = []
                res = time_interleaved(cands, rounds, max(1, a.iters // a.rounds), a.sustain_ms, blocks)
                row[f"blocks_b{batch}_by_predecessor"] = block_summary(blocks)
                row[f"paired_b{batch}"] = paired_ratios(blocks)
                if batch == 64:  # throughput as runs back to back, the same schedule
                    bblocks = []
                    res3 = time_interleaved(cands, rounds, max(1, a.iters // a.rounds), a.sustain_ms,
                                            bblocks, burst=True)
                    for tag, (med, p99, lo, hi) in res3.items():
                        row[f"{tag}_b64_burst"] = (med, lo, hi)
                    row["paired_b64_burst"] = paired_ratios(bblocks)
                    row["blocks_b64_burst_by_predecessor"] = block_summary(bblocks)
                if batch == 64 and a.also_sustain_ms > 0:
                    blocks = []
                    res2 = time_interleaved(cands, rounds, max(1, a.iters // a.rounds),
                                            a.also_sustain_ms, blocks)
                    for tag, (med, p99, lo, hi) in res2.items():
                        row[f"{tag}_b64_sustained"] = (med, p99, lo, hi)
                    row["blocks_b64_sustained_by_predecessor"] = block_summary(blocks)
                    best = min(res2[t][0] for t in res2 if t != "kiln")
                    log(f"| {name} | b64 sustained {a.also_sustain_ms:.0f} ms: kiln {res2['kiln'][0]:.3f} ms, "
                        f"best torch {best:.3f} ms, ratio {best / res2['kiln'][0]:.3f} |")
            for tag, (med, p99, lo, hi) in res.items():
                row[f"{tag}_b{batch}"] = (med, p99)
                row[f"{tag}_b{batch}_round_medians"] = (lo, hi)
            row[f"kiln_b{batch}_default_stream"] = time_cuda(lambda: kiln.enqueue(ctx), a.iters, 20)
            log(row)
            kiln.lib.kiln_context_destroy(ctx)
            kiln.lib.kiln_engine_destroy(eng)
        rows.append(row)
    # table
    lines = [f"device: {dev}; torch {torch.__version__}; CUDA {torch.version.cuda}; "
             f"cuDNN {torch.backends.cudnn.version()}; precision {a.precision}", "",
             "| model | metric | kiln | eager | compile (reduce-overhead) | kiln/best torch |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | build failed | {r['error']} | | | |")
            continue
        for batch in (1, 64):
            k, e = r[f"kiln_b{batch}"], r[f"eager_b{batch}"]
            c = r.get(f"compile_b{batch}", (float("nan"), float("nan")))
            best = min(e[0], c[0]) if c[0] == c[0] else e[0]
            if batch == 1:
                lines.append(f"| {r['model']} | b1 median latency ms | {k[0]:.3f} (p99 {k[1]:.3f}) | "
                             f"{e[0]:.3f} | {c[0]:.3f} | {k[0] / best:.2f} |")
            else:
                unit = "img/s" if r["model"] == "resnet50" else "seq/s"
                tk, te, tc = 64e3 / k[0], 64e3 / e[0], 64e3 / c[0] if c[0] == c[0] else float("nan")
                bt = max(te, tc) if tc == tc else te
                lines.append(f"| {r['model']} | b64 throughput {unit} | {tk:.0f} | {te:.0f} | {tc:.0f} | "
                             f"{tk / bt:.2f} |")
        kb = r.get("kiln_b64_burst")
        if kb:  # the same throughput with each block's runs enqueued back to back
            unit = "img/s" if r["model"] == "resnet50" else "seq/s"
            eb, cb = r["eager_b64_burst"], r.get("compile_b64_burst", (float("nan"),) * 3)
            tk, te, tc = 64e3 / kb[0], 64e3 / eb[0], 64e3 / cb[0] if cb[0] == cb[0] else float("nan")
            bt = max(te, tc) if tc == tc else te
            pb = r.get("paired_b64_burst")
            lines.append(f"| {r['model']} | b64 throughput {unit}, runs back to back | {tk:.0f} | {te:.0f} | "
                         f"{tc:.0f} | {tk / bt:.2f}" + (f"; round by round {1 / pb[0]:.2f} "
                                                       f"({1 / pb[2]:.2f}-{1 / pb[1]:.2f})" if pb else "") + " |")
        for batch in (1, 64):
            pr = r.get(f"paired_b{batch}")
            if pr:  # per round: b1 kiln/best latency, b64 kiln/best throughput
                inv = (lambda x: x) if batch == 1 else (lambda x: 1.0 / x)
                vals = sorted(inv(x) for x in pr)
                lines.append(f"| {r['model']} | b{batch} ratio round by round: median (range) | | | | "
                             f"{inv(pr[0]):.2f} ({vals[0]:.2f}-{vals[2]:.2f}) |")
        lines.append(f"| {r['model']} | accuracy vs fp32 (b1, b64) | {r['kiln_err_b1']:.2e}, "
                     f"{r['kiln_err_b64']:.2e} | | | |")
        lines.append(f"| {r['model']} | export check: ORT on the ONNX file vs PyTorch FP32 | "
                     f"{r['export_err']:.2e} | | | |")
        lines.append(f"| {r['model']} | build s (opt 64: cold, cached; opt 1) | {r['build_cold_s']:.1f}, "
                     f"{r['build_cached_s']:.1f}; {r['build_b1_s']:.1f} | | | |")
    text = "\n".join(lines)
    log(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
