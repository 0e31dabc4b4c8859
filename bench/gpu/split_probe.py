#!/usr/bin/env python3
"""split_probe.py - would a batch split over streams pay? One BERT-base plan
(dynamic batch 1..64, from bench_models.py) run as one context at batch 64,
and as 2 or 4 contexts of 32 or 16 rows on streams of their own, forked from
and joined to the timing stream. Timed in interleaved blocks under CUDA
events, as bench_models.py times; prints per-batch medians and the ratio to
the single context.

Usage: split_probe.py --kiln libkiln.so --plan /tmp/kiln_bench/bert_opt64.plan
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import KILN_DTYPES, Kiln, inputs_for, time_interleaved  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=40)
    a = ap.parse_args()
    kiln = Kiln(a.kiln)
    eng, _ = kiln.load(a.plan)
    x = inputs_for("bert", 64, "cuda")
    out_dtype = KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, b"output"), torch.float32)
    main_stream = torch.cuda.Stream()
    cands = []
    for parts in (1, 2, 4):
        rows = 64 // parts
        ctxs, streams = [], []
        for p in range(parts):
            c = ctypes.c_void_p()
            kiln.check(kiln.lib.kiln_context_create(eng, ctypes.byref(c)), "context")
            xs = {k: v[p * rows:(p + 1) * rows] for k, v in x.items()}
            kiln.bind(c, xs, "output", out_dtype)
            ctxs.append(c)
            streams.append(torch.cuda.Stream())

        def run(ctxs=ctxs, streams=streams):
            cur = torch.cuda.current_stream()
            if len(ctxs) == 1:
                kiln.enqueue(ctxs[0])
                return
            ev = torch.cuda.Event()
            ev.record(cur)
            for c, s in zip(ctxs, streams):
                s.wait_event(ev)
                with torch.cuda.stream(s):
                    kiln.enqueue(c)
            for s in streams:
                cur.wait_stream(s)
        cands.append((f"{parts}x{rows}", run, main_stream, 20))
    res = time_interleaved(cands, a.rounds, a.iters)
    base = res["1x64"][0]
    for tag, (med, p99, lo, hi) in res.items():
        print(f"{tag:6s} median {med:.3f} ms a batch of 64 (p99 {p99:.3f}, round medians {lo:.3f}-{hi:.3f})"
              f"  {64 / med * 1000:.0f} seq/s  x{base / med:.3f}")


if __name__ == "__main__":
    main()
