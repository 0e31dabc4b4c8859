#!/usr/bin/env python3
"""busy_bench.py - kiln beside ONNX Runtime on a shared CPU: each timed
quiet and beside a busy process, printing how much each slows down.

The model is a small ResNet-shaped network made here (onnx.helper, fixed
seed): a 3x3 stem, three stages of two residual blocks (32, 64, 128
channels, stride 2 between stages), global average pool and a classifier,
on 1x3x96x96 (or --model FILE with --shape). kiln runs through its public C
API (bench/cpu_bench.py's ctypes wrapper: parse, build, load, one context);
ORT through its Python API, intra-op threads = kiln's threads, sequential.

The busy process is --busy N processes (default: one per usable CPU), each
a tight arithmetic loop pinned to one CPU of this process's affinity, that
ends on its own after --busy-max seconds if this script dies first. Phases
alternate quiet, busy, quiet, busy...; within a phase kiln and ORT run in
alternating blocks. Each figure is the median over a runtime's runs in all
phases of that kind; slowdown = busy median / quiet median.

Each --config runs in a fresh child process, because libgomp reads its wait
policy once, when it loads with libkiln:
  kiln       what the kiln command sets when the user set no wait policy
             (GOMP_SPINCOUNT=1000, tools/omp_wait.c)
  env        the environment as given
  libgomp    OMP_WAIT_POLICY and GOMP_SPINCOUNT removed: libgomp's own spin
             (300000 pause loops, milliseconds)
  passive    OMP_WAIT_POLICY=passive
  spin=N     GOMP_SPINCOUNT=N (libgomp spins N pause loops, then sleeps)
  c          kiln in a plain C program that embeds libkiln.so
             (bench/cpu/embed_bench.c, built here with cc against --lib)
             with no wait-policy variable at all (OMP_WAIT_POLICY,
             GOMP_SPINCOUNT and KILN_SPIN_COUNT removed): what a program
             linking libkiln gets by default
  c-pool=N   the same with KILN_SPIN_COUNT=N (kiln's pool spins N pause
             loops before it sleeps; a large N is a spinning control)
  c-spin=N   the C program with GOMP_SPINCOUNT=N (libgomp, which oneDNN's
             tactics run on, spins N pause loops, then sleeps)
In the c configs ORT runs in the driving Python process as before, in
alternating blocks with the C program, which times its own runs.
Usage:
  bench/cpu/busy_bench.py [--lib build/libkiln.so] [--threads N] [--runs 30]
                          [--phases 4] [--busy N] [--config kiln,libgomp,c,...]
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_model(path, size=96, seed=0):
    """A small ResNet-shaped network, FP32, random weights (fixed seed)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def name(p):
        count[0] += 1
        return "%s%d" % (p, count[0])

    def conv(x, cin, cout, k, stride, relu=True):
        w, b, y = name("w"), name("b"), name("conv")
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5)
            .astype(np.float32), w))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), b))
        nodes.append(helper.make_node("Conv", [x, w, b], [y], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return y
        r = name("relu")
        nodes.append(helper.make_node("Relu", [y], [r]))
        return r

    def block(x, cin, cout, stride):
        y = conv(x, cin, cout, 3, stride)
        y = conv(y, cout, cout, 3, 1, relu=False)
        sc = x if stride == 1 and cin == cout else conv(x, cin, cout, 1, stride, relu=False)
        s, r = name("add"), name("relu")
        nodes.append(helper.make_node("Add", [y, sc], [s]))
        nodes.append(helper.make_node("Relu", [s], [r]))
        return r

    x = conv("input", 3, 32, 3, 1)
    cin = 32
    for i, c in enumerate((32, 64, 128)):
        x = block(x, cin, c, 1 if i == 0 else 2)
        x = block(x, c, c, 1)
        cin = c
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((cin, 10)) * 0.1).astype(np.float32), "fc_w"))
    nodes.append(helper.make_node("MatMul", ["flat", "fc_w"], ["logits"]))
    g = helper.make_graph(nodes, "busy_resnet", [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, path)


# ---------------- the busy process ----------------

SPIN = r"""
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.monotonic() + float(sys.argv[2])
x = 0
while time.monotonic() < end:
    for i in range(20000):
        x = (x * 1103515245 + 12345) & 0xffffffff
"""


class Busy:
    """--busy N spinning processes, pinned round-robin to our CPUs."""

    def __init__(self, n, max_s):
        self.n, self.max_s, self.procs = n, max_s, []

    def start(self):
        cpus = sorted(os.sched_getaffinity(0))
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(cpus[i % len(cpus)]),
                                        str(self.max_s)]) for i in range(self.n)]
        time.sleep(0.3)  # let them reach the loop

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()
        self.procs = []
        time.sleep(0.3)


