#!/usr/bin/env python3
"""instr_count.py - user-space instructions (where the PMU is exposed) and CPU time per inference, kiln
and ONNX Runtime, counted with `perf stat` so that a loaded machine (other
processes on the same cores) does not change the figure the way it changes
wall time. Each side runs in its own process twice, with --runs 0 and with
--runs N (same build, load and warm-up); the instruction difference over N
is one run's cost. CPU time is the process's (all threads, time.process_time)
around the N timed runs only, so build-time noise stays out. Meant for one
thread (with more, spinning threads add to both).

  bench/cpu/instr_count.py --lib build/libkiln.so --models /tmp/m \
      --which zoo_resnet50,zoo_squeezenet --runs 30 [--batch 8] [--env KILN_CPU_NCHW=1]

Prints a Markdown table: model, kiln and ORT instructions (10^9) and task
clock (ms) per run, and the ratios kiln/ORT.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def child(args):
    import numpy as np
    import onnxruntime as ort
    import cpu_bench as cb
    model = args.which
    path = cb.zoo_model(model[4:], args.models) if model.startswith("zoo_") else \
        os.path.join(args.models, model + ".onnx")
    feeds = cb.make_inputs(model, args.batch, np.random.default_rng(0), path)
    if args.side == "kiln":
        km = cb.KilnModel(cb.Kiln(args.lib), path, feeds, args.threads)
        run = km.run
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)  # noqa: E731
    import time
    for _ in range(3):
        run()
    c0 = time.process_time()  # CPU time of every thread of this process
    for _ in range(args.runs):
        run()
    print("cpu_ms_per_run %.4f" % ((time.process_time() - c0) * 1e3 / max(args.runs, 1)))


def perf(args, side, runs, env):
    cmd = ["perf", "stat", "-x,", "-e", "instructions:u,task-clock", sys.executable,
           os.path.abspath(__file__), "--child", "--side", side, "--runs", str(runs),
           "--which", args.which, "--lib", args.lib, "--models", args.models,
           "--threads", str(args.threads), "--batch", str(args.batch)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=True)
    vals = {}
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) > 3 and f[0].replace(".", "").isdigit():
            vals[f[2].split(":")[0]] = float(f[0])
    # instructions are "<not supported>" where the VM exposes no PMU: None
    cpu = float(p.stdout.split("cpu_ms_per_run")[1].split()[0])
    return vals.get("instructions"), cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/libkiln.so")
    ap.add_argument("--models", default="/tmp/models")
    ap.add_argument("--which", default="zoo_resnet50")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1, help="batch of the inputs (dynamic-batch models)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for kiln's process")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--side", choices=["kiln", "ort"])
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    env = dict(os.environ)
    env.setdefault("GOMP_SPINCOUNT", "1000")
    kenv = dict(env)
    for kv in args.env:
        k, v = kv.split("=", 1)
        kenv[k] = v
    models = args.which.split(",")
    print("| model | kiln Ginstr/run | ORT Ginstr/run | instr kiln/ORT | kiln CPU ms/run |"
          " ORT CPU ms/run | CPU kiln/ORT |")
    print("|---|---|---|---|---|---|---|")
    for m in models:
        args.which = m
        res = {}
        for side, e in (("kiln", kenv), ("ort", env)):
            i0, _ = perf(args, side, 0, e)
            i1, cpu = perf(args, side, args.runs, e)
            ins = (i1 - i0) / args.runs / 1e9 if i0 is not None and i1 is not None else None
            res[side] = (ins, cpu)
        (ki, kt), (oi, ot) = res["kiln"], res["ort"]
        if ki is None or oi is None:
            instr = "n/a | n/a | n/a"
        else:
            instr = "%.3f | %.3f | %.2f" % (ki, oi, ki / oi)
        print("| %s | %s | %.2f | %.2f | %.2f |" % (m, instr, kt, ot, kt / ot))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
