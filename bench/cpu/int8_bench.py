#!/usr/bin/env python3
"""int8_bench.py - kiln INT8 (explicit quantization) against kiln FP32 and
ONNX Runtime on the CPU, in one process: ResNet-50 (scripts/gen_models.py,
BatchNorm folded by onnxruntime.quantization's quant_pre_process) and the
quantized model tests' small CNN and MLP (tests/models/quant/gen_quant.py),
quantized by quantize_static (QDQ, u8 asymmetric activations, per-channel
s8 weights, MinMax over CALIB seeded random images). Each runtime runs the
same files: kiln FP32 and ORT FP32 the float model, kiln INT8 and ORT QDQ
the quantized one. Median latency, equal threads; also the agreement of
kiln INT8 with ORT QDQ (max |diff| in output quantization steps) and of
the INT8 outputs with FP32 (relative L2).

Usage: bench/cpu/int8_bench.py --lib build/libkiln.so [--work /tmp/int8bench]
       [--threads 2] [--runs 20] [--which resnet50,cnn,mlp] [--batch 1]
"""

import argparse
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "models", "quant"))
import cpu_bench  # noqa: E402
import gen_quant  # noqa: E402

CALIB = 4


def resnet_models(work):
    fp32 = os.path.join(work, "resnet50_fp32.onnx")
    pre = os.path.join(work, "resnet50_pre.onnx")
    qdq = os.path.join(work, "resnet50_u8asym.onnx")
    if not os.path.exists(qdq):
        import gen_models
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process
        onnx.save(gen_models.resnet50(False), fp32)
        quant_pre_process(fp32, pre, skip_symbolic_shape=True)
        rng = np.random.default_rng(7)
        data = [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                for _ in range(CALIB)]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(data)

            def get_next(self):
                return next(self.it, None)

        quantize_static(pre, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return pre, qdq, "input", (3, 224, 224)


def small_models(work, name):
    q = gen_quant.make(work, name, "u8asym")
    return os.path.join(work, "%s_fp32.onnx" % name), q, "x", gen_quant.MODELS[name][1]


def out_steps(path):
    m = onnx.load(path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    outs = {o.name for o in m.graph.output}
    return {n.output[0]: float(np.max(inits[n.input[1]])) for n in m.graph.node
            if n.op_type == "DequantizeLinear" and n.output[0] in outs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkiln.so"))
    ap.add_argument("--work", default="/tmp/int8bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--which", default="resnet50,cnn,mlp")
    ap.add_argument("--omp-wait", choices=["active", "passive"],
                    help="OMP_WAIT_POLICY for kiln's OpenMP threads (see bench/cpu_bench.py)")
    args = ap.parse_args()
    if args.omp_wait:  # read by libgomp when libkiln loads, below
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait.upper()
    os.makedirs(args.work, exist_ok=True)
    k = cpu_bench.Kiln(args.lib)
    print("- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("- OMP_WAIT_POLICY: %s" % os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default)"))
    print("- load average at start: %s" % " ".join("%.1f" % x for x in os.getloadavg()))
    print("- kiln %s, commit %s; ONNX Runtime %s; threads %d; batch %d; median of %d runs"
          % (k.lib.kiln_version_string().decode(), cpu_bench.git_commit(ROOT), ort.__version__,
             args.threads, args.batch, args.runs))
    print()
    print("| model | kiln FP32 (ms) | kiln INT8 (ms) | ORT FP32 (ms) | ORT QDQ (ms) | INT8/FP32 kiln |"
          " kiln INT8 / ORT QDQ | kiln INT8 vs ORT QDQ (steps) | INT8 vs FP32 rel L2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    for name in args.which.split(","):
        fp32, qdq, iname, dims = resnet_models(args.work) if name == "resnet50" else \
            small_models(args.work, name)
        rng = np.random.default_rng(3)
        feeds = {iname: rng.standard_normal((args.batch,) + tuple(dims)).astype(np.float32)}
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        res = {}
        outs = {}
        for tag, path in (("fp32", fp32), ("int8", qdq)):
            km = cpu_bench.KilnModel(k, path, feeds, args.threads)
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            tk, to = cpu_bench.bench_pair(km, sess, feeds, args.runs, args.block, args.warmup)
            km.run()
            outs[tag] = {n: v.copy() for n, v in km.outputs.items()}
            outs["ort_" + tag] = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            res[tag] = (tk, to)
            km.close()
        steps = out_steps(qdq)
        worst = 0.0
        rel = 0.0
        for o, v in outs["int8"].items():
            ref = outs["ort_int8"][o]
            worst = max(worst, float(np.max(np.abs(v - ref))) / steps.get(o, 1.0))
            f = outs["fp32"][o]
            rel = max(rel, float(np.linalg.norm(v - f) / max(np.linalg.norm(f), 1e-12)))
        (kf, of), (ki, oq) = res["fp32"], res["int8"]
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2f | %.3f |"
              % (name, kf, ki, of, oq, ki / kf, ki / oq, worst, rel))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
