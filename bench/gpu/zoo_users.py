#!/usr/bin/env python3
"""zoo_users.py - kiln on the zoo made as users make it, against PyTorch.

Each model comes from scripts/export_zoo.py (the library's own class and
forward, full-size default configuration, random weights with a fixed seed),
exported by each exporter asked for (torchscript17 = torch.onnx.export with
dynamo=False at opset 17; dynamo23 = dynamo=True at opset 23; any
EXPORTER+OPSET), with its attention mask as an input where it takes one.
kiln builds FP16 plans from the file (dynamic batch 1..64, one tuned at
batch 1, one at 64); PyTorch runs the same module in FP16: eager, and
torch.compile with mode "default" and "reduce-overhead". At batch 1 (median
latency) and 64 (throughput) the candidates are timed in interleaved blocks
with CUDA events (bench_models.time_interleaved), once per call and once with
each block's runs enqueued back to back. The ratio is kiln against the best
PyTorch figure of the same run (latency: kiln/best, lower is better;
throughput: kiln's over best, higher is better). One table per exporter,
appended to --out row by row, so a run cut short keeps what it measured.

Inputs: token ids [b, SEQ] with a padded attention mask (row r keeps
SEQ - 8r tokens), images [b, 3, 224, 224], Whisper features [b, 80, 3000].

Usage: python3 bench/gpu/zoo_users.py --kiln build/libkiln.so --cli build/kiln
           [--models bert,gpt2] [--exporters torchscript17,dynamo23] [--out r.md]
"""
import argparse
import copy
import os
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import export_zoo  # noqa: E402
from bench_models import KILN_DTYPES, Kiln, build_plan, log, rel_err, time_interleaved  # noqa: E402

SEQ = 128


def inputs(name, ins, batch, device):
    """The model's inputs at `batch` (and SEQ tokens), shaped like the export's."""
    g = torch.Generator().manual_seed(7 + batch)
    out = {}
    for k, v in ins.items():
        if k == "input_ids":
            out[k] = torch.randint(3, 1000, (batch, SEQ), generator=g)
        elif k == "attention_mask":
            m = torch.ones(batch, SEQ, dtype=torch.int64)
            for r in range(1, batch):
                m[r, max(8, SEQ - 8 * (r % 8)):] = 0
            out[k] = m
        else:
            out[k] = torch.randn((batch,) + tuple(v.shape[1:]), generator=g)
    return {k: v.to(device) for k, v in out.items()}


def spec_fn(name, ins):
    def spec(b):
        return ",".join("%s:%s" % (k, "x".join(map(str, v.shape)))
                        for k, v in inputs(name, ins, b, "cpu").items())
    return spec


