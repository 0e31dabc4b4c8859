#!/usr/bin/env python3
"""zoo.py - kiln on more real models than the benchmark's two, against PyTorch.

For each model: made with a fixed seed (torchvision's, or transformers' GPT-2
blocks; BatchNorm statistics warmed on random batches so activations are
O(1)), exported by torch.onnx (opset 17, dynamic batch, the TorchScript
exporter as bench_models.py uses), checked through ONNX Runtime against the
PyTorch model, then built by `kiln exec` and run through libkiln.so:

  - accuracy: a static FP32 plan at batch 2 against PyTorch FP32 (TF32 off on
    both sides), and FP16 plans at batches 1 and 64 against PyTorch FP32, as
    ||out - ref|| / ||ref||;
  - speed (--backend cuda): batch-1 median latency and batch-64 throughput of
    kiln's FP16 plans (dynamic batch 1..64, one tuned at 1 and one at 64),
    PyTorch eager FP16 and torch.compile(mode="reduce-overhead") FP16, timed
    in interleaved blocks with CUDA events as bench_models.py times them
    (fewer blocks: this is a survey, the benchmark proper is bench_models.py).

--backend cpu runs the same models through kiln's CPU backend (FP32 plan
only, no timing): the script's own check on a machine without a GPU.

Each model's row is appended to --out as soon as it is done, so a run cut
short keeps what it finished; a model that fails to export, build or run
gets a row with the error, and the next model goes on.

Usage: python3 bench/gpu/zoo.py --kiln build/libkiln.so --cli build/kiln
           [--models mobilenet_v3_large,...] [--backend cuda|cpu] [--out zoo.md]
           [--profile DIR] [--no-compile]
"""
import argparse
import copy
import os
import sys
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import (KILN_DTYPES, Kiln, build_plan, log, profile_plan,  # noqa: E402
                          rel_err, run_build, time_interleaved)

IMAGE_MODELS = ("mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "vit_b_16", "swin_t")
ALL_MODELS = IMAGE_MODELS + ("gpt2",)
CHANNELS_LAST = ("mobilenet_v3_large", "efficientnet_b0", "convnext_tiny")
SEQ = 128
GPT2_VOCAB = 50257


class Gpt2Blocks(torch.nn.Module):
    """What gets exported of GPT-2: token and position embeddings, the twelve
    blocks with the causal mask made here as an additive [1, 1, T, T] tensor,
    and the final LayerNorm. transformers' own mask builder does not trace to
    ONNX (aten::diff); the export check compares the exported file with the
    model's own forward."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        t = input_ids.shape[1]
        h = self.m.wte(input_ids) + self.m.wpe(torch.arange(t, device=input_ids.device))[None]
        causal = torch.full((t, t), torch.finfo(h.dtype).min, device=h.device).triu(1)[None, None]
        for blk in self.m.h:
            h = blk(h, attention_mask=causal)
            h = h[0] if isinstance(h, tuple) else h
        return self.m.ln_f(h)


class Gpt2Own(torch.nn.Module):
    """GPT-2 through the model's own forward, as PyTorch runs it at its best
    (causal SDPA without a mask tensor): what eager and torch.compile time."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).last_hidden_state


def make_model(name, seed=0):
    """(model for PyTorch, model to export), FP32 on the CPU, in eval mode."""
    torch.manual_seed(seed)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2Model
        m = GPT2Model(GPT2Config(attn_implementation="sdpa")).eval()
        # the same weights with eager attention for the export: the
        # TorchScript exporter's SDPA with an additive mask does not reproduce
        # the model (0.59 apart), the eager path does (1e-6)
        e = copy.deepcopy(m)
        e.config._attn_implementation = "eager"
        return Gpt2Own(m), Gpt2Blocks(e)
    import torchvision
    m = getattr(torchvision.models, name)(weights=None)
    if name == "vit_b_16":  # torchvision zeroes the classifier: outputs would all be 0
        with torch.no_grad():
            m.heads.head.weight.normal_(0, 0.02)
    m.train()
    with torch.no_grad():  # warm BatchNorm statistics (and nothing else) on random batches
        for _ in range(4):
            m(torch.randn(8, 3, 224, 224))
    m.eval()
    return m, m


def inputs_for(name, batch, device, seed=0):
    g = torch.Generator().manual_seed(seed + batch)
    if name == "gpt2":
        return {"input_ids": torch.randint(0, GPT2_VOCAB, (batch, SEQ), generator=g).to(device)}
    return {"input": torch.randn(batch, 3, 224, 224, generator=g).to(device)}


def shape_spec(name, batch):
    return f"input_ids:{batch}x{SEQ}" if name == "gpt2" else f"input:{batch}x3x224x224"


def export(name, model, path):
    x = inputs_for(name, 2, "cpu")
    (k, v), = x.items()
    torch.onnx.export(model, (v,), path, input_names=[k], output_names=["output"],
                      opset_version=17, dynamic_axes={k: {0: "batch"}, "output": {0: "batch"}},
                      dynamo=False)


def forward(model, x):
    (v,) = x.values()
    return model(v)


def export_check(name, model, onnx_path):
    """ONNX Runtime on the exported file against the PyTorch model (FP32)."""
    try:
        import onnxruntime as ort
    except ImportError as ex:
        log(f"{name}: export check skipped: {ex}")
        return float("nan")
    xs = inputs_for(name, 2, "cpu", seed=7)
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {k: v.numpy() for k, v in xs.items()})[0]
    with torch.no_grad():
        want = forward(model, xs)
    return rel_err(torch.from_numpy(got), want)