# ---------------- one configuration, in a child process ----------------

class Embedded:
    """kiln in the C program bench/cpu/embed_bench.c, driven over a pipe; it
    times its own runs, so the pipe is not in the figures."""

    def __init__(self, exe, args, x):
        import numpy as np
        self.inp = "/tmp/kiln_busy_input_%d.f32" % os.getpid()
        x.astype("<f4").tofile(self.inp)
        self.p = subprocess.Popen([exe, args.model, args.input, args.shape, str(args.threads),
                                   self.inp], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        if self.p.stdout.readline().strip() != "ready":
            raise RuntimeError("embed_bench did not start")
        self.out = np.array([float(v) for v in self.p.stdout.readline().split()[1:]], np.float32)

    def runs(self, n):
        self.p.stdin.write("%d\n" % n)
        self.p.stdin.flush()
        return [float(v) for v in self.p.stdout.readline().split()]

    def close(self):
        try:
            self.p.stdin.write("q\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()
        os.unlink(self.inp)


def worker(args):
    import numpy as np
    import onnxruntime as ort
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from cpu_bench import Kiln, KilnModel, timed

    rng = np.random.default_rng(1)
    shape = [int(d) for d in args.shape.split("x")]
    feeds = {args.input: rng.standard_normal(shape).astype(np.float32)}
    if args.embed:
        km = Embedded(args.embed, args, feeds[args.input])
        km.run = lambda: km.runs(1)
        kiln_block = km.runs
    else:
        km = KilnModel(Kiln(args.lib), args.model, feeds, args.threads)
        kiln_block = None
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    km.run()
    ref = sess.run(None, feeds)[0]
    got = km.out.reshape(ref.shape) if args.embed else next(iter(km.outputs.values()))
    err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    for _ in range(args.warmup):
        km.run()
        sess.run(None, feeds)
    busy = Busy(args.busy, args.busy_max)
    times = {("kiln", 0): [], ("ort", 0): [], ("kiln", 1): [], ("ort", 1): []}
    loads = {0: [], 1: []}
    per_phase = max(1, args.runs // max(1, args.phases // 2))
    try:
        for ph in range(args.phases):
            b = ph % 2
            if b:
                busy.start()
            loads[b].append(os.getloadavg()[0])
            done = {"kiln": 0, "ort": 0}
            while min(done.values()) < per_phase:
                for who, fn in (("kiln", km.run), ("ort", lambda: sess.run(None, feeds))):
                    fn()  # one untimed run: wakes that runtime's threads
                    if who == "kiln" and kiln_block:
                        times[(who, b)] += kiln_block(args.block)
                    else:
                        for _ in range(args.block):
                            times[(who, b)].append(timed(fn))
                    done[who] += args.block
            if b:
                busy.stop()
    finally:
        busy.stop()
        km.close()
    med = {"%s_%s" % (w, "busy" if b else "quiet"): statistics.median(v)
           for (w, b), v in times.items()}
    med["error"] = err
    med["load_quiet"] = statistics.mean(loads[0])
    med["load_busy"] = statistics.mean(loads[1]) if loads[1] else 0
    med["runs_each"] = len(times[("kiln", 0)])
    print(json.dumps(med))


def no_policy(env):
    return {k: v for k, v in env.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KILN_SPIN_COUNT")}


# "kiln" is what the kiln command does when the user sets no wait policy
# (tools/omp_wait.c: GOMP_SPINCOUNT=1000), which a program embedding
# libkiln.so, as this one does, sets itself.
CONFIGS = {
    "kiln": lambda env: env if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env
    else dict(env, GOMP_SPINCOUNT="1000"),
    "env": lambda env: env,
    "libgomp": no_policy,
    "passive": lambda env: dict(no_policy(env), OMP_WAIT_POLICY="passive"),
    "c": no_policy,
}


def config_env(cfg, env):
    """The environment of one --config; spin=N sets GOMP_SPINCOUNT=N."""
    if cfg.startswith("spin="):
        env = no_policy(env)
        env["GOMP_SPINCOUNT"] = cfg[5:]
        return env
    if cfg.startswith("c-pool="):
        env = no_policy(env)
        env["KILN_SPIN_COUNT"] = cfg[7:]
        return env
    if cfg.startswith("c-spin="):
        env = no_policy(env)
        env["GOMP_SPINCOUNT"] = cfg[7:]
        return env
    return CONFIGS[cfg](env)


def git_commit():
    try:
        c = subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True)
        dirty = subprocess.call(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", "src"])
        return c.strip() + (" (src modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_embed(lib):
    """Compile bench/cpu/embed_bench.c against the library at `lib`."""
    exe = "/tmp/kiln_embed_bench_%d" % os.getpid()
    libdir = os.path.dirname(os.path.abspath(lib))
    subprocess.check_call([os.environ.get("CC", "cc"), "-O2", "-I", os.path.join(ROOT, "include"),
                           "-o", exe, os.path.join(HERE, "embed_bench.c"), "-L" + libdir,
                           "-lkiln", "-Wl,-rpath," + libdir])
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkiln.so"))
    ap.add_argument("--model", help="an ONNX model with one float input (default: made here)")
    ap.add_argument("--input", default="input")
    ap.add_argument("--shape", default="1x3x96x96")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--runs", type=int, default=30, help="timed runs a runtime and condition")
    ap.add_argument("--phases", type=int, default=4)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--busy", type=int, default=len(os.sched_getaffinity(0)),
                    help="spinning processes beside the runtimes (default: one a CPU)")
    ap.add_argument("--busy-max", type=float, default=300,
                    help="a spinner ends by itself after this many seconds")
    ap.add_argument("--config", default="kiln,libgomp")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--embed", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.model:
        args.model = "/tmp/kiln_busy_resnet.onnx"
        if args.worker is False or not os.path.exists(args.model):
            make_model(args.model, int(args.shape.split("x")[-1]))
    if args.worker:
        worker(args)
        return
    import onnxruntime as ort
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("# kiln and ONNX Runtime beside a busy process")
    print()
    print("- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("- machine: %s, %d CPUs usable (%d online), %s" % (
        cpu, len(os.sched_getaffinity(0)), os.cpu_count(), platform.platform()))
    print("- kiln commit %s, library %s; ONNX Runtime %s; Python %s" % (
        git_commit(), args.lib, ort.__version__, platform.python_version()))
    try:
        ldd = subprocess.check_output(["ldd", args.lib], text=True)
    except (OSError, subprocess.CalledProcessError):
        ldd = ""
    print("- libkiln links oneDNN: %s, libgomp: %s" % (
        "yes" if "libdnnl" in ldd else "no", "yes" if "libgomp" in ldd else "no"))
    print("- model %s, input %s; %d threads each; %d spinning process(es) when busy" % (
        os.path.basename(args.model), args.shape, args.threads, args.busy))
    print("- median of %d timed runs a runtime and condition over %d alternating quiet/busy "
          "phases, blocks of %d" % (args.runs, args.phases, args.block))
    print()
    print("| config | kiln quiet (ms) | kiln busy (ms) | kiln slowdown | ORT quiet (ms) | "
          "ORT busy (ms) | ORT slowdown | kiln slowdown / ORT's | load quiet / busy | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    exe = None
    for cfg in args.config.split(","):
        env = config_env(cfg, dict(os.environ))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--lib", args.lib,
               "--model", args.model, "--input", args.input, "--shape", args.shape,
               "--threads", str(args.threads), "--runs", str(args.runs), "--phases",
               str(args.phases), "--block", str(args.block), "--warmup", str(args.warmup),
               "--busy", str(args.busy), "--busy-max", str(args.busy_max)]
        if cfg == "c" or cfg.startswith(("c-pool=", "c-spin=")):
            exe = exe or build_embed(args.lib)
            cmd += ["--embed", exe]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print("| %s | failed: %s |" % (cfg, out.stderr.strip().splitlines()[-1:]))
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ks = r["kiln_busy"] / r["kiln_quiet"]
        os_ = r["ort_busy"] / r["ort_quiet"]
        print("| %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.2f | %.1f / %.1f | %.1e |" % (
            cfg, r["kiln_quiet"], r["kiln_busy"], ks, r["ort_quiet"], r["ort_busy"], os_,
            ks / os_, r["load_quiet"], r["load_busy"], r["error"]))
        sys.stdout.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    main()
