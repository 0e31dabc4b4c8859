#!/usr/bin/env python3
"""run_accuracy_tests.py - tests of kiln's accuracy tools: .npy/.npz in and out
(round trips, malformed files), `kiln compare` (pass, fail on FP16 with tight
tolerances and on a perturbed model, per-output tolerances, error statistics,
golden results, --all-tensors, the kiln reference when ONNX Runtime is
missing), the ONNX writer (read -> write -> read gives the same outputs),
`kiln debug reduce` (finds a planted node in a 50-node model) and `kiln debug
precision` (finds the one FP16-sensitive layer), and NonMaxSuppression, RoiAlign,
GridSample, the quantization ops and the losses against ONNX Runtime on
random inputs, float8 quantization bit for bit against ONNX Runtime and the
ONNX reference, and the random ops' statistics and seeding.

Needs numpy and onnx to make the models; exits 77 (skipped) without them.
Parts that need onnxruntime are skipped when it cannot be imported."""

import argparse
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import numpy as np
    import onnx  # noqa: F401 - gen_models needs it
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

try:
    import onnxruntime  # noqa: F401
    HAVE_ORT = True
except ImportError:
    HAVE_ORT = False

sys.path.insert(0, HERE)
import gen_models  # noqa: E402

passed = 0
failed = []


BACKEND_ARGS = []  # --backend=NAME for the op checks (main's --backend)


