#!/usr/bin/env python3
"""trace_probe.py - where a BERT-base batch of 64 spends its time under
sustained load: kiln's plan and torch.compile(mode="reduce-overhead") run
back to back for a while (the H200 settles at its power cap), then a few
more batches run under PyTorch's profiler (CUPTI activity records, which
include the kernels, memsets and copies of a CUDA graph replay). Prints, per candidate, the time
a batch, the kernels' busy time and the idle time between them, and the
kernels grouped by kind (GEMM, attention, LayerNorm, elementwise, ...) with
their mean time a batch; `--top` lists the costliest kernel names.

Nsight Compute times one kernel at a time with the GPU otherwise idle (at
boost clocks, no power cap); these are the times inside the batch as the
benchmark runs it.

Usage: trace_probe.py --kiln libkiln.so --plan /tmp/kiln_bench/bert_opt64.plan
       [--plan tag=other.plan ...] [--no-compile] [--batches 10] [--sustain-ms 1500]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import Kiln, burst_time, compiled_bert, event_times, inputs_for, sustain  # noqa: E402
from plan_probe import bind_rows  # noqa: E402

# kernel kinds by name, first match wins
KINDS = [
    ("memset/memcpy", r"^\[mem"),
    ("attention", r"attn|attention|flash|fmha|sdpa|mha"),
    ("gemm", r"gemm|nvjet|xmma|cutlass|sm90_|sm80_|cublas|ampere_|hopper"),
    ("layernorm", r"layer_?norm|_ln_|ln_row|kc_ln|native_layer_norm"),
    ("softmax", r"softmax"),
    ("copy", r"copy|transpose|gather|concat|slice|cast|memcpy|memset"),
    ("elementwise", r"elementwise|ew_|triton_poi|vectorized|unrolled|add|mul|gelu"),
    ("reduction", r"reduce|triton_red|triton_per"),
]


def kind_of(name):
    low = name.lower()
    for k, rx in KINDS:
        if re.search(rx, low):
            return k
    return "other"


def trace(fn, stream, batches, sustain_ms):
    """Kernel records (name, start us, duration us) of `batches` runs of fn
    enqueued back to back on `stream`, after sustain_ms of the same load."""
    sustain(fn, sustain_ms, stream)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with torch.cuda.stream(stream):
            for _ in range(batches):
                fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = json.load(f)
    os.remove(path)
    cats = {"kernel": "", "gpu_memset": "[memset] ", "gpu_memcpy": "[memcpy] "}
    ks = [(cats[e["cat"]] + e["name"], float(e["ts"]), float(e["dur"])) for e in ev.get("traceEvents", [])
          if e.get("cat") in cats and "dur" in e]
    ks.sort(key=lambda k: k[1])
    return ks


def steady(fn, stream, sustain_ms, n=40):
    """In fn's own steady state: the median of n runs each timed alone (the
    benchmark's method), the time a run of n back to back, and the host's
    time inside one call of fn (ms)."""
    sustain(fn, sustain_ms, stream)
    one = statistics.median(event_times(fn, n, 2, stream))
    sustain(fn, sustain_ms, stream)
    burst = burst_time(fn, n, stream)
    host = []
    with torch.cuda.stream(stream):
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    return one, burst, statistics.median(host)


def report(tag, ks, batches, top, sequence=False):
    if not ks:
        print(f"{tag}: no kernel records (CUPTI saw none)")
        return
    span = ks[-1][1] + ks[-1][2] - ks[0][1]
    busy = 0.0
    end = ks[0][1]
    gaps = []
    for name, ts, dur in ks:  # busy = union of the kernels' intervals
        if ts > end:
            gaps.append(ts - end)
        busy += max(0.0, ts + dur - max(ts, end))
        end = max(end, ts + dur)
    per = len(ks) / batches
    print(f"\n== {tag}: {batches} batches, {len(ks)} kernels ({per:.1f} a batch)")
    print(f"   time a batch {span / batches:.1f} us; kernels busy {busy / batches:.1f} us; "
          f"idle between kernels {(span - busy) / batches:.1f} us "
          f"({len(gaps) / batches:.1f} gaps a batch, median {statistics.median(gaps) if gaps else 0:.2f} us)")
    big = []
    end = ks[0][1]
    for i, (name, ts, dur) in enumerate(ks):
        if i:
            big.append((ts - end, ks[i - 1][0], name))
        end = max(end, ts + dur)
    big.sort(reverse=True)
    print("   largest gaps (us, after -> before):")
    for g, a, b in big[:6]:
        print(f"   {g:8.2f}  {a[:60]} -> {b[:60]}")
    if sequence:  # the last batch, kernel by kernel: gap before it, duration
        print("   the last batch, kernel by kernel (gap before, duration, us):")
        per = len(ks) // batches
        last = ks[-per:]
        prev_end = ks[-per - 1][1] + ks[-per - 1][2] if len(ks) > per else last[0][1]
        for name, ts, dur in last:
            print(f"   {ts - prev_end:7.2f} {dur:8.2f}  {name[:90]}")
            prev_end = max(prev_end, ts + dur)
    by_kind, by_name = {}, {}
    for name, _, dur in ks:
        k = kind_of(name)
        by_kind[k] = by_kind.get(k, 0.0) + dur
        n = by_name.setdefault(name, [0, 0.0])
        n[0] += 1
        n[1] += dur
    tot = sum(by_kind.values())
    for k, d in sorted(by_kind.items(), key=lambda x: -x[1]):
        print(f"   {k:12s} {d / batches:9.1f} us a batch  {100 * d / tot:5.1f}% of kernel time")
    print(f"   costliest kernels (count a batch, mean us, us a batch):")
    for name, (c, d) in sorted(by_name.items(), key=lambda x: -x[1][1])[:top]:
        print(f"   {c / batches:6.1f} x {d / c:8.2f} = {d / batches:8.1f}  [{kind_of(name)}] {name[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--plan", action="append", required=True, help="[TAG=]PATH")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--sustain-ms", type=float, default=1500)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    kiln = Kiln(a.kiln)
    x = inputs_for("bert", 64, "cuda")
    stream = torch.cuda.Stream()
    cands = []
    for spec in a.plan:
        tag, _, path = spec.rpartition("=")
        eng, ctx = kiln.load(path)
        bind_rows(kiln, eng, ctx, x)  # BERT's inputs are int64 whatever the plan's precision
        cands.append((tag or "kiln", (lambda c: lambda: kiln.enqueue(c))(ctx)))
    if not a.no_compile:
        cands.append(("compile", compiled_bert(x)))
    print(f"device {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"{a.batches} batches traced after {a.sustain_ms:.0f} ms of each candidate's own load")
    with torch.no_grad():
        print("\nsteady state of each candidate (after its own load): a run timed alone (median), "
              "runs back to back, the host's time in one call (ms)")
        st = {}
        for tag, fn in cands:
            st[tag] = steady(fn, stream, a.sustain_ms)
            print(f"   {tag:10s} alone {st[tag][0]:.3f}  back to back {st[tag][1]:.3f}  host {st[tag][2]:.3f}")
        if len(cands) > 1:
            k, best = cands[0][0], min(cands[1:], key=lambda c: st[c[0]][0])[0]
            print(f"   {best}/{k}: alone {st[best][0] / st[k][0]:.3f}, back to back {st[best][1] / st[k][1]:.3f}")
        for i, (tag, fn) in enumerate(cands):
            report(tag, trace(fn, stream, a.batches, a.sustain_ms), a.batches, a.top, sequence=True)


if __name__ == "__main__":
    main()
