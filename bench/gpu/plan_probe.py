#!/usr/bin/env python3
"""plan_probe.py - BERT-base plans (dynamic batch 1..64, as bench_models.py
builds them) against one another at batch 64, timed in interleaved blocks
under CUDA events as bench_models.py times them, so that every candidate
sees the GPU in the same clock and power state. Prints each candidate's
median time a batch and its ratio to the first.

Candidates: each --plan TAG=PATH[@VAR=VALUE,...] run as one context, the
variables set in the environment around each of its enqueues (kiln reads
its KILN_* switches when it records the CUDA graph); with --split, the first
plan also as 2 and 4 contexts of 32 and 16 rows on streams of their own
(forked from and joined to the timing stream): would a batch split over
streams pay? With --seq, the first plan also as 2 and 4 contexts of 32 and
16 rows enqueued one after another on the timing stream: would a batch run
in parts small enough for their activations to stay in L2 pay? After the
timing, each candidate's output is compared with the first's.

Usage: plan_probe.py --kiln libkiln.so --plan a=/tmp/a.plan [--plan b=/tmp/b.plan] [--split] [--seq]
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import KILN_DTYPES, Kiln, inputs_for, time_interleaved  # noqa: E402


def bind_rows(kiln, eng, ctx, x):
    """ctx bound to the inputs x, with an output of the engine's type (returned)."""
    return kiln.bind(ctx, x, "output",
                     KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, b"output"), torch.float32))


def contexts(kiln, eng, x, parts):
    """`parts` contexts of the engine, each bound to its rows of x."""
    rows = 64 // parts
    ctxs = []
    for p in range(parts):
        c = ctypes.c_void_p()
        kiln.check(kiln.lib.kiln_context_create(eng, ctypes.byref(c)), "context")
        bind_rows(kiln, eng, c, {k: v[p * rows:(p + 1) * rows] for k, v in x.items()})
        ctxs.append(c)
    return ctxs


def runner(kiln, ctxs, seq=False):
    streams = [torch.cuda.Stream() for _ in ctxs]

    def run():
        if len(ctxs) == 1 or seq:
            for c in ctxs:
                kiln.enqueue(c)
            return
        cur = torch.cuda.current_stream()
        ev = torch.cuda.Event()
        ev.record(cur)
        for c, s in zip(ctxs, streams):
            s.wait_event(ev)
            with torch.cuda.stream(s):
                kiln.enqueue(c)
        for s in streams:
            cur.wait_stream(s)
    return run


def with_env(run, env):
    def f():
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            run()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--plan", action="append", required=True, help="TAG=PATH[@VAR=VALUE,...]")
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--seq", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=40)
    a = ap.parse_args()
    kiln = Kiln(a.kiln)
    x = inputs_for("bert", 64, "cuda")
    timing_stream = torch.cuda.Stream()
    cands = []
    outs = {}
    for i, spec in enumerate(a.plan):
        tag, path = spec.split("=", 1)
        path, _, env = path.partition("@")
        eng, ctx = kiln.load(path)
        outs[tag] = bind_rows(kiln, eng, ctx, x)
        run = runner(kiln, [ctx])
        if env:
            run = with_env(run, dict(kv.split("=", 1) for kv in env.split(",")))
        cands.append((tag, run, timing_stream, 20))
        if a.split and i == 0:
            for parts in (2, 4):
                cands.append((f"{tag}/{parts}x{64 // parts}", runner(kiln, contexts(kiln, eng, x, parts)),
                              timing_stream, 20))
        if a.seq and i == 0:
            for parts in (2, 4):
                cands.append((f"{tag}/seq{parts}x{64 // parts}",
                              runner(kiln, contexts(kiln, eng, x, parts), seq=True), timing_stream, 20))
    res = time_interleaved(cands, a.rounds, a.iters)
    # each plan candidate's output against the first's (same plan, same inputs)
    torch.cuda.synchronize()
    first = next(iter(outs))
    for tag, o in outs.items():
        d = (o.float() - outs[first].float()).abs().max().item()
        print(f"{tag:14s} output max |diff| to {first}: {d:.3g}")
    base = res[cands[0][0]][0]
    for tag, (med, p99, lo, hi) in res.items():
        print(f"{tag:14s} median {med:.3f} ms a batch of 64 (p99 {p99:.3f}, round medians {lo:.3f}-{hi:.3f})"
              f"  {64 / med * 1000:.0f} seq/s  x{base / med:.3f}")


if __name__ == "__main__":
    main()