def run(kiln, *args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([kiln] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600, env=e)
    return p.returncode, p.stdout, p.stderr


def check(what, cond, detail=""):
    global passed
    if cond:
        passed += 1
        print("ok:   " + what)
    else:
        failed.append(what + (": " + detail[-3000:] if detail else ""))
        print("FAIL: " + what)


def npy_bytes(arr, version=(1, 0), fortran=False):
    """A .npy image written by hand, so headers of versions 2 and 3 are tested."""
    arr = np.asarray(arr)
    order = np.asfortranarray(arr) if fortran else np.ascontiguousarray(arr)
    descr = np.lib.format.dtype_to_descr(arr.dtype)
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", repr(tuple(arr.shape)))
    lenbytes = 2 if version[0] == 1 else 4
    pad = 64 - (10 + (lenbytes - 2) + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    out = b"\x93NUMPY" + bytes(version)
    out += struct.pack("<H" if lenbytes == 2 else "<I", len(header)) + header.encode()
    return out + order.tobytes(order="F" if fortran else "C")


def test_io(k, w, m):
    """Round trips through `kiln exec --loadInputs ... --exportOutput=x.npz`."""
    rng = np.random.default_rng(3)
    vals = {
        "xf": rng.standard_normal((2, 3)).astype(np.float32),
        "xh": np.array([1.5, -2.0, 65504.0, 6e-8, np.inf], np.float16),
        "xi": np.array([[1, -2], [2 ** 40, -(2 ** 62)]], np.int64),
        "xb": np.array([True, False, True]),
        "xu8": np.array([0, 7, 200, 255], np.uint8),
        "xd": np.array([np.pi, -1e300], np.float64),
    }
    np.savez(w("in.npz"), **vals)
    np.savez_compressed(w("in_deflate.npz"), **vals)
    for name, arr in vals.items():
        np.save(w(name + ".npy"), arr)
    with open(w("xf_v2.npy"), "wb") as f:
        f.write(npy_bytes(vals["xf"], (2, 0)))
    with open(w("xh_v3.npy"), "wb") as f:
        f.write(npy_bytes(vals["xh"], (3, 0)))
    with open(w("xi_fortran.npy"), "wb") as f:
        f.write(npy_bytes(vals["xi"], fortran=True))
    # bfloat16: NumPy has no such dtype; kiln's convention is 2-byte void ('<V2')
    bf = np.array([0x3FC0, 0xC000, 0x7F80], "<u2")  # 1.5, -2, +inf
    with open(w("xbf.npy"), "wb") as f:
        f.write(npy_bytes(bf.view("V2")))
    base = ["exec", "--onnx=" + m("multi.onnx"), "--iterations=1", "--duration=0", "--warmUp=0"]
    specs = {
        "stored npz": ",".join("%s:%s" % (n, w("in.npz")) for n in vals) + ",xbf:" + w("xbf.npy"),
        "deflate npz": ",".join("%s:%s" % (n, w("in_deflate.npz")) for n in vals) + ",xbf:" + w("xbf.npy"),
        "npy files": ",".join("%s:%s" % (n, w(n + ".npy")) for n in vals) + ",xbf:" + w("xbf.npy"),
        "npy v2/v3/fortran": ",".join(
            "%s:%s" % (n, w({"xf": "xf_v2.npy", "xh": "xh_v3.npy",
                             "xi": "xi_fortran.npy"}.get(n, n + ".npy"))) for n in vals) +
            ",xbf:" + w("xbf.npy"),
    }
    for what, spec in specs.items():
        out = w("out_%s.npz" % what.replace(" ", "_").replace("/", "_"))
        rc, so, se = run(k, *base, "--loadInputs=" + spec, "--exportOutput=" + out)
        ok = rc == 0 and os.path.exists(out)
        detail = so + se
        if ok:
            got = np.load(out)
            for n, v in vals.items():
                g = got[n + "_out"]
                if g.dtype != v.dtype or g.shape != v.shape or not np.array_equal(g, v):
                    ok = False
                    detail += "\n%s: got %s %s %r" % (n, g.dtype, g.shape, g)
            g = got["xbf_out"]
            if g.dtype.itemsize != 2 or g.dtype.kind != "V" or g.tobytes() != bf.tobytes():
                ok = False
                detail += "\nxbf: got %s %r" % (g.dtype, g.tobytes())
        check("io: round trip (%s) keeps fp16, int64, bool, uint8, f64, f32, bf16" % what, ok,
              detail)

    # compare saves and reloads its inputs and golden outputs
    rc, so, se = run(k, "compare", m("multi.onnx"), "--reference=kiln", "--seed=5",
                     "--save-inputs=" + w("cmp_in.npz"), "--save-results=" + w("golden.npz"))
    ok = rc == 0 and os.path.exists(w("cmp_in.npz")) and os.path.exists(w("golden.npz"))
    if ok:
        a, b = np.load(w("cmp_in.npz")), np.load(w("golden.npz"))
        ok = all(np.array_equal(a[n], b[n + "_out"]) and a[n].dtype == b[n + "_out"].dtype
                 for n in vals)
        ok = ok and set(np.unique(a["xi"])) <= {0, 1}  # integer inputs stay index-like
        ok = ok and a["xb"].dtype == np.bool_ and a["xh"].dtype == np.float16
    check("io: compare --save-inputs/--save-results (random int64 kept in [0,1])", ok, so + se)
    rc, so, se = run(k, "compare", m("multi.onnx"), "--load-inputs=" + w("cmp_in.npz"),
                     "--load-results=" + w("golden.npz"), "--atol=0", "--rtol=0")
    check("io: compare --load-inputs/--load-results", rc == 0, so + se)
    rc, so, se = run(k, "compare", m("multi.onnx"), "--reference=kiln",
                     "--val-range=xi:[5,9],xf:[10,11]", "--save-inputs=" + w("rng.npz"))
    ok = rc == 0
    if ok:
        a = np.load(w("rng.npz"))
        ok = a["xi"].min() >= 5 and a["xi"].max() <= 9 and a["xf"].min() >= 10 and \
            a["xf"].max() < 11
    check("io: --val-range per input", ok, so + se)
    rc, so, se = run(k, *base, "--val-range=xi:[5,9],xf:[10,11]", "--exportOutput=" + w("vr.npz"))
    ok = rc == 0
    if ok:
        a = np.load(w("vr.npz"))
        ok = a["xi_out"].min() >= 5 and a["xi_out"].max() <= 9 and a["xf_out"].min() >= 10
    check("io: exec --val-range", ok, so + se)

    # malformed files: clear errors naming the file and the byte offset
    good = npy_bytes(vals["xf"])
    bad = {
        "bad_magic.npy": (b"\x93NUMPX" + good[6:], "byte 0: not a .npy file"),
        "bad_trunc.npy": (good[:-5], "data truncated"),
        "bad_descr.npy": (good.replace(b"'<f4'", b"'<c8'"), "unsupported dtype '<c8'"),
        "bad_hlen.npy": (good[:8] + b"\xff\xff" + good[10:], "runs past the end"),
        "bad_shape.npy": (good.replace(b"(2, 3)", b"(2, x)"), "expected a dimension"),
        "bad_version.npy": (good[:6] + b"\x07\x00" + good[8:], "unsupported .npy format"),
        "bad_bigendian.npy": (good.replace(b"'<f4'", b"'>f4'"), "big-endian"),
        "bad_short.npy": (b"\x93NUM", "too short"),
    }
    for fname, (data, text) in bad.items():
        with open(w(fname), "wb") as f:
            f.write(data)
        rc, so, se = run(k, *base, "--loadInputs=xf:" + w(fname))
        check("io: malformed %s rejected (%s)" % (fname, text),
              rc != 0 and text in se and fname in se and "byte" in se, so + se)
    z = bytearray(open(w("in.npz"), "rb").read())
    z[60] ^= 0xFF  # inside the first member's data: the CRC no longer matches
    with open(w("bad_crc.npz"), "wb") as f:
        f.write(bytes(z))
    rc, so, se = run(k, *base, "--loadInputs=xf:" + w("bad_crc.npz"))
    check("io: damaged .npz rejected", rc != 0 and "bad_crc.npz" in se and
          ("CRC" in se or "byte" in se), so + se)
    rc, so, se = run(k, *base, "--loadInputs=xf:" + w("xi.npy"))
    check("io: wrong dtype named", rc != 0 and "int64" in se and "'xf'" in se, so + se)


def test_precision_pass(k, w, m):
    """--layerPrecisions=*:fp16 (every layer forced) converts the MLP's layers with one
    cast in and one per output: fused layers that feed each other share the FP16
    tensor. (--fp16 alone only allows FP16: on the CPU timing keeps FP32.)"""
    rc, so, se = run(k, "exec", "--onnx=" + m("mlp.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--dumpLayerInfo",
                     "--iterations=1", "--duration=0", "--warmUp=0")
    casts = [ln for ln in so.splitlines() if " Cast " in ln]
    check("precision pass: 3 casts (x in; t, probs out), none between converted layers",
          rc == 0 and len(casts) == 3 and "Layers after fusion: 7" in so, so + se)
    rc, so, se = run(k, "exec", "--onnx=" + m("mlp.onnx"), "--dumpLayerInfo",
                     "--iterations=1", "--duration=0", "--warmUp=0")
    check("precision pass: no casts without --fp16", rc == 0 and " Cast " not in so, so + se)


def test_compare(k, w, m):
    rc, so, se = run(k, "compare", m("mlp.onnx"))
    check("compare: correct model passes (exit 0)", rc == 0 and "PASS 'probs'" in so and
          "PASSED" in so and "max=" in so and "median=" in so and "q0.99=" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--atol=1e-6", "--rtol=1e-6")
    check("compare: --fp16 with a tight atol fails (exit 1, output named)",
          rc == 1 and "FAIL 't'" in se and "FAILED" in se, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--atol=2e-2", "--rtol=2e-2")
    check("compare: --fp16 within FP16 tolerances passes", rc == 0, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--atol=1e-6", "--rtol=1e-6",
                     "--atol=t:5e-2", "--rtol=t:5e-2", "--atol=probs:5e-2")
    check("compare: per-output tolerances", rc == 0 and "PASS 't'" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp_bad.onnx"), "--model=" + m("mlp.onnx"))
    check("compare: perturbed model fails against the good reference",
          rc == 1 and "FAIL 't'" in se, so + se)
    rc, so, se = run(k, "compare", m("mlp_bad.onnx"), "--model=" + m("mlp.onnx"),
                     "--check-error-stat=median", "--atol=0.05", "--rtol=0.05")
    check("compare: --check-error-stat=median tolerates one bad weight",
          rc == 0 and "median" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp_bad.onnx"), "--model=" + m("mlp.onnx"),
                     "--check-error-stat=max", "--atol=0.05", "--rtol=0.05")
    check("compare: --check-error-stat=max catches it", rc == 1 and "max abs error" in se,
          so + se)
    plan = w("mlp.kiln")
    rc, so, se = run(k, "exec", "--onnx=" + m("mlp.onnx"), "--saveEngine=" + plan,
                     "--skipInference")
    rc, so, se = run(k, "compare", "--plan=" + plan, "--model=" + m("mlp.onnx"))
    check("compare: --plan with --model as the reference", rc == 0 and "PASSED" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--save-inputs=" + w("p_in.npz"),
                     "--save-results=" + w("p_gold.npz"))
    rc, so, se = run(k, "compare", "--plan=" + plan, "--load-inputs=x:" + w("p_in.npz"),
                     "--load-results=" + w("p_gold.npz"))
    check("compare: --plan against saved results (no model at all)",
          rc == 0 and "saved results" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--reference=kiln")
    check("compare: kiln reference (ref kernels, no fusion)",
          rc == 0 and "kiln-reference" in so, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), env={"KILN_ORT_SCRIPT": "/nonexistent.py"})
    check("compare: without onnxruntime, falls back to the kiln reference",
          rc == 0 and "kiln-reference" in so and "not available" in se, so + se)
    rc, so, se = run(k, "compare", m("mlp.onnx"), "--atol=x")
    check("compare: bad flag value is a usage error (exit 2)", rc == 2 and "--atol" in se,
          so + se)
    rc, so, se = run(k, "compare", m("fragile.onnx"), "--fp16", "--layerPrecisions=*:fp16",
                     "--val-range=x:[0,1]",
                     "--atol=1e-3", "--rtol=1e-2")
    check("compare: FP16 overflow reported as Inf", rc == 1 and "Inf: kiln 32" in so, so + se)
    rc, so, se = run(k, "compare", m("fragile.onnx"), "--fp16", "--layerPrecisions=*:fp16",
                     "--val-range=x:[0,1]",
                     "--atol=1e-3", "--rtol=1e-2", "--layerPrecisions=big_scale:fp32")
    check("compare: --layerPrecisions keeps the fragile layer in FP32", rc == 0, so + se)
    rc, so, se = run(k, "compare", m("chain50.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--atol=1e-2", "--rtol=1e-2",
                     "--all-tensors")
    check("compare --all-tensors: first failing tensor is the planted node's",
          rc == 1 and "First tensor out of tolerance (topological order): 't27'" in se and
          "planted_overflow" in se, so + se)
    rc, so, se = run(k, "compare", m("chain50.onnx"), "--all-tensors")
    check("compare --all-tensors: FP32 passes", rc == 0 and "50 tensor(s)" in so, so + se)
    rc, so, se = run(k, "compare", m("chain50.onnx"), "--fp16", "--layerPrecisions=*:fp16", "--atol=1e-2", "--rtol=1e-2",
                     "--all-tensors", "--reference=kiln")
    check("compare --all-tensors against the kiln reference",
          rc == 1 and "'t27', produced by node 'planted_overflow'" in se, so + se)


def test_writer(k, w, m):
    for name in ["mlp", "chain50", "multi", "fragile", "attrs"]:
        out = w("rt_" + name + ".onnx")
        rc, so, se = run(k, "debug", "rewrite", m(name + ".onnx"), "-o", out)
        ok = rc == 0
        if ok:
            try:
                onnx.checker.check_model(onnx.load(out))
            except Exception as e:  # noqa: BLE001
                ok, se = False, se + str(e)
        if ok:
            outs = []
            for model in (m(name + ".onnx"), out):
                o = w("rt_%s_%d.npz" % (name, len(outs)))
                rc, so2, se2 = run(k, "compare", model, "--reference=kiln", "--seed=9",
                                   "--save-inputs=" + w("rt_in.npz"), "--save-results=" + o)
                ok = ok and rc == 0
                se += so2 + se2
                outs.append(o)
            if ok:
                a, b = np.load(outs[0]), np.load(outs[1])
                ok = sorted(a.files) == sorted(b.files) and all(
                    np.array_equal(a[f], b[f], equal_nan=a[f].dtype.kind == "f")
                    for f in a.files)
        check("writer: %s read -> write -> read gives the same outputs" % name, ok, so + se)


def test_debug(k, w, m):
    out = w("reduced.onnx")
    rc, so, se = run(k, "debug", "reduce", m("chain50.onnx"),
                     "--check=--fp16 --layerPrecisions=*:fp16 --atol=1e-2 --rtol=1e-2", "-o", out)
    ok = rc == 0 and os.path.exists(out)
    if ok:
        red = onnx.load(out)
        names = [n.name for n in red.graph.node]
        ok = names == ["planted_overflow"]
        so += "\nreduced to %s" % names
    check("debug reduce: finds the planted node in a 50-node model", ok, so + se)
    rc, so, se = run(k, "compare", out, "--fp16", "--layerPrecisions=*:fp16", "--atol=1e-2", "--rtol=1e-2",
                     "--val-range=[2,4]")  # what the planted node sees in the whole model
    check("debug reduce: the reduced model still fails", rc == 1, so + se)
    rc, so, se = run(k, "debug", "reduce", m("chain50.onnx"),
                     "--check=--fp16 --layerPrecisions=*:fp16 --atol=1e-2 --rtol=1e-2", "-o", w("reduced_kiln.onnx"),
                     env={"KILN_ORT_SCRIPT": "/nonexistent.py"})
    ok = rc == 0 and [n.name for n in onnx.load(w("reduced_kiln.onnx")).graph.node] == \
        ["planted_overflow"] if rc == 0 else False
    check("debug reduce: without onnxruntime (kiln reference) finds it too", ok, so + se)
    rc, so, se = run(k, "debug", "reduce", m("mlp.onnx"), "--check=--atol=1e-3", "-o",
                     w("none.onnx"))
    check("debug reduce: a passing model is reported, not reduced",
          rc == 1 and "nothing to reduce" in se, so + se)

    rc, so, se = run(k, "debug", "precision", m("fragile.onnx"), "--fp16", "--val-range=x:[0,1]",
                     "--atol=1e-3", "--rtol=1e-2")
    check("debug precision: finds the one FP16-sensitive layer",
          rc == 0 and so.strip().splitlines()[-1] == "--layerPrecisions=big_scale:fp32", so + se)
    rc, so, se = run(k, "debug", "precision", m("mlp.onnx"), "--fp16", "--atol=2e-2",
                     "--rtol=2e-2")
    check("debug precision: a model fine in FP16 needs no FP32 layer",
          rc == 0 and "no layer needs FP32" in so, so + se)
    rc, so, se = run(k, "debug", "precision", m("mlp.onnx"), "--atol=1e-3")
    check("debug precision: needs --fp16/--bf16", rc == 2 and "--fp16" in se, so + se)


def sampling_models(w):
    """Small models of the detection, sampling and quantization ops with
    random, seeded constants (NonMaxSuppression in both box formats, RoiAlign
    in both modes and coordinate conventions, GridSample in every mode and
    padding, QuantizeLinear + DequantizeLinear pairs, DynamicQuantizeLinear,
    NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss),
    each written to the work folder; returns their paths."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    paths = []

    def save(name, node, inputs, inits, out_name, out_dims, opset):
        g = helper.make_graph([node], name, inputs,
                              [helper.make_tensor_value_info(out_name, TensorProto.INT64 if
                                                             node.op_type == "NonMaxSuppression"
                                                             else TensorProto.FLOAT, out_dims)],
                              inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        path = w(name + ".onnx")
        onnx.save(m, path)
        paths.append(path)

    for center in (0, 1):
        node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou", "st"], ["sel"],
                                center_point_box=center)
        inits = [numpy_helper.from_array(rng.uniform(0, 20, (2, 600, 4)).astype(np.float32), "boxes"),
                 numpy_helper.from_array(np.array([40], dtype=np.int64), "mo"),
                 numpy_helper.from_array(np.array([0.45], dtype=np.float32), "iou"),
                 numpy_helper.from_array(np.array([0.2], dtype=np.float32), "st")]
        save("nms_center%d" % center, node,
             [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 4, 600])], inits,
             "sel", [None, 3], 11)
    corner = rng.uniform(-2, 20, (9, 2))
    rois = np.concatenate([corner, corner + rng.uniform(0.5, 12, (9, 2))], 1).astype(np.float32)
    for mode in ("avg", "max"):
        for ctm in ("half_pixel", "output_half_pixel"):
            node = helper.make_node("RoiAlign", ["X", "rois", "bi"], ["Y"], mode=mode,
                                    coordinate_transformation_mode=ctm, output_height=3,
                                    output_width=4, sampling_ratio=0, spatial_scale=0.5)
            inits = [numpy_helper.from_array(rois, "rois"),
                     numpy_helper.from_array(np.array([0, 1, 1, 0, 1, 0, 0, 1, 1], np.int64), "bi")]
            save("roialign_%s_%s" % (mode, ctm), node,
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 5, 12, 10])], inits,
                 "Y", [9, 5, 3, 4], 16)
    grid = rng.uniform(-1.2, 1.2, (2, 6, 7, 2)).astype(np.float32)
    for mode in ("bilinear", "nearest", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            node = helper.make_node("GridSample", ["X", "grid"], ["Y"], mode=mode, padding_mode=pad,
                                    align_corners=int(pad == "border"))
            save("gridsample_%s_%s" % (mode, pad), node,
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 9, 8])],
                 [numpy_helper.from_array(grid, "grid")], "Y", [2, 3, 6, 7], 16)
    # quantize then dequantize (a QDQ pair as quantization tools write them):
    # int8 per channel, uint8 per tensor; and DynamicQuantizeLinear
    for name, dtype, scale, zp, axis in (
            ("qdq_int8_axis", np.int8, rng.uniform(0.01, 0.1, 4).astype(np.float32),
             np.array([0, -3, 5, 1], np.int8), 1),
            ("qdq_uint8_tensor", np.uint8, np.array(0.05, np.float32), np.array(128, np.uint8), 1)):
        nodes = [helper.make_node("QuantizeLinear", ["X", "s", "z"], ["q"], axis=axis),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["Y"], axis=axis)]
        g = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 4, 5])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 4, 5])],
                              [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.save(m, w(name + ".onnx"))
        paths.append(w(name + ".onnx"))
    # the losses: ignore_index -1 with "mean" is where ONNX's Python
    # reference and ONNX Runtime differ (kiln follows ONNX Runtime)
    target = rng.integers(0, 5, (3, 4, 2)).astype(np.int64)
    target[0, 1, 0] = target[2, 3, 1] = -1
    target[1, 2, :] = 2
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        for red, ii, weighted in (("mean", -1, False), ("mean", 2, True), ("sum", -1, True),
                                  ("none", 2, False)):
            names = ["X", "t"] + (["wt"] if weighted else [])
            outs = ["Y"] + (["lp"] if op.startswith("Softmax") else [])
            node = helper.make_node(op, names, outs, reduction=red, ignore_index=ii)
            inits = [numpy_helper.from_array(np.where(target < 0, ii, target) if ii >= 0 else target, "t")]
            if weighted:
                inits.append(numpy_helper.from_array(rng.uniform(0.2, 2, 5).astype(np.float32), "wt"))
            out_vi = [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                    [3, 4, 2] if red == "none" else [])]
            if len(outs) > 1:
                out_vi.append(helper.make_tensor_value_info("lp", TensorProto.FLOAT, [3, 5, 4, 2]))
            g = helper.make_graph([node], "loss",
                                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 5, 4, 2])],
                                  out_vi, inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 8
            name = "%s_%s_ii%d%s.onnx" % ("nll" if op.startswith("Neg") else "sce", red, ii,
                                           "_weight" if weighted else "")
            onnx.save(m, w(name))
            paths.append(w(name))
    # blocked quantization (opset 21): int8 blocks of 4 along an axis of 10
    nodes = [helper.make_node("QuantizeLinear", ["X", "s", "z"], ["q"], axis=1, block_size=4),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["Y"], axis=1, block_size=4)]
    g = helper.make_graph(nodes, "qdq_int8_blocked",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 10, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 10, 4])],
                          [numpy_helper.from_array(rng.uniform(0.01, 0.05, (3, 3, 4)).astype(np.float32), "s"),
                           numpy_helper.from_array(rng.integers(-5, 5, (3, 3, 4)).astype(np.int8), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, w("qdq_int8_blocked.onnx"))
    paths.append(w("qdq_int8_blocked.onnx"))
    node = helper.make_node("DynamicQuantizeLinear", ["X"], ["y", "ys", "yz"])
    g = helper.make_graph([node], "dql", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [6, 7]),
                           helper.make_tensor_value_info("ys", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("yz", TensorProto.UINT8, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    onnx.save(m, w("dynamic_quantize.onnx"))
    paths.append(w("dynamic_quantize.onnx"))
    return paths


def test_sampling_ops(k, w):
    """kiln's NonMaxSuppression, RoiAlign, GridSample and quantization ops
    against ONNX Runtime on random inputs (the node tests have a few fixed
    cases each)."""
    for path in sampling_models(w):
        rc, so, se = run(k, "compare", path, *BACKEND_ARGS)
        check("compare vs onnxruntime: " + os.path.basename(path), rc == 0 and "PASSED" in so,
              so + se)


# Float8 QuantizeLinear / DequantizeLinear. The probes, in units of the
# scale: signed zeros, NaN, infinities, float subnormals; each format's
# largest value and the ties past it (464 rounds back to E4M3FN's 448, 248
# and 61440 round up into overflow); ties between neighbours; subnormals of
# each format, ties between them and halfway to the smallest.
F8_PROBES = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-40, -1e-40, 5e37, -5e37,
             448, -448, 449, 464, -464, 464.5, 465, 479, 480, -480, 490, 496, 512, 1e4,
             240, 247, 248, -248, 250, 256, 57344, 61439, 61440, -61440, 61441, 65536, 1e5,
             1.0625, -1.0625, 1.1875, 1.125, 1.375, -1.375, 3, 0.1, -7.7, 100,
             2 ** -9, 2 ** -10, -2 ** -10, 3 * 2 ** -10, 1.5 * 2 ** -10, 2 ** -11, 7.5 * 2 ** -9,
             -7.5 * 2 ** -9, 2 ** -16, 2 ** -17, -2 ** -17, 1.5 * 2 ** -17, 3 * 2 ** -18, 2 ** -18,
             -2 ** -18 * (1 + 2 ** -20), 3.5 * 2 ** -16]
F8_TYPES = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")


def float8_models(w):
    """For each float8 type and saturate 1 / 0: one model quantizing three
    inputs (per tensor, per axis 1 with a zero point of zeros, blocks of 4
    along axis 1) and dequantizing them back to float, and casting the per
    tensor one to float; and its inputs: the probes times each element's
    scale (powers of two, so x / scale is the probe exactly) and, per tensor,
    random values from 1e-7 to 1e6 of either sign. Returns (model, inputs,
    type, saturate) tuples."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    probes = np.array(F8_PROBES, np.float32)
    p = len(probes)
    s1 = np.array([0.25, 2.0, 1.0, 0.375], np.float32)  # the last is no power of two
    s2 = np.exp2(rng.integers(-2, 3, (2, 2, p))).astype(np.float32)
    x0 = np.concatenate([probes * np.float32(0.5),
                         (rng.choice([-1, 1], 400) * 10 ** rng.uniform(-7, 6, 400)).astype(np.float32)])
    x1 = probes[(np.arange(2 * 4 * p) * 7 % p)].reshape(2, 4, p) * s1.reshape(1, 4, 1)
    x2 = probes[(np.arange(2 * 8 * p) * 7 % p)].reshape(2, 8, p) * np.repeat(s2, 4, axis=1)
    out = []
    for tname in F8_TYPES:
        qt = getattr(TensorProto, tname)
        for sat in (1, 0):
            nodes = [helper.make_node("QuantizeLinear", ["X0", "s0"], ["q0"], output_dtype=qt, saturate=sat),
                     helper.make_node("DequantizeLinear", ["q0", "s0"], ["Y0"]),
                     helper.make_node("QuantizeLinear", ["X1", "s1", "z1"], ["q1"], axis=1, saturate=sat),
                     helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["Y1"], axis=1),
                     helper.make_node("QuantizeLinear", ["X2", "s2"], ["q2"], axis=1, block_size=4,
                                      output_dtype=qt, saturate=sat),
                     helper.make_node("DequantizeLinear", ["q2", "s2"], ["Y2"], axis=1, block_size=4)]
            nodes.append(helper.make_node("Cast", ["q0"], ["C0"], to=TensorProto.FLOAT))
            outs = ["Y0", "Y1", "Y2", "C0"]
            shapes = {"X0": list(x0.shape), "X1": list(x1.shape), "X2": list(x2.shape)}
            g = helper.make_graph(
                nodes, "qdq_f8",
                [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in shapes.items()],
                [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes["X" + o[1]]) for o in outs],
                [numpy_helper.from_array(np.array(0.5, np.float32), "s0"), numpy_helper.from_array(s1, "s1"),
                 helper.make_tensor("z1", qt, [4], bytes(4), raw=True), numpy_helper.from_array(s2, "s2")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
            m.ir_version = 10
            name = "qdq_%s_sat%d" % (tname.lower(), sat)
            onnx.save(m, w(name + ".onnx"))
            out.append((w(name + ".onnx"), {"X0": x0, "X1": x1, "X2": x2}, tname, sat))
    return out


def ort_float8_deviates(tname, sat, v):
    """Where ONNX Runtime's CPU kernel (1.32) leaves the spec, which kiln
    follows (ml_dtypes' conversion, as the ONNX reference): without
    saturation, E4M3FN gives 448 rather than NaN for x / scale in [480, 496),
    and E5M2 NaN rather than infinity in [61440, 65536)."""
    a = np.abs(v)
    if sat or tname not in ("FLOAT8E4M3FN", "FLOAT8E5M2"):
        return np.zeros(v.shape, bool)
    if tname == "FLOAT8E4M3FN":
        return (a >= 480) & (a < 496)
    return (a >= 61440) & (a < 65536)


def same_floats(a, b):
    """Bit for bit, any NaN equal to any NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return np.zeros(a.shape, bool)
    return (np.isnan(a) & np.isnan(b)) | (a.view(np.uint32) == b.view(np.uint32))


def test_float8_quant(k, w):
    """Float8 QuantizeLinear -> DequantizeLinear (and a Cast of the float8
    tensor to float) through kiln, ONNX Runtime and the ONNX reference
    (onnx.reference, ml_dtypes' conversions) on the same inputs: the float
    outputs must be the same bits, NaN for NaN. Where ONNX Runtime leaves the
    spec (ort_float8_deviates) the reference alone decides."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    for path, inputs, tname, sat in float8_models(w):
        name = os.path.basename(path)
        files = []
        for n, v in inputs.items():
            np.save(w(name + "_" + n + ".npy"), v)
            files.append(n + ":" + w(name + "_" + n + ".npy"))
        out = w(name + "_kiln.npz")
        rc, so_, se = run(k, "exec", "--onnx=" + path, "--loadInputs=" + ",".join(files), "--iterations=1",
                          "--duration=0", "--warmUp=0", "--exportOutput=" + out, *BACKEND_ARGS)
        if rc != 0:
            check("float8 QDQ runs in kiln: " + name, False, so_ + se)
            continue
        got = np.load(out)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        want = dict(zip(names, sess.run(names, inputs)))
        ref = dict(zip(names, ReferenceEvaluator(path).run(names, inputs)))
        scales = {"0": np.float32(0.5), "1": onnx.numpy_helper.to_array(
            [i for i in onnx.load(path).graph.initializer if i.name == "s1"][0]).reshape(1, 4, 1)}
        bad_ort, bad_ref = [], []
        for o in names:
            x = inputs["X" + o[1]]
            if o[1] == "2":  # the blocked scales, repeated over their blocks
                s = np.repeat(onnx.numpy_helper.to_array(
                    [i for i in onnx.load(path).graph.initializer if i.name == "s2"][0]), 4, axis=1)
            else:
                s = scales[o[1]]
            dev = ort_float8_deviates(tname, sat, x / s)
            ok_ort = same_floats(got[o], want[o]) | dev
            ok_ref = same_floats(got[o], ref[o])
            if not ok_ort.all():
                i = np.argwhere(~ok_ort)[0]
                bad_ort.append("%s[%s]: x %r, kiln %r, onnxruntime %r" % (o, i, x[tuple(i)], got[o][tuple(i)],
                                                                          want[o][tuple(i)]))
            if not ok_ref.all():
                i = np.argwhere(~ok_ref)[0]
                bad_ref.append("%s[%s]: x %r, kiln %r, reference %r" % (o, i, x[tuple(i)], got[o][tuple(i)],
                                                                        ref[o][tuple(i)]))
        check("float8 QDQ %s saturate %d: kiln equals onnxruntime bit for bit" % (tname, sat), not bad_ort,
              "; ".join(bad_ort))
        check("float8 QDQ %s saturate %d: kiln equals the ONNX reference bit for bit" % (tname, sat),
              not bad_ref, "; ".join(bad_ref))
    # the zero point of a float8 type must be 0: a constant one that is not is refused when building
    from onnx import TensorProto, helper
    nodes = [helper.make_node("QuantizeLinear", ["X", "s", "z"], ["q"], name="q_bad_zp"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["Y"])]
    g = helper.make_graph(nodes, "bad_zp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
                          [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s"),
                           helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], b"\x38", raw=True)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.save(m, w("qdq_f8_bad_zp.onnx"))
    rc, so_, se = run(k, "exec", "--onnx=" + w("qdq_f8_bad_zp.onnx"), "--iterations=1", "--duration=0",
                      "--warmUp=0", *BACKEND_ARGS)
    check("float8 QuantizeLinear with a zero point of 1 is refused, naming the node",
          rc != 0 and "node 'q_bad_zp' (QuantizeLinear): the zero point of a float8e4m3fn quantization "
          "must be 0; element 0 is 1" in se, so_ + se)


def test_random_ops(k, w):
    """The random ops through kiln exec (the last run's outputs): their
    statistics, a seeded node repeating its draws from a fresh context, a
    second run drawing new ones, and an unseeded node differing between
    processes."""
    from onnx import TensorProto, helper

    def model(name, node, inputs, out_type, out_shape):
        g = helper.make_graph([node], name, inputs,
                              [helper.make_tensor_value_info("y", out_type, out_shape)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
        m.ir_version = 8
        onnx.save(m, w(name + ".onnx"))
        return w(name + ".onnx")

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [100, 1000])
    np.save(w("p.npy"), np.tile(np.linspace(0, 1, 1000, dtype=np.float32), (100, 1)))
    np.save(w("logits.npy"), np.log(np.array([[1, 2, 3, 4], [5, 1e-4, 1e-4, 5]], np.float32)))
    cases = {
        "normal": (model("rnd_normal", helper.make_node("RandomNormal", [], ["y"], shape=[200, 500],
                                                        mean=1.0, scale=2.0, seed=3.0),
                         [], TensorProto.FLOAT, [200, 500]), None),
        "uniform": (model("rnd_uniform", helper.make_node("RandomUniform", [], ["y"], shape=[200, 500],
                                                          low=-1.0, high=3.0),
                          [], TensorProto.FLOAT, [200, 500]), None),
        "normal_like": (model("rnd_normal_like", helper.make_node("RandomNormalLike", ["x"], ["y"],
                                                                  dtype=TensorProto.FLOAT16, seed=2.0),
                              [x], TensorProto.FLOAT16, [100, 1000]), None),
        "bernoulli": (model("rnd_bernoulli", helper.make_node("Bernoulli", ["x"], ["y"], seed=1.0),
                            [x], TensorProto.FLOAT, [100, 1000]), "x:" + w("p.npy")),
        "multinomial": (model("rnd_multinomial",
                              helper.make_node("Multinomial", ["x"], ["y"], sample_size=20000, seed=5.0,
                                               dtype=TensorProto.INT64),
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              TensorProto.INT64, [2, 20000]), "x:" + w("logits.npy")),
    }

    def draw(name, iterations, tag):
        path, inputs = cases[name]
        out = w("%s_%s.npz" % (name, tag))
        args = ["exec", "--onnx=" + path, "--iterations=%d" % iterations, "--duration=0", "--warmUp=0",
                "--exportOutput=" + out] + BACKEND_ARGS
        if inputs:
            args.append("--loadInputs=" + inputs)
        rc, so, se = run(k, *args)
        if rc != 0:
            check("random op %s runs" % name, False, so + se)
            return None
        return np.load(out)["y"]

    y = {name: draw(name, 1, "a") for name in cases}
    if any(v is None for v in y.values()):
        return
    n = y["normal"].astype(np.float64)
    check("RandomNormal: mean 1 and scale 2", abs(n.mean() - 1) < 0.03 and abs(n.std() - 2) < 0.03,
          "mean %g std %g" % (n.mean(), n.std()))
    u = y["uniform"].astype(np.float64)
    check("RandomUniform: in [-1, 3), mean 1, std 4/sqrt(12)",
          u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1) < 0.02 and abs(u.std() - 4 / 12 ** 0.5) < 0.02,
          "min %g max %g mean %g std %g" % (u.min(), u.max(), u.mean(), u.std()))
    nl = y["normal_like"]
    check("RandomNormalLike: float16 standard normal", nl.dtype == np.float16 and
          abs(nl.astype(np.float64).mean()) < 0.02 and abs(nl.astype(np.float64).std() - 1) < 0.02)
    b = y["bernoulli"]
    rates = [b[:, i * 100:(i + 1) * 100].mean() for i in range(10)]
    check("Bernoulli: the rate follows p", set(np.unique(b)) <= {0.0, 1.0} and
          all(abs(r - (i + 0.5) / 10) < 0.03 for i, r in enumerate(rates)), str(rates))
    mn = y["multinomial"]
    f0 = np.bincount(mn[0], minlength=4) / mn.shape[1]
    f1 = np.bincount(mn[1], minlength=4) / mn.shape[1]
    check("Multinomial: frequencies follow the probabilities",
          np.allclose(f0, [0.1, 0.2, 0.3, 0.4], atol=0.015) and np.allclose(f1, [0.5, 0, 0, 0.5], atol=0.015),
          "%s %s" % (f0, f1))
    check("a seeded random op repeats its draws from a fresh context",
          np.array_equal(y["normal"], draw("normal", 1, "b")))
    check("a second run draws new numbers", not np.array_equal(y["normal"], draw("normal", 2, "c")))
    check("an unseeded random op differs between processes",
          not np.array_equal(y["uniform"], draw("uniform", 1, "d")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", default=None,
                    help="run the op checks (against ONNX Runtime, and the random ops) on this backend "
                         "and nothing else, e.g. cuda on a GPU machine")
    args = ap.parse_args()
    k = os.path.abspath(args.kiln)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    mdir = w("models")
    os.makedirs(mdir, exist_ok=True)
    gen_models.main_into(mdir)
    m = lambda name: os.path.join(mdir, name)  # noqa: E731
    if args.backend:
        BACKEND_ARGS.append("--backend=" + args.backend)
        test_random_ops(k, w)
        if HAVE_ORT:
            test_sampling_ops(k, w)
            test_float8_quant(k, w)
        print("%d passed, %d failed" % (passed, len(failed)))
        for f in failed:
            print("FAILED: " + f)
        return 1 if failed else 0

    test_io(k, w, m)
    test_writer(k, w, m)
    test_precision_pass(k, w, m)
    test_random_ops(k, w)
    if HAVE_ORT:
        test_compare(k, w, m)
        test_debug(k, w, m)
        test_sampling_ops(k, w)
        test_float8_quant(k, w)
    else:
        print("skipped: compare and debug tests against onnxruntime (not importable)")

    print("%d passed, %d failed" % (passed, len(failed)))
    for f in failed:
        print("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