def run_plan(kiln, plan, x, device):
    """Output of one run of `plan` on inputs x (torch tensors on `device`),
    with the context kept for timing: (out, engine, context, enqueue, the
    inputs as bound; the caller keeps them alive while it enqueues)."""
    eng, ctx = kiln.load(plan)
    xk = {k: v.to(KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, k.encode()), v.dtype))
          if v.is_floating_point() else v for k, v in x.items()}
    out_dtype = KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, b"output"), torch.float32)
    out = kiln.bind(ctx, xk, "output", out_dtype, device)
    if device == "cuda":
        def enqueue():
            kiln.enqueue(ctx)
        enqueue()
        torch.cuda.synchronize()
    else:  # the CPU backend runs in the call (no stream)
        def enqueue():
            kiln.check(kiln.lib.kiln_context_enqueue(ctx, None), "enqueue")
        enqueue()
    return out, eng, ctx, enqueue, xk


def survey(name, a, kiln, kstream):
    row = {"model": name}
    cuda = a.backend == "cuda"
    dev = "cuda" if cuda else "cpu"
    model, exp = make_model(name)
    onnx_path = os.path.join(a.work, f"{name}.onnx")
    t0 = time.time()
    export(name, exp, onnx_path)
    row["export_s"] = time.time() - t0
    row["export_err"] = export_check(name, model, onnx_path)
    log(f"{name}: exported in {row['export_s']:.0f} s; ORT on the file vs PyTorch FP32 {row['export_err']:.2e}")
    spec = lambda b: shape_spec(name, b)  # noqa: E731
    m32 = model.to(dev).float()

    # FP32: a static plan at batch 2 against PyTorch FP32
    p32 = os.path.join(a.work, f"{name}_fp32.plan")
    cmd = [a.cli, "exec", f"--onnx={onnx_path}", f"--saveEngine={p32}", "--skipInference",
           f"--shapes={spec(2)}", f"--backend={a.backend}"]
    row["build_fp32_s"] = run_build(cmd)
    x = inputs_for(name, 2, dev, seed=3)
    out, eng, ctx, _, _ = run_plan(kiln, p32, x, dev)
    with torch.no_grad():
        row["err_fp32"] = rel_err(out, forward(m32, x))
    kiln.lib.kiln_context_destroy(ctx)
    kiln.lib.kiln_engine_destroy(eng)
    log(f"{name}: FP32 plan vs PyTorch FP32 {row['err_fp32']:.2e}")
    if not cuda:
        return row

    # FP16: latency plan (opt 1) and throughput plan (opt 64), dynamic 1..64
    cache = os.path.join(a.work, f"{name}.cache")
    if os.path.exists(cache):
        os.remove(cache)
    plans = {b: os.path.join(a.work, f"{name}_fp16_opt{b}.plan") for b in (1, 64)}
    fin = name != "gpt2"  # GPT-2 reads int64 token ids
    row["build_b64_s"] = build_plan(a.cli, onnx_path, plans[64], spec, "fp16", cache, 64, fin)
    row["build_b1_s"] = build_plan(a.cli, onnx_path, plans[1], spec, "fp16", cache, 1, fin)
    if a.profile:
        profile_plan(a.cli, name, plans[64], shape_spec(name, 64), a.profile)
    mh = copy.deepcopy(m32).half()
    if name in CHANNELS_LAST:  # PyTorch's fastest convolution layout
        mh = mh.to(memory_format=torch.channels_last)
    for batch in (1, 64):
        x = inputs_for(name, batch, dev)
        out, eng, ctx, enqueue, xk = run_plan(kiln, plans[batch], x, dev)
        with torch.no_grad():
            row[f"err_fp16_b{batch}"] = rel_err(out, forward(m32, x))
        xh = {k: (v.half() if v.is_floating_point() else v) for k, v in x.items()}
        if name in CHANNELS_LAST:
            xh = {k: v.contiguous(memory_format=torch.channels_last) for k, v in xh.items()}
        cands = [("kiln", enqueue, kstream, 20), ("eager", lambda: forward(mh, xh), None, 10)]
        with torch.no_grad():
            if not a.no_compile:
                cm = torch.compile(mh, mode="reduce-overhead")
                cands.append(("compile", lambda: forward(cm, xh), None, 30))
            rounds = a.rounds_b64 if batch == 64 else a.rounds
            res = time_interleaved(cands, rounds, a.iters)
        for tag, (med, p99, lo, hi) in res.items():
            row[f"{tag}_b{batch}"] = (med, p99, lo, hi)
        kiln.lib.kiln_context_destroy(ctx)
        kiln.lib.kiln_engine_destroy(eng)
        log(f"{name} b{batch}: " + ", ".join(f"{t} {v[0]:.3f} ms" for t, v in res.items()))
    return row


