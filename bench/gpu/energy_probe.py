#!/usr/bin/env python3
"""energy_probe.py - what a BERT-base batch of 64 costs in energy at the
H200's power cap, and how much of it is the GEMMs.

At a sustained batch-64 load the GPU sits at its power cap, so the time a
batch takes follows the energy it spends. This probe reads the driver's
energy counter (NVML, millijoules) around seconds of back-to-back runs of:
  kiln        the BERT b64 plan (bench_models.py's, /tmp/kiln_bench)
  compile     torch.compile(mode="reduce-overhead") of the same FP16 model
              (left out with --no-compile)
  kiln_gemm   a kiln plan of BERT-base's 48 GEMMs a batch and nothing else
              (GemmChain below: every op is a GEMM with its epilogue), tuned
              by kiln's builder
  gemm_<t>    the same plan with cuBLASLt tactic <t> forced on every GEMM
              (--variants "lt lt2 ..."; from an edited copy of its timing cache)
  torch_gemm  the same GEMMs through PyTorch's cuBLASLt calls in one CUDA
              graph (cuBLASLt's heuristic algorithms)
and the idle GPU, in interleaved rounds, each window after the candidate's
own load. Per candidate: time a batch, mean power, energy a batch, median SM
clock; then compile / kiln (the benchmark's figure, as energy), kiln_gemm's
share of kiln's energy, and compile / kiln_gemm: the figure kiln would reach
if everything but its GEMMs (attention, LayerNorm, the small kernels) cost
nothing.

Usage: energy_probe.py --kiln libkiln.so --cli kiln [--plan PATH]
       [--seconds 2.5] [--rounds 3] [--variants "lt lt7"] [--no-compile]
"""
import argparse
import copy
import ctypes
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import Kiln, capture_graph, compiled_bert, inputs_for, sustain  # noqa: E402
from plan_probe import bind_rows  # noqa: E402
from trace_probe import trace  # noqa: E402


