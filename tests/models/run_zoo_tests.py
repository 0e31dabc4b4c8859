#!/usr/bin/env python3
"""run_zoo_tests.py - the exported zoo (tests/models/zoo/, made on the GPU
machine by scripts/export_zoo.py --size small from transformers' own classes
and forwards, both torch.onnx exporters, opset 17 and the newest): each file
built by `kiln exec` with dynamic batch and sequence, run at two shapes
against ONNX Runtime, and its fused layers counted from `kiln inspect --json`.

Checks, per file:
  - accuracy: max |kiln - ort| <= tol * max |ort| on every output (FP32);
  - fusion: at least as many kiln::Attention layers as expected.json says for
    that file (the zoo's small models have two attention layers each; a file
    listed below two is a known gap, and the report says so);
  - packing: at most as many GEMM layers (MatMul, Gemm, kiln::MatMul,
    kiln::Gemm) as expected.json's "gemms" says (Q, K and V as one GEMM,
    a gated MLP's gate and up as one), and at least as many fused layers of
    each kind "ops" lists (e.g. RotaryEmbedding);
  - a shape outside the profile is refused;
  - where expected.json's "explain" names a file, `kiln inspect` of the
    model prints that text (which pattern stopped where).

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime / onnx / numpy).
Usage: run_zoo_tests.py --kiln build/kiln --work DIR [--models bert,gpt2]
       [--files bert.torchscript17] [--report] (print counts, check nothing)
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "zoo")
SKIP = 77

try:
    import numpy as np
    import onnx
    import onnx.reference
    import onnxruntime as ort
except ImportError as e:
    print("skipped: %s (python %s)" % (e, sys.executable))
    sys.exit(SKIP)

SEED = 2026
GEMM_OPS = ("MatMul", "Gemm", "kiln::MatMul", "kiln::Gemm")
# (batch, seq, past) at the profile's min / opt / max and the shapes run
PROFILE = ((1, 4, 1), (2, 16, 8), (4, 32, 16))
RUNS = ((1, 7, 3), (3, 16, 8))
OUTSIDE = (5, 16, 8)


def graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    res = []
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        res.append((i.name, t.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                          for d in t.shape.dim]))
    return res


def input_shapes(model, b, s, p):
    """Each input's shape at batch b, sequence s, past length p, by the
    zoo's conventions (scripts/export_zoo.py): ids and masks [b, s] (masks
    [b, p + s] beside past inputs, left-padded inside the past there), images and features keep their static
    dims, past key/values [b, heads, p, head_dim]."""
    ins = graph_inputs(model)
    has_past = any(n.startswith("past_") for n, _, _ in ins)
    shapes = {}
    for name, _, dims in ins:
        if name == "input_ids":
            shapes[name] = [b, s]
        elif name == "attention_mask":
            shapes[name] = [b, p + s if has_past else s]
        elif name.startswith("past_"):
            shapes[name] = [b, dims[1], p, dims[3]]
        else:
            shapes[name] = [b] + [d if d is not None else s for d in dims[1:]]
    return shapes


def spec(shapes):
    return ",".join("%s:%s" % (n, "x".join(map(str, d))) for n, d in shapes.items())


def make_feeds(model, shapes, rng):
    vocab = 256
    feeds = {}
    for name, elem, _ in graph_inputs(model):
        shape = shapes[name]
        if name == "input_ids":
            feeds[name] = rng.integers(3, vocab, shape).astype(np.int64)
        elif name == "attention_mask":
            m = np.ones(shape, np.int64)
            past = shapes.get(next((n for n in shapes if n.startswith("past_")), ""), [0, 0, 0])[2]
            for r in range(1, shape[0]):
                if past:
                    # left padding inside the past keys (the new tokens are kept, so no
                    # query row is fully masked): row r drops its first min(2r, past) keys
                    m[r, :min(2 * r, past)] = 0
                else:
                    # padded rows, none fully masked: row r keeps s - 2r tokens
                    m[r, max(1, shape[1] - 2 * r):] = 0
            feeds[name] = m
        elif elem == onnx.TensorProto.FLOAT:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise RuntimeError("input %s: element type %d not handled" % (name, elem))
    return feeds


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "a") as f:
        f.write("$ %s\n%s\n[exit %d after %.2f s]\n\n" % (" ".join(cmd), p.stdout, p.returncode,
                                                        time.time() - t0))
    return p


def read_outputs(path):
    with open(path) as f:
        records = json.load(f)
    dt = {"float": np.float32, "int64": np.int64, "int32": np.int32}
    return {r["name"]: np.array(r["values"], dtype=dt.get(r["dtype"], np.float64)).reshape(r["shape"])
            for r in records}


def op_counts(kiln, plan, log):
    p = run([kiln, "inspect", plan, "--json"], log)
    if p.returncode != 0:
        return None
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    counts = {}
    for layer in rep["layers"]:
        # fused layers are named domain::op (kiln::Attention), as kiln inspect prints them
        dom = layer.get("domain", "")
        op = layer["op"] if dom in ("", "ai.onnx") else "%s::%s" % (dom, layer["op"])
        counts[op] = counts.get(op, 0) + 1
    return counts, len(rep["layers"])


def check_file(key, kiln, work, tol, expected, report_only):
    failures = []
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    open(log, "w").close()
    path = os.path.join(ZOO, key + ".onnx")
    model = onnx.load(path)
    plan = os.path.join(work, key + ".plan")
    lo, opt, hi = (input_shapes(model, *x) for x in PROFILE)
    p = run([kiln, "exec", "--onnx=" + path, "--saveEngine=" + plan, "--minShapes=" + spec(lo),
             "--optShapes=" + spec(opt), "--maxShapes=" + spec(hi), "--skipInference"], log)
    known = expected.get("unsupported", {}).get(key)
    if p.returncode != 0:
        if known and known in p.stdout:
            print("%-28s known gap, refused as expected: %s" % (key, known))
            return [], None
        return ["%s: build failed (exit %d):\n%s" % (key, p.returncode, p.stdout[-2000:])], None
    if known:
        failures.append("%s: built, but expected.json lists it as unsupported (%s): update it"
                        % (key, known))
    counts, nlayers = op_counts(kiln, plan, log) or ({}, 0)
    att = counts.get("kiln::Attention", 0)
    want = expected["attention"].get(key, 0)
    gemms = sum(counts.get(op, 0) for op in GEMM_OPS)
    gmax = expected.get("gemms", {}).get(key)
    print("%-28s %4d layers, %d kiln::Attention (expected >= %d), %d GEMMs (expected <= %s)"
          % (key, nlayers, att, want, gemms, gmax))
    if not report_only and att < want:
        failures.append("%s: %d kiln::Attention layers, expected at least %d" % (key, att, want))
    if not report_only and gmax is not None and gemms > gmax:
        failures.append("%s: %d GEMM layers, expected at most %d (projections not packed)"
                        % (key, gemms, gmax))
    for op, n in expected.get("ops", {}).get(key, {}).items():
        have = counts.get(op, 0)
        if op.startswith("-"):  # "-Op": at most n of Op left unfused
            have = counts.get(op[1:], 0)
            if not report_only and have > n:
                failures.append("%s: %d %s layers left, expected at most %d" % (key, have, op[1:], n))
        elif not report_only and have < n:
            failures.append("%s: %d %s layers, expected at least %d" % (key, have, op, n))

    why = expected.get("explain", {}).get(key)
    if why:  # what `kiln inspect` of the model must say stopped a pattern
        p = run([kiln, "inspect", path, "--minShapes=" + spec(lo), "--optShapes=" + spec(opt),
                 "--maxShapes=" + spec(hi)], log)
        if p.returncode != 0 or why not in p.stdout:
            failures.append("%s: kiln inspect does not explain '%s' (exit %d)" % (key, why, p.returncode))

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    for b, s, pl in RUNS:
        shapes = input_shapes(model, b, s, pl)
        feeds = make_feeds(model, shapes, rng)
        files = []
        for iname, arr in feeds.items():
            f = os.path.join(work, "%s.%dx%d.bin" % (iname, b, s))
            arr.tofile(f)
            files.append("%s:%s" % (iname, f))
        out_json = os.path.join(work, "out.%dx%d.json" % (b, s))
        p = run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + spec(shapes),
                 "--loadInputs=" + ",".join(files), "--exportOutput=" + out_json,
                 "--iterations=1", "--warmUp=0", "--duration=0"], log)
        if p.returncode != 0:
            failures.append("%s at %dx%d: kiln exec failed (exit %d):\n%s"
                            % (key, b, s, p.returncode, p.stdout[-2000:]))
            continue
        got = read_outputs(out_json)
        names = [o.name for o in sess.get_outputs()]
        try:
            refs = sess.run(names, feeds)
        except Exception as e:  # e.g. ORT's RotaryEmbedding wants per-batch caches
            print("  %dx%d ONNX Runtime refused (%s); reference: onnx.reference"
                  % (b, s, str(e).splitlines()[0][:160]))
            refs = onnx.reference.ReferenceEvaluator(model).run(names, feeds)
        for oname, ref in zip(names, refs):
            out = got.get(oname)
            if out is None or out.shape != ref.shape:
                failures.append("%s at %dx%d: output %s is %s, ONNX Runtime gives %s"
                                % (key, b, s, oname, None if out is None else out.shape, ref.shape))
                continue
            err = float(np.max(np.abs(out.astype(np.float64) - ref)))
            scale = float(np.max(np.abs(ref)))
            ok = err <= tol * max(scale, 1e-12) and bool(np.all(np.isfinite(out)))
            print("  %dx%d %-22s max|err| %.3e scale %.3e %s"
                  % (b, s, oname, err, scale, "ok" if ok else "FAIL"))
            if not ok:
                failures.append("%s at %dx%d: output %s: max |err| %.3e > %.0e * %.3e"
                                % (key, b, s, oname, err, tol, scale))
    p = run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + spec(input_shapes(model, *OUTSIDE)),
             "--iterations=1", "--warmUp=0", "--duration=0"], log)
    if p.returncode == 0:
        failures.append("%s: batch %d outside the profile was accepted" % (key, OUTSIDE[0]))
    return failures, att


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="", help="model names (all exports of each)")
    ap.add_argument("--files", default="", help="zoo keys, e.g. bert.dynamo23")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--report", action="store_true", help="print counts; fail on accuracy only")
    a = ap.parse_args()
    with open(os.path.join(ZOO, "expected.json")) as f:
        expected = json.load(f)
    keys = sorted(f[:-5] for f in os.listdir(ZOO) if f.endswith(".onnx"))
    if a.models:
        keys = [k for k in keys if k.split(".")[0] in a.models.split(",")]
    if a.files:
        keys = [k for k in keys if k in a.files.split(",")]
    if not keys:
        print("no zoo file matches")
        return 1
    failures = []
    for key in keys:
        f, _ = check_file(key, a.kiln, os.path.join(a.work, key), a.tol, expected, a.report)
        failures += f
    if failures:
        print("\n".join(["", "FAILED:"] + failures))
        print("(command logs: %s/*/log.txt)" % a.work)
        return 1
    print("PASSED: %d zoo files" % len(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
