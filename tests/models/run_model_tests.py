#!/usr/bin/env python3
"""run_model_tests.py - build kiln's small model zoo (scripts/gen_models.py
--small), run every model through `kiln exec` with loaded inputs and exported
outputs, run ONNX Runtime on the same inputs, and compare.

Each model is built once with a dynamic-batch profile (min 1, opt 2, max 4)
and run at batch 1 and 3; a batch outside the profile must be refused.
Tolerance (FP32): max |kiln - ort| <= 1e-3 * max |ort| for every output.

Exit status: 0 pass, 1 fail, 77 skipped (onnxruntime, onnx or numpy cannot be
imported; ctest shows the test as skipped).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:  # the model tests need all three
    print("skipped: %s (python %s); install onnx, onnxruntime and numpy, or set KILN_PYTHON"
          % (e, sys.executable))
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_models  # noqa: E402

PROFILE = (1, 2, 4)       # min, opt, max batch
RUN_BATCHES = (1, 3)
OUTSIDE_BATCH = 5


def graph_inputs(model):
    """(name, elem_type, dims) per real graph input; dims hold "batch" for the
    dynamic dimension."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d.dim_param if d.dim_param else d.dim_value for d in t.shape.dim]
        out.append((i.name, t.elem_type, dims))
    return out


def index_ranges(model):
    """Graph inputs used as Gather indices -> the size of the gathered axis, so
    generated indices are valid."""
    inits = {t.name: t for t in model.graph.initializer}
    ranges = {}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[0] in inits:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            ranges[n.input[1]] = inits[n.input[0]].dims[axis]
    return ranges


def make_inputs(model, batch, rng):
    ranges = index_ranges(model)
    feeds = {}
    for name, elem, dims in graph_inputs(model):
        shape = [batch if isinstance(d, str) else d for d in dims]
        if elem == onnx.TensorProto.FLOAT:
            feeds[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        elif elem == onnx.TensorProto.INT64:
            if name in ranges:
                feeds[name] = rng.integers(0, ranges[name], shape).astype(np.int64)
            else:
                # a mask: ones with a different number of trailing zeros per row
                m = np.ones(shape, np.int64)
                for r in range(1, shape[0]):
                    m[r, max(1, shape[-1] - 3 * r):] = 0
                feeds[name] = m
        else:
            raise RuntimeError("input %s: element type %d not handled" % (name, elem))
    return feeds


def shape_spec(model, batch):
    parts = []
    for name, _, dims in graph_inputs(model):
        parts.append("%s:%s" % (name, "x".join(str(batch if isinstance(d, str) else d)
                                               for d in dims)))
    return ",".join(parts)


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
    out = {}
    for r in records:
        dtype = {"float": np.float32, "int64": np.int64, "int32": np.int32}.get(r["dtype"],
                                                                             np.float64)
        out[r["name"]] = np.array(r["values"], dtype=dtype).reshape(r["shape"])
    return out


def check_model(name, kiln, work, tol, small=True, build_args=()):
    """Returns a list of failure strings (empty when the model passes)."""
    failures = []
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    open(log, "w").close()
    model = gen_models.build(name, small=small)
    onnx_path = os.path.join(work, name + ".onnx")
    onnx.save(model, onnx_path)
    plan = os.path.join(work, name + ".plan")

    t0 = time.time()
    p = run([kiln, "exec", "--onnx=" + onnx_path, "--saveEngine=" + plan,
             "--minShapes=" + shape_spec(model, PROFILE[0]),
             "--optShapes=" + shape_spec(model, PROFILE[1]),
             "--maxShapes=" + shape_spec(model, PROFILE[2]), "--skipInference"] + list(build_args),
            log)
    if p.returncode != 0:
        return ["%s: build failed (exit %d):\n%s" % (name, p.returncode, p.stdout[-3000:])]
    print("%-12s built in %.2f s" % (name, time.time() - t0))

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2026)
    for batch in RUN_BATCHES:
        feeds = make_inputs(model, batch, rng)
        files = []
        for iname, arr in feeds.items():
            f = os.path.join(work, "%s.b%d.bin" % (iname, batch))
            arr.tofile(f)
            files.append("%s:%s" % (iname, f))
        out_json = os.path.join(work, "out.b%d.json" % batch)
        p = run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + shape_spec(model, batch),
                 "--loadInputs=" + ",".join(files), "--exportOutput=" + out_json,
                 "--iterations=1", "--warmUp=0", "--duration=0"], log)
        if p.returncode != 0:
            failures.append("%s batch %d: kiln exec failed (exit %d):\n%s"
                            % (name, batch, p.returncode, p.stdout[-3000:]))
            continue
        got = read_outputs(out_json)
        ref_names = [o.name for o in sess.get_outputs()]
        refs = sess.run(ref_names, feeds)
        for oname, ref in zip(ref_names, refs):
            if oname not in got:
                failures.append("%s batch %d: output %s missing from kiln's export"
                                % (name, batch, oname))
                continue
            out = got[oname]
            if out.shape != ref.shape:
                failures.append("%s batch %d: output %s shape %s, ONNX Runtime %s"
                                % (name, batch, oname, out.shape, ref.shape))
                continue
            err = float(np.max(np.abs(out.astype(np.float64) - ref)))
            scale = float(np.max(np.abs(ref)))
            rel = err / max(scale, 1e-12)
            ok = rel <= tol and np.all(np.isfinite(out))
            print("%-12s batch %d  %-18s max|err| %.3e  scale %.3e  rel %.3e  %s"
                  % (name, batch, oname, err, scale, rel, "ok" if ok else "FAIL"))
            if not ok:
                failures.append("%s batch %d: output %s differs: max |err| %.3e > %.1e * %.3e"
                                % (name, batch, oname, err, tol, scale))

    # A batch outside the profile must be refused with a message, not run.
    p = run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + shape_spec(model, OUTSIDE_BATCH),
             "--iterations=1", "--warmUp=0", "--duration=0"], log)
    if p.returncode == 0:
        failures.append("%s: batch %d outside the profile (max %d) was accepted"
                        % (name, OUTSIDE_BATCH, PROFILE[2]))
    else:
        print("%-12s batch %d  refused as outside the profile: ok" % (name, OUTSIDE_BATCH))
    return failures


def main():
    ap = argparse.ArgumentParser(description="kiln model tests against ONNX Runtime")
    ap.add_argument("--kiln", required=True, help="the kiln executable")
    ap.add_argument("--work", required=True, help="scratch folder")
    ap.add_argument("--models", default=",".join(gen_models.ALL_MODELS))
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="max |err| relative to max |reference| (default 1e-3, FP32)")
    ap.add_argument("--full", action="store_true",
                    help="full-size models instead of --small ones (slow; for manual runs)")
    ap.add_argument("--build-args", default="",
                    help="extra `kiln exec` flags for the build, space-separated "
                         "(e.g. '--backend=cuda' or '--backend=cuda --fp16' with a wider --tol)")
    args = ap.parse_args()
    failures = []
    for name in args.models.split(","):
        failures += check_model(name, args.kiln, os.path.join(args.work, name), args.tol,
                                small=not args.full, build_args=args.build_args.split())
    if failures:
        print("\n".join(["", "FAILED:"] + failures))
        print("(full command log: %s/*/log.txt)" % args.work)
        return 1
    print("PASSED: %s" % args.models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
