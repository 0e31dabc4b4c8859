#!/usr/bin/env python3
"""gen_modelopt.py - NVIDIA ModelOpt's ONNX PTQ (modelopt.onnx.quantization)
on small models, run on the CPU; writes the quantized models the test
run_modelopt_tests.py reads (committed under tests/models/quant/modelopt/,
each well under 1 MB) and modelopt/manifest.json with the versions and the
command lines.

Needs a Python with nvidia-modelopt (its [onnx] extra's onnx-graphsurgeon,
polygraphy, onnxslim, lief, cppimport; the CPU onnxruntime), numpy and onnx:
    /work/venv-torch/bin/python tests/models/quant/gen_modelopt.py
CI does not run this; it runs the committed outputs.

Models (FP32 first, then `--quantize_mode int8` and `fp8`, calibration
method ModelOpt's default (entropy), calibration on the CPU
(`--calibration_eps cpu`)):
  cnn   gen_quant.py's CNN (7 convolutions, residual adds, depthwise,
        pooling, Gemm), calibrated on 8 seeded normal images
  bert  the zoo's small BERT (tests/models/zoo/bert.torchscript17.onnx),
        calibrated on gen_bert_quant.py's 8 token-id batches (16 x 16)
Each with `--high_precision_dtype fp32` (the float parts stay FP32), and
the CNN also with ModelOpt's default (fp16: the float parts, scales and
biases in FP16; the model then takes and returns FP32 through Casts).
"""

import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "modelopt")
sys.path.insert(0, HERE)


def fp32_models(tmp):
    """(name, fp32 path, calibration npz, calibration shapes or None)."""
    import gen_bert_quant
    import gen_quant
    cnn = os.path.join(tmp, "cnn.onnx")
    onnx.save(gen_quant.cnn(), cnn)
    cnn_cal = os.path.join(tmp, "cnn_calib.npz")
    np.savez(cnn_cal, x=np.random.default_rng(7).standard_normal((8, 3, 16, 16)).astype(np.float32))
    feeds = gen_bert_quant.calib_feeds()
    bert_cal = os.path.join(tmp, "bert_calib.npz")
    np.savez(bert_cal, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    bert = gen_bert_quant.fp32_path("bert.torchscript17")
    return [("cnn", cnn, cnn_cal, None),
            ("bert", bert, bert_cal, "input_ids:16x16,attention_mask:16x16")]


def quantize(src, cal, shapes, mode, hp, out):
    cmd = [sys.executable, "-m", "modelopt.onnx.quantization", "--onnx_path", src,
           "--quantize_mode", mode, "--calibration_data_path", cal, "--calibration_eps", "cpu",
           "--output_path", out]
    if hp:
        cmd += ["--high_precision_dtype", hp]
    if shapes:
        cmd += ["--calibration_shapes", shapes]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("ModelOpt failed on %s (%s):\n%s" % (src, mode, p.stdout[-4000:]))
    shown = [os.path.basename(c) if os.path.isabs(c) else c for c in cmd[1:]]
    return "python " + " ".join(shown)


def main():
    import modelopt
    import onnxruntime
    os.makedirs(OUT, exist_ok=True)
    man = {"modelopt": modelopt.__version__, "onnx": onnx.__version__,
           "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
           "python": platform.python_version(), "models": {}}
    try:
        import torch
        man["torch"] = torch.__version__
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, cal, shapes in fp32_models(tmp):
            runs = [("int8", "fp32"), ("fp8", "fp32")] + ([("int8", None)] if name == "cnn" else [])
            for mode, hp in runs:
                tag = "%s_%s%s" % (name, mode, "" if hp else "_fp16")
                out = os.path.join(OUT, tag + ".onnx")
                cmd = quantize(src, cal, shapes, mode, hp, out)
                m = onnx.load(out)
                ops = {}
                for n in m.graph.node:
                    ops[n.op_type] = ops.get(n.op_type, 0) + 1
                man["models"][tag] = {"command": cmd, "bytes": os.path.getsize(out),
                                      "source": os.path.relpath(src, HERE) if name == "bert" else
                                      "gen_quant.cnn()", "ops": dict(sorted(ops.items()))}
                print("%s: %d bytes, %s" % (tag, os.path.getsize(out), ops))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
