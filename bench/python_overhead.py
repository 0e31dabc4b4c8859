#!/usr/bin/env python3
"""What calling kiln from Python adds per run: execute_async_v3 from Python
against kiln_context_enqueue called in a C loop, on a tiny plan (one Add of
two 8-element float vectors, so the run itself is about nothing).

    PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py [--backend cuda]
        [--iterations 20000] [--repeats 7] [--markdown out.md]

Per repeat: N calls of each kind back to back, time per call; the figures are
the medians over repeats. "added" is Python's time per call minus C's. On
the GPU the calls enqueue on one stream and the timing ends after a
synchronize, so "added" is host time the Python call adds (the issue's
target: <= 5 us)."""
import argparse
import platform
import statistics
import sys
import time

import numpy as np

import kiln


def tiny_engine(backend):
    builder = kiln.Builder(kiln.Logger(kiln.Logger.ERROR))
    net = builder.create_network()
    net.add_input("a", kiln.float32, (8,))
    net.add_input("b", kiln.float32, (8,))
    net.add_node("Add", ["a", "b"], ["c"], name="add")
    net.mark_output("c")
    config = builder.create_builder_config()
    config.backend = backend
    plan = builder.build_serialized_network(net, config)
    return kiln.Runtime().deserialize_cuda_engine(plan)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()

    engine = tiny_engine(args.backend)
    ctx = engine.create_execution_context()
    ctx.threads = 1
    gpu = engine.backend != "cpu"
    stream = engine.create_stream() if gpu else None
    bufs = []
    for name in ("a", "b", "c"):
        if gpu:
            p = engine.alloc(32)
            bufs.append(p)
            ctx.set_tensor_address(name, p)
        else:
            arr = np.ones(8, np.float32)
            bufs.append(arr)
            ctx.set_tensor_address(name, arr)
    n = args.iterations
    for _ in range(200):
        ctx.execute_async_v3(stream)
    ctx.synchronize(stream)
    if not gpu:
        assert np.all(bufs[2] == 2.0)

    c_times, py_times, raw_times = [], [], []
    run = ctx.execute_async_v3
    raw = ctx._c.enqueue
    for _ in range(args.repeats):
        c_times.append(ctx._c.bench_enqueue(n, stream))
        ctx.synchronize(stream)
        t0 = time.perf_counter()
        for _ in range(n):
            run(stream)
        ctx.synchronize(stream)
        py_times.append((time.perf_counter() - t0) / n)
        t0 = time.perf_counter()
        for _ in range(n):
            raw(stream)
        ctx.synchronize(stream)
        raw_times.append((time.perf_counter() - t0) / n)
    if gpu:
        for p in bufs:
            engine.free(p)
        engine.destroy_stream(stream)

    c_us = statistics.median(c_times) * 1e6
    py_us = statistics.median(py_times) * 1e6
    raw_us = statistics.median(raw_times) * 1e6
    rows = [
        ("kiln_context_enqueue, C loop", c_us, 0.0),
        ("IExecutionContext.execute_async_v3, Python loop", py_us, py_us - c_us),
        ("kiln._kiln.Context.enqueue (the extension alone)", raw_us, raw_us - c_us),
    ]
    lines = [f"backend {engine.backend}, {n} calls x {args.repeats} repeats, median per call; "
             f"Python {platform.python_version()}, {platform.machine()}",
             "", "| call | us per call | added vs C |", "|---|---|---|"]
    for label, us, added in rows:
        lines.append(f"| {label} | {us:.3f} | {added:+.3f} |")
    lines.append("")
    lines.append(f"spread (min..max over repeats): C {min(c_times)*1e6:.3f}..{max(c_times)*1e6:.3f}, "
                 f"Python {min(py_times)*1e6:.3f}..{max(py_times)*1e6:.3f} us")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    added = py_us - c_us
    print(f"added per call: {added:.3f} us ({'within' if added <= 5.0 else 'OVER'} the 5 us target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