def table_rows(r):
    name = r["model"]
    if "error" in r:
        return [f"| {name} | failed: {r['error']} | | | | | |"]
    if "kiln_b1" not in r:  # CPU backend: accuracy only
        return [f"| {name} | {r['export_err']:.1e} | {r['err_fp32']:.1e} | | | | |"]
    unit = "seq/s" if name == "gpt2" else "img/s"

    def best(b):
        c = r.get(f"compile_b{b}", (float("inf"),))[0]
        return min(r[f"eager_b{b}"][0], c)

    k1, k64 = r["kiln_b1"][0], r["kiln_b64"][0]
    c1 = r.get("compile_b1", (float("nan"),))[0]
    c64 = r.get("compile_b64", (float("nan"),))[0]
    return [f"| {name} | {r['export_err']:.1e} | {r['err_fp32']:.1e} | "
            f"{r['err_fp16_b1']:.1e}, {r['err_fp16_b64']:.1e} | "
            f"{k1:.3f} vs {r['eager_b1'][0]:.3f} / {c1:.3f} = **{k1 / best(1):.2f}** | "
            f"{64e3 / k64:.0f} vs {64e3 / r['eager_b64'][0]:.0f} / {64e3 / c64:.0f} {unit} = "
            f"**{best(64) / k64:.2f}** | {r['build_b64_s']:.1f}, {r['build_b1_s']:.1f} |"]


HEADER = ["| model | ORT on the file vs PyTorch | kiln FP32 vs PyTorch FP32 | kiln FP16 vs PyTorch FP32 (b1, b64) "
          "| b1 latency ms: kiln vs eager / compile = kiln/best | b64 throughput: kiln vs eager / compile = "
          "kiln/best | kiln build s (opt 64, opt 1) |",
          "|---|---|---|---|---|---|---|"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--models", default=",".join(ALL_MODELS))
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--iters", type=int, default=40, help="timed runs a block")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved blocks at batch 1")
    ap.add_argument("--rounds-b64", type=int, default=4, help="interleaved blocks at batch 64")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--work", default="/tmp/kiln_zoo")
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", default=None,
                    help="folder for each model's per-layer profile of its opt-64 plan at batch 64 (cuda only)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32 on both sides
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    kiln = Kiln(a.kiln)
    kstream = torch.cuda.Stream() if a.backend == "cuda" else None
    dev = torch.cuda.get_device_name(0) if a.backend == "cuda" else "CPU"
    head = [f"device: {dev}; torch {torch.__version__}; backend {a.backend}", ""] + HEADER
    log("\n".join(head))
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(head) + "\n")
    failed = 0
    for name in a.models.split(","):
        log(f"== {name}")
        try:
            row = survey(name, a, kiln, kstream)
        except Exception as ex:  # noqa: BLE001 - one model's failure is that model's row
            traceback.print_exc()
            msg = str(ex).strip().splitlines()
            row = {"model": name, "error": (msg[-1] if msg else type(ex).__name__)[:300]}
            failed += 1
        lines = table_rows(row)
        log(repr(row))
        log("\n".join(lines))
        if a.out:
            with open(a.out, "a") as f:
                f.write("\n".join(lines) + "\n")
        if a.backend == "cuda":
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
