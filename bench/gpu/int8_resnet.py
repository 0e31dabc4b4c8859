#!/usr/bin/env python3
"""int8_resnet.py - ResNet-50 in INT8 on the GPU: kiln's plan of a Q/DQ model
against kiln FP16 and PyTorch FP16, measured in one run.

torchvision's ResNet-50 (random weights, fixed seed, BatchNorm statistics
warmed on random batches as bench_models.py does) is exported at opset 17
with a dynamic batch and quantized by ONNX Runtime's quantize_static (QDQ
format, per-channel int8 weights, uint8 or int8 activations, calibrated on a
few random batches: the figures are about speed and agreement with the float
model, not about accuracy on a task). kiln builds the Q/DQ file with --int8
--fp16 and the float file with --fp16; both plans take float16 input. Timed
in interleaved blocks with CUDA events at batch 64 (and batch 1): kiln INT8,
kiln FP16, PyTorch eager FP16 (channels_last, cudnn.benchmark). Agreement:
cosine similarity and relative L2 error of each plan's logits against
PyTorch FP32 on the same batch.

Usage: python3 bench/gpu/int8_resnet.py --kiln DIR/libkiln.so --cli DIR/kiln
           [--activations uint8|int8] [--out results.md] [--work /tmp/int8]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models as bm  # noqa: E402


def quantize(src, dst, act, calib_batches, seed, pre):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            g = np.random.default_rng(seed)
            self.batches = iter([{"input": g.standard_normal((8, 3, 224, 224), dtype=np.float32)}
                                 for _ in range(calib_batches)])

        def get_next(self):
            return next(self.batches, None)

    if pre:  # ONNX Runtime's recommended pre-processing (shape inference, BatchNorm folded)
        from onnxruntime.quantization.shape_inference import quant_pre_process
        folded = dst.replace(".onnx", "_pre.onnx")
        quant_pre_process(src, folded, skip_symbolic_shape=True)
        src = folded
    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8 if act == "uint8" else QuantType.QInt8,
                    weight_type=QuantType.QInt8)


def agreement(out, ref):
    a = out.float().flatten()
    b = ref.float().flatten()
    cos = float(torch.dot(a, b) / (a.norm() * b.norm()))
    return cos, float((a - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--activations", default="uint8", choices=["uint8", "int8"])
    ap.add_argument("--no-preprocess", action="store_true",
                    help="quantize the export as it is, without quant_pre_process")
    ap.add_argument("--calib-batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", default="/tmp/kiln_int8")
    ap.add_argument("--out", default="")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    bm.log(f"seed {a.seed}; torch {torch.__version__}, {torch.cuda.get_device_name()}")

    model = bm.make_resnet50(a.seed)[0].eval()
    fp32 = os.path.join(a.work, "resnet50.onnx")
    qdq = os.path.join(a.work, f"resnet50_qdq_{a.activations}{'_raw' if a.no_preprocess else ''}.onnx")
    t0 = time.time()
    bm.export("resnet50", model, fp32)
    quantize(fp32, qdq, a.activations, a.calib_batches, a.seed, not a.no_preprocess)
    bm.log(f"export and quantize_static: {time.time() - t0:.1f} s")

    spec = lambda b: bm.shape_spec("resnet50", b)  # noqa: E731
    plans = {}
    for tag, src, extra in (("kiln int8", qdq, ["--int8"]), ("kiln fp16", fp32, [])):
        plan = os.path.join(a.work, tag.replace(" ", "_") + ".plan")
        cmd = [a.cli, "exec", f"--onnx={src}", f"--saveEngine={plan}", "--skipInference",
               f"--minShapes={spec(1)}", f"--optShapes={spec(64)}", f"--maxShapes={spec(64)}",
               "--backend=cuda", "--fp16", "--inputIOFormats=fp16:chw", "--outputIOFormats=fp16:chw",
               f"--timingCacheFile={os.path.join(a.work, 'cache.bin')}"] + extra
        dt = bm.run_build(cmd)
        bm.log(f"{tag}: built in {dt:.1f} s")
        plans[tag] = plan
    # what the INT8 plan is made of (layer kinds and tactics)
    env = dict(os.environ)
    import subprocess
    p = subprocess.run([a.cli, "inspect", plans["kiln int8"]], capture_output=True, text=True, env=env)
    with open(os.path.join(a.work, "int8_inspect.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    qlayers = sum(1 for line in p.stdout.splitlines() if "kiln::Q" in line)
    bm.log(f"kiln int8 plan: {qlayers} lines naming kiln::Q* layers (inspect in {a.work})")
    # which tactics the build kept for the quantized layers and the pool (the
    # fused qmma / qmma128 GEMMs, cuBLASLt's imma*, the q8pool MaxPool)
    tally = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0].isdigit() and f[1] in ("kiln::QConv", "kiln::QMatMul",
                                                        "kiln::MaxPool"):
            key = f"{f[1][6:]}:{f[2]}"
            tally[key] = tally.get(key, 0) + 1
    bm.log("kiln int8 tactics: " + ", ".join(f"{k} x{v}" for k, v in sorted(tally.items())))

    k = bm.Kiln(a.kiln)
    torch_fp16 = model.half().cuda().to(memory_format=torch.channels_last)
    torch_fp32 = bm.make_resnet50(a.seed)[0].eval().cuda()
    lines = [f"# ResNet-50 INT8 (Q/DQ, {a.activations} activations) on {torch.cuda.get_device_name()}",
             "", "| batch | candidate | median ms | images/s | vs torch fp16 | vs kiln fp16 |",
             "|---|---|---|---|---|---|"]
    for batch in (64, 1):
        g = torch.Generator().manual_seed(a.seed + batch)
        x32 = torch.randn(batch, 3, 224, 224, generator=g).cuda()
        x16 = x32.half().contiguous()
        x16cl = x16.to(memory_format=torch.channels_last)
        with torch.no_grad():
            ref = torch_fp32(x32)
        cands, outs = {}, {}
        for tag, plan in plans.items():
            e, c = k.load(plan)
            out = k.bind(c, {"input": x16}, "output", torch.float16)
            cands[tag] = (lambda c=c: k.enqueue(c))
            outs[tag] = out
            cands[tag]()
            torch.cuda.synchronize()
            cos, rel = agreement(out, ref)
            bm.log(f"b{batch} {tag}: cosine {cos:.5f}, rel L2 {rel:.4f} against torch fp32")
        with torch.no_grad():
            cands["torch fp16"] = lambda: torch_fp16(x16cl)
            cos, rel = agreement(torch_fp16(x16cl), ref)
            bm.log(f"b{batch} torch fp16: cosine {cos:.5f}, rel L2 {rel:.4f} against torch fp32")
            res = bm.time_interleaved([(t, fn, None, 10) for t, fn in cands.items()], a.rounds, 40)
        med = {t: r[0] for t, r in res.items()}
        for t in cands:
            ms = med[t]
            lines.append(f"| {batch} | {t} | {ms:.3f} | {batch * 1000.0 / ms:.0f} | "
                         f"{med['torch fp16'] / ms:.2f}x | {med['kiln fp16'] / ms:.2f}x |")
            bm.log(lines[-1] + f" (block medians {res[t][2]:.3f}-{res[t][3]:.3f})")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