class Nvml:
    """The few NVML calls this needs, through ctypes (no pynvml on the device)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._ok(self.lib.nvmlInit_v2(), "nvmlInit")
        self.h = ctypes.c_void_p()
        self._ok(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.h)), "handle")

    def _ok(self, st, what):
        if st != 0:
            raise RuntimeError(f"NVML {what}: status {st}")

    def energy_mj(self):
        v = ctypes.c_ulonglong()
        self._ok(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.h, ctypes.byref(v)), "energy")
        return v.value

    def sm_mhz(self):
        v = ctypes.c_uint()
        self._ok(self.lib.nvmlDeviceGetClockInfo(self.h, 1, ctypes.byref(v)), "clock")  # NVML_CLOCK_SM
        return v.value

    def power_limit_w(self):
        v = ctypes.c_uint()
        self._ok(self.lib.nvmlDeviceGetEnforcedPowerLimit(self.h, ctypes.byref(v)), "power limit")
        return v.value / 1e3


class GemmChain(torch.nn.Module):
    """BERT-base's 48 GEMMs a batch with their epilogues and nothing else.
    Each layer's QKV product is an output of its own (in BERT the attention
    reads it); the output projection reads the layer's input in place of the
    attention's output; LayerNorm is left out. Every op is then a GEMM with
    an epilogue, in kiln and in PyTorch alike."""

    def __init__(self, layers=12, hidden=768, ffn=3072):
        super().__init__()
        L, H, F = layers, hidden, ffn
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(H, 3 * H) for _ in range(L))
        self.out = torch.nn.ModuleList(torch.nn.Linear(H, H) for _ in range(L))
        self.ffn1 = torch.nn.ModuleList(torch.nn.Linear(H, F) for _ in range(L))
        self.ffn2 = torch.nn.ModuleList(torch.nn.Linear(F, H) for _ in range(L))
        self.gelu = torch.nn.GELU()
        g = torch.Generator().manual_seed(0)
        for p in self.parameters():  # BERT's initialisation scale
            p.data = torch.randn(p.shape, generator=g) * 0.02

    def forward(self, x):
        qkvs = []
        for q, o, f1, f2 in zip(self.qkv, self.out, self.ffn1, self.ffn2):
            qkvs.append(q(x))
            h = o(x) + x
            x = f2(self.gelu(f1(h))) + h
        return (x, *qkvs)


def torch_gemm_graph(m, x):
    """m's GEMMs through PyTorch's cuBLASLt calls, captured into one CUDA
    graph: bias and GELU in the epilogues; the residual as cuBLASLt's C
    (PyTorch's addmm takes no bias then, so the output projection and FFN2
    run without theirs). Returns the replay and the final output."""
    L = len(m.qkv)
    W = [[lin.weight.t().contiguous() for lin in mods] for mods in (m.qkv, m.out, m.ffn1, m.ffn2)]
    B = [[lin.bias for lin in mods] for mods in (m.qkv, m.out, m.ffn1, m.ffn2)]
    rows = x.shape[0] * x.shape[1]
    x2 = x.reshape(rows, -1)
    dev, dt = x.device, x.dtype
    qkv = [torch.empty(rows, 2304, device=dev, dtype=dt) for _ in range(L)]
    h = torch.empty(rows, 768, device=dev, dtype=dt)
    f = torch.empty(rows, 3072, device=dev, dtype=dt)
    y = [torch.empty(rows, 768, device=dev, dtype=dt) for _ in range(2)]
    try:  # out= for the GELU epilogue call, as in ffn_probe.py
        torch._addmm_activation(B[2][0], x2[:8], W[2][0], use_gelu=True, out=f[:8])
        out_ok = True
    except Exception as e:  # noqa: BLE001
        print("torch_gemm: no out= for _addmm_activation:", e)
        out_ok = False

    def run():
        src = x2
        for l in range(L):
            torch.addmm(B[0][l], src, W[0][l], out=qkv[l])
            torch.addmm(src, src, W[1][l], out=h)
            if out_ok:
                torch._addmm_activation(B[2][l], h, W[2][l], use_gelu=True, out=f)
                ff = f
            else:  # the graph's pool hands the same block back each layer
                ff = torch._addmm_activation(B[2][l], h, W[2][l], use_gelu=True)
            dst = y[l % 2]
            torch.addmm(h, ff, W[3][l], out=dst)
            src = dst

    g = capture_graph(run)
    torch.cuda.synchronize()
    held = (g, W, qkv, h, f, y)  # the graph reads and writes these: they live as long as the replay

    def replay():
        held[0].replay()

    return replay, y[(L - 1) % 2]


def export_gemm_chain(m, onnx_path):
    x = torch.randn(2, 128, 768)
    names = ["output"] + [f"qkv{l}" for l in range(len(m.qkv))]
    torch.onnx.export(m.float().cpu(), (x,), onnx_path, input_names=["input"], output_names=names,
                      opset_version=17, dynamic_axes={n: {0: "batch"} for n in ["input"] + names},
                      dynamo=False)


def build_gemm_plan(cli, onnx_path, path, cache):
    cmd = [cli, "exec", f"--onnx={onnx_path}", f"--saveEngine={path}", "--skipInference",
           "--shapes=input:64x128x768", "--backend=cuda", "--fp16", f"--timingCacheFile={cache}",
           "--inputIOFormats=fp16:chw", "--outputIOFormats=fp16:chw"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("kiln build of the GEMM chain failed:\n" + (p.stdout + p.stderr)[-3000:])
    q = subprocess.run([cli, "inspect", path], capture_output=True, text=True)
    picks = sorted(set(re.findall(r"kiln::MatMul\s+(\S+)", q.stdout)))
    print(f"{os.path.basename(path)} built in {time.time() - t0:.1f} s; GEMM tactics {' '.join(picks)}")


def variant_cache(cache, tactic, out):
    """A copy of `cache` in which every cuBLASLt tactic is `tactic`."""
    with open(cache) as f, open(out, "w") as g:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and re.fullmatch(r"lth?\d*", parts[1]):
                parts[1] = tactic
                line = " ".join(parts) + "\n"
            g.write(line)


def kernel_names(fn, stream, batches=2):
    """(name, count a batch, mean us) of the kernels of `batches` runs of fn."""
    agg = {}
    for name, _, dur in trace(fn, stream, batches, 0):
        a = agg.setdefault(name, [0, 0.0])
        a[0] += 1
        a[1] += dur
    return sorted(((n, c / batches, t / c) for n, (c, t) in agg.items()), key=lambda r: -r[1] * r[2])


def window(nv, fn, stream, seconds):
    """fn back to back on `stream` for `seconds` (synchronizing every 8 runs so
    the host stays close): runs, ms, mJ, the SM clocks sampled meanwhile."""
    clocks, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            clocks.append(nv.sm_mhz())
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        torch.cuda.synchronize()
        e0 = nv.energy_mj()
        t.start()
        ev0.record()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):
                fn()
            n += 8
            torch.cuda.current_stream().synchronize()
        ev1.record()
        ev1.synchronize()
        e1 = nv.energy_mj()
        stop.set()
        t.join()
    ms = ev0.elapsed_time(ev1)
    return n, ms, e1 - e0, statistics.median(clocks) if clocks else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="libkiln.so")
    ap.add_argument("--cli", required=True, help="the kiln executable")
    ap.add_argument("--plan", default="/tmp/kiln_bench/bert_opt64.plan")
    ap.add_argument("--seconds", type=float, default=2.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-ms", type=float, default=600)
    ap.add_argument("--variants", default="", help="cuBLASLt tactics forced on every GEMM of the chain")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    nv = Nvml()
    kiln = Kiln(a.kiln)
    x = inputs_for("bert", 64, "cuda")
    stream = torch.cuda.Stream()
    cands = []
    eng, ctx = kiln.load(a.plan)
    bind_rows(kiln, eng, ctx, x)
    cands.append(("kiln", lambda: kiln.enqueue(ctx)))

    gm = GemmChain()
    W = "/tmp/kiln_bench"
    export_gemm_chain(copy.deepcopy(gm), f"{W}/gemm_chain.onnx")
    cache = f"{W}/gemm_chain.cache"
    if os.path.exists(cache):
        os.remove(cache)
    build_gemm_plan(a.cli, f"{W}/gemm_chain.onnx", f"{W}/gemm_chain.plan", cache)
    plans = [("kiln_gemm", f"{W}/gemm_chain.plan")]
    for t in a.variants.split():
        variant_cache(cache, t, f"{W}/gemm_{t}.cache")
        build_gemm_plan(a.cli, f"{W}/gemm_chain.onnx", f"{W}/gemm_{t}.plan", f"{W}/gemm_{t}.cache")
        plans.append((f"gemm_{t}", f"{W}/gemm_{t}.plan"))
    gx = torch.randn(64, 128, 768, device="cuda").half()
    with torch.no_grad():
        gh = gm.cuda().half()
        ref = gh(gx)[0].float()
        keep = []
        for tag, path in plans:
            geng, gctx = kiln.load(path)
            gout = kiln.bind(gctx, {"input": gx}, "output", torch.float16)
            keep.append(gout)  # the context writes there until the end
            for l in range(len(gh.qkv)):
                q = torch.empty(64, 128, 2304, device="cuda", dtype=torch.float16)
                kiln.check(kiln.lib.kiln_context_set_tensor_address(gctx, f"qkv{l}".encode(),
                                                                    ctypes.c_void_p(q.data_ptr())), "qkv")
                keep.append(q)
            with torch.cuda.stream(stream):
                kiln.enqueue(gctx)
            torch.cuda.synchronize()
            d = ((gout.float() - ref).norm() / ref.norm()).item()
            print(f"{tag} output vs PyTorch FP16 module: relative L2 {d:.2e}")
            cands.append((tag, (lambda c: lambda: kiln.enqueue(c))(gctx)))
        fn, tout = torch_gemm_graph(gh, gx)
        fn()
        torch.cuda.synchronize()
        d = ((tout.float().reshape(ref.shape) - ref).norm() / ref.norm()).item()
        print(f"torch_gemm output vs PyTorch FP16 module: relative L2 {d:.2e}")
        cands.append(("torch_gemm", fn))
        for tag, f in cands:
            print(f"kernels of {tag} (count a batch, mean us):")
            for n, c, us in kernel_names(f, stream)[:8]:
                print(f"   {c:5.1f} x {us:8.2f}  {n[:150]}")

    with torch.no_grad():
        if not a.no_compile:
            cands.append(("compile", compiled_bert(x)))
        print(f"device {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
              f"enforced power limit {nv.power_limit_w():.0f} W; {a.rounds} rounds of "
              f"{a.seconds:.1f} s a candidate, each after {a.warm_ms:.0f} ms of its own load")
        time.sleep(1.0)
        e0 = nv.energy_mj()
        time.sleep(2.0)
        print(f"idle: {(nv.energy_mj() - e0) / 2.0 / 1e3:.0f} W")
        res = {t: [] for t, _ in cands}
        for r in range(a.rounds):
            order = cands[r % len(cands):] + cands[:r % len(cands)]
            for tag, fn in order:
                sustain(fn, a.warm_ms, stream)
                n, ms, mj, mhz = window(nv, fn, stream, a.seconds)
                res[tag].append((ms / n, mj / ms, mj / n / 1e3, mhz))
                print(f"   round {r} {tag:10s} {ms / n:.3f} ms a batch  {mj / ms:.0f} W  "
                      f"{mj / n / 1e3:.3f} J a batch  SM {mhz} MHz")
    print("\nmedians over the rounds: ms a batch, W, J a batch, SM MHz")
    med = {}
    for tag, rows in res.items():
        med[tag] = [statistics.median(c) for c in zip(*rows)]
        t, w, j, c = med[tag]
        print(f"   {tag:12s} {t:7.3f} ms  {w:5.0f} W  {j:6.3f} J  {c:5.0f} MHz")
    k, kg, tg = med["kiln"], med["kiln_gemm"], med["torch_gemm"]
    print(f"kiln's GEMMs alone: {kg[2] / k[2]:.1%} of kiln's energy, {kg[0] / k[0]:.1%} of its time")
    print(f"kiln_gemm / torch_gemm: time {kg[0] / tg[0]:.3f}, energy {kg[2] / tg[2]:.3f}")
    if "compile" in med:
        c = med["compile"]
        print(f"compile / kiln: time {c[0] / k[0]:.3f}, energy {c[2] / k[2]:.3f}")
        print(f"compile / kiln_gemm (everything but the GEMMs free): time {c[0] / kg[0]:.3f}, "
              f"energy {c[2] / kg[2]:.3f}")


if __name__ == "__main__":
    main()