def survey(name, exporter, opset, a, kiln, kstream):
    row = {"model": name, "export": f"{exporter}{opset}"}
    mod, ins, dyn, outs = export_zoo.make(name, small=False)
    mod.eval()
    path = os.path.join(a.work, f"{name}.{exporter}{opset}.onnx")
    t0 = time.time()
    with torch.no_grad():
        info = export_zoo.export(mod, ins, dyn, outs, exporter, opset, path)
    row["export_s"] = time.time() - t0
    log(f"{name} {exporter}{opset}: exported in {row['export_s']:.0f} s, {info['nodes']} nodes")
    spec = spec_fn(name, ins)
    cache = os.path.join(a.work, f"{name}.{exporter}{opset}.cache")
    if os.path.exists(cache):
        os.remove(cache)
    fin = all(v.is_floating_point() for v in ins.values())
    plans = {b: os.path.join(a.work, f"{name}.{exporter}{opset}.opt{b}.plan") for b in (1, 64)}
    row["build_s"] = build_plan(a.cli, path, plans[64], spec, "fp16", cache, 64, fin)
    build_plan(a.cli, path, plans[1], spec, "fp16", cache, 1, fin)
    m32 = mod.cuda().float()
    mh = copy.deepcopy(m32).half()
    cands_pt = [("eager", mh)]
    if not a.no_compile:
        cands_pt += [("compile", torch.compile(mh)), ("reduce", torch.compile(mh, mode="reduce-overhead"))]
    for batch in (1, 64):
        x = inputs(name, ins, batch, "cuda")
        eng, ctx = kiln.load(plans[batch])
        xk = {k: v.to(KILN_DTYPES.get(kiln.lib.kiln_engine_tensor_dtype(eng, k.encode()), v.dtype))
              if v.is_floating_point() else v for k, v in x.items()}
        oname = outs[0]
        out = kiln.bind(ctx, xk, oname, KILN_DTYPES.get(
            kiln.lib.kiln_engine_tensor_dtype(eng, oname.encode()), torch.float32), "cuda")
        kiln.enqueue(ctx)
        torch.cuda.synchronize()
        with torch.no_grad():
            ref = m32(*x.values())
            row[f"err_b{batch}"] = rel_err(out, ref)
        xh = [v.half() if v.is_floating_point() else v for v in x.values()]
        cands = [("kiln", lambda: kiln.enqueue(ctx), kstream, 20)]
        for tag, m in cands_pt:
            cands.append((tag, (lambda m=m: m(*xh)), None, 30 if tag != "eager" else 10))
        with torch.no_grad():
            for mode, burst in (("call", False), ("b2b", True)):
                res = time_interleaved(cands, a.rounds, a.iters, burst=burst)
                for tag, (med, _, _, _) in res.items():
                    row[f"{tag}_{mode}_b{batch}"] = med
                log(f"{name} {exporter}{opset} b{batch} {mode}: "
                    + ", ".join(f"{t} {v[0]:.3f} ms" for t, v in res.items()))
        kiln.lib.kiln_context_destroy(ctx)
        kiln.lib.kiln_engine_destroy(eng)
    del m32, mh, cands_pt
    return row


def table_row(r, pt_tags):
    head = f"| {r['model']} |"
    if "error" in r:
        return head + f" failed: {r['error']} |" + " |" * 4
    cells = []
    for mode in ("call", "b2b"):
        for b in (1, 64):
            k = r[f"kiln_{mode}_b{b}"]
            best = min(r[f"{t}_{mode}_b{b}"] for t in pt_tags)
            ratio = k / best if b == 1 else best / k
            cells.append(f"{k:.3f} / {best:.3f} = **{ratio:.2f}**")
    return head + " " + " | ".join(cells + [f"{r['err_b1']:.1e}, {r['err_b64']:.1e}"]) + " |"


HEADER = ("| model | b1 ms kiln / best PyTorch, per call | b64 ms, per call (ratio = throughput) "
          "| b1, back to back | b64, back to back | kiln FP16 vs PyTorch FP32 (b1, b64) |\n"
          "|---|---|---|---|---|---|")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--models", default="bert,gpt2,vit,llama")
    ap.add_argument("--exporters", default="torchscript17,dynamo23")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--work", default="/tmp/kiln_zoo_users")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    kiln = Kiln(a.kiln)
    kstream = torch.cuda.Stream()
    import transformers
    pt_tags = ["eager"] + ([] if a.no_compile else ["compile", "reduce"])
    intro = (f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
             f"transformers {transformers.__version__}; FP16; seq {SEQ}; best PyTorch of "
             + ", ".join(pt_tags))
    log(intro)
    if a.out:
        with open(a.out, "a") as f:
            f.write(intro + "\n")
    failed = 0
    for exp in a.exporters.split(","):
        exporter, opset = exp.rstrip("0123456789"), int(exp[len(exp.rstrip("0123456789")):])
        head = f"\n### {exporter}, opset {opset}\n\n{HEADER}"
        log(head)
        if a.out:
            with open(a.out, "a") as f:
                f.write(head + "\n")
        for name in a.models.split(","):
            try:
                row = survey(name, exporter, opset, a, kiln, kstream)
            except Exception as ex:  # noqa: BLE001 - a model's failure is its row
                traceback.print_exc(limit=4)
                msg = str(ex).strip().splitlines()
                row = {"model": name, "error": (msg[-1] if msg else type(ex).__name__)[:300]}
                failed += 1
            line = table_row(row, pt_tags)
            log(repr(row))
            log(line)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(line + "\n")
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
