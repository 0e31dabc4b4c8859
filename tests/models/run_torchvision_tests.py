#!/usr/bin/env python3
"""run_torchvision_tests.py - exported control-flow modules and torchvision's
detection and segmentation models (scripts/export_torchvision.py), each built
and run by `kiln exec` and compared with ONNX Runtime on the same model.

  --set control_flow  tests/models/control_flow/: scripted greedy decoding
                      (Loop with an EOS condition, a growing token row), a
                      data-dependent If (TorchScript and torch.cond), a
                      recurrence with carried state and stacked outputs
  --set torchvision   tests/models/torchvision/: skeletons (weights
                      stripped, tests/models/onnx_skeleton.py), refilled
                      from the seed each file records, then run

Checks, per file:
  - detection outputs (boxes, labels, scores[, masks]): non-empty; every
    detection of ONNX Runtime matched to one of kiln's with the same label,
    IoU >= 0.98 and |score difference| <= 1e-3, and every one of kiln's
    matched (by boxes, not by position: NMS order may differ on near ties),
    except at the cut (the last kept score, within 1e-3: either side may
    keep a different last one), at least 90% matched; matched masks within
    1e-2 mean and 0.25 max;
  - every other output: the same shape; floats within tol * max |ort|
    (FP32), integers and bools equal;
  - a file kiln refuses is a failure unless expected.json's "unsupported"
    (or "unsupported_cuda" with --backend cuda) lists it, with the text the
    refusal must contain, and one whose run fails unless "run_fails" (or
    "run_fails_cuda") lists it with the text; a listed file that builds or
    runs is a failure too (the lists must shrink as kiln learns).

Exit status: 0 pass, 1 fail, 77 skipped (no onnxruntime / onnx / numpy).
Usage: run_torchvision_tests.py --kiln build/kiln --work DIR [--set torchvision]
       [--models ssdlite,fcn] [--backend cuda] [--build-args=...]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:
    print("skipped: %s (python %s)" % (e, sys.executable))
    sys.exit(SKIP)

sys.path.insert(0, HERE)
import onnx_skeleton  # noqa: E402

SEED = 2026
# values of the decoders' max_len input: its profile, and the runs
MAX_LEN_PROFILE = (1, 8, 24)
MAX_LEN_RUNS = (16, 3)
IOU_MIN, SCORE_TOL = 0.98, 1e-3
MASK_MEAN_TOL, MASK_MAX_TOL = 1e-2, 0.25


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "a") as f:
        f.write("$ %s\n%s\n[exit %d after %.2f s]\n\n" % (" ".join(cmd), p.stdout, p.returncode,
                                                        time.time() - t0))
    return p


def graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    res = []
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        res.append((i.name, t.elem_type, [d.dim_value for d in t.shape.dim]))
    return res


def feeds_for(model, rng, max_len):
    feeds = {}
    for name, elem, dims in graph_inputs(model):
        if name == "max_len":
            feeds[name] = np.array(max_len, np.int64)
        elif name == "image":  # torchvision's images: values in [0, 1]
            feeds[name] = rng.random(dims, dtype=np.float32)
        elif elem == onnx.TensorProto.FLOAT:
            feeds[name] = rng.standard_normal(dims).astype(np.float32)
        else:
            raise RuntimeError("input %s: element type %d not handled" % (name, elem))
    return feeds


def spec(shapes):
    return ",".join("%s:%s" % (n, "x".join(map(str, d)) if d else "scalar") for n, d in shapes.items())


def box_iou(a, b):
    """IoU of every box of a [n, 4] with every box of b [m, 4] (x1 y1 x2 y2)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    iou = inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)
    # a box of no area (clipped to the image edge) matches its own copy
    same = np.max(np.abs(a[:, None, :] - b[None, :, :]), axis=2) <= 1e-3 * max(1.0, float(np.abs(a).max(initial=0)))
    return np.where(same, 1.0, iou)


def compare_detections(key, got, ref):
    """Match ONNX Runtime's detections to kiln's by label, IoU and score."""
    failures = []
    rb, rl, rs = (ref[n] for n in ("boxes", "labels", "scores"))
    gb, gl, gs = (got.get(n) for n in ("boxes", "labels", "scores"))
    if gb is None or gl is None or gs is None:
        return ["%s: kiln gives no boxes / labels / scores (%s)" % (key, sorted(got))]
    print("  %d detections (ONNX Runtime %d), scores %.3f..%.3f"
          % (len(gs), len(rs), float(rs.min()) if len(rs) else 0, float(rs.max()) if len(rs) else 0))
    if len(rs) == 0:
        return ["%s: ONNX Runtime gives no detections: the seed makes a useless test" % key]
    # where the set is cut (the detections_per_img-th score, or the score
    # threshold), kiln and ONNX Runtime may keep a different last detection
    # when two scores lie within rounding: one unmatched there is no error
    cut = max(float(rs.min()), float(gs.min()) if len(gs) else 0.0) + SCORE_TOL
    iou = box_iou(rb.astype(np.float64), gb.astype(np.float64)) if len(gs) else np.zeros((len(rs), 0))
    used = set()
    pairs = []
    worst_iou, worst_score, borderline = 1.0, 0.0, 0
    for i in np.argsort(-rs, kind="stable"):
        best, bj = -1.0, -1
        for j in range(len(gs)):
            if j in used or gl[j] != rl[i] or abs(float(gs[j]) - float(rs[i])) > SCORE_TOL:
                continue
            if iou[i, j] > best:
                best, bj = float(iou[i, j]), j
        if bj < 0 or best < IOU_MIN:
            if float(rs[i]) <= cut:
                borderline += 1
                continue
            failures.append("%s: ONNX Runtime's detection %d (label %d, score %.4f, box %s) has no "
                            "match in kiln's (best IoU %.3f)" % (key, i, int(rl[i]), float(rs[i]),
                                                                  np.round(rb[i], 2).tolist(), best))
            continue
        used.add(bj)
        pairs.append((i, bj))
        worst_iou = min(worst_iou, best)
        worst_score = max(worst_score, abs(float(gs[bj]) - float(rs[i])))
    for j in range(len(gs)):
        if j not in used and float(gs[j]) > cut:
            failures.append("%s: kiln's detection %d (label %d, score %.4f, box %s) is not in ONNX "
                            "Runtime's" % (key, j, int(gl[j]), float(gs[j]), np.round(gb[j], 2).tolist()))
    if len(pairs) < 0.9 * len(rs):
        failures.append("%s: only %d of ONNX Runtime's %d detections matched" % (key, len(pairs), len(rs)))
        for who, b, l, sc in (("ONNX Runtime", rb, rl, rs), ("kiln", gb, gl, gs)):
            top = np.argsort(-sc, kind="stable")[:5]
            print("  %s's first: %s" % (who, "; ".join(
                "label %d score %.4f box %s" % (int(l[k]), float(sc[k]), np.round(b[k], 1).tolist())
                for k in top)))
    print("  matched %d/%d (%d unmatched at the cut): worst IoU %.5f, worst |score diff| %.2e"
          % (len(pairs), len(rs), borderline, worst_iou, worst_score))
    if "masks" in ref:
        gm = got.get("masks")
        if gm is None:
            return failures + ["%s: kiln gives no masks" % key]
        worst_mean, worst_max = 0.0, 0.0
        for i, j in pairs:
            if gm[j].shape != ref["masks"][i].shape:
                failures.append("%s: mask shape %s, ONNX Runtime %s"
                                % (key, gm[j].shape, ref["masks"][i].shape))
                break
            d = np.abs(gm[j].astype(np.float64) - ref["masks"][i])
            worst_mean, worst_max = max(worst_mean, float(d.mean())), max(worst_max, float(d.max()))
        print("  masks: worst mean |diff| %.2e, worst max |diff| %.2e" % (worst_mean, worst_max))
        if worst_mean > MASK_MEAN_TOL or worst_max > MASK_MAX_TOL:
            failures.append("%s: masks differ: mean %.3e (<= %.0e), max %.3e (<= %.2f)"
                            % (key, worst_mean, MASK_MEAN_TOL, worst_max, MASK_MAX_TOL))
    return failures


def compare_tensors(key, got, ref, names, tol):
    failures = []
    for name in names:
        r = ref[name]
        g = got.get(name)
        if g is None or g.shape != r.shape:
            failures.append("%s: output %s is %s, ONNX Runtime gives %s"
                            % (key, name, None if g is None else g.shape, r.shape))
            continue
        if r.dtype.kind in "iub":
            bad = int(np.count_nonzero(g != r))
            print("  %-12s %s %s: %d of %d differ" % (name, r.dtype, r.shape, bad, r.size))
            if bad:
                failures.append("%s: output %s: %d of %d values differ" % (key, name, bad, r.size))
            continue
        err = float(np.max(np.abs(g.astype(np.float64) - r))) if r.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        ok = err <= tol * max(scale, 1e-12) and bool(np.all(np.isfinite(g)))
        print("  %-12s %s %s: max|err| %.3e scale %.3e %s"
              % (name, r.dtype, r.shape, err, scale, "ok" if ok else "FAIL"))
        if not ok:
            failures.append("%s: output %s: max |err| %.3e > %.0e * %.3e" % (key, name, err, tol, scale))
    return failures


def check_file(key, path, a, expected):
    work = os.path.join(a.work, key)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    open(log, "w").close()
    model = onnx.load(path)
    detection = model.graph.output[0].name == "boxes"
    if onnx_skeleton.skeleton_seed(model) is not None:
        onnx_skeleton.fill(model)
        path = os.path.join(work, key + ".filled.onnx")
        onnx.save(model, path)
    names = [o.name for o in model.graph.output]
    inputs = [n for n, _, _ in graph_inputs(model)]
    has_len = "max_len" in inputs
    plan = os.path.join(work, key + ".plan")
    cmd = [a.kiln, "exec", "--onnx=" + path, "--saveEngine=" + plan, "--skipInference"]
    if has_len:
        for flag, v in zip(("--minShapes=", "--optShapes=", "--maxShapes="), MAX_LEN_PROFILE):
            cmd.append(flag + "max_len:%d" % v)
    if a.backend:
        cmd.append("--backend=" + a.backend)
    cmd += shlex.split(a.build_args)
    p = run(cmd, log)
    gaps = dict(expected.get("unsupported", {}))
    if a.backend == "cuda":
        gaps.update(expected.get("unsupported_cuda", {}))
    known = gaps.get(key)
    run_gaps = dict(expected.get("run_fails", {}))
    if a.backend == "cuda":
        run_gaps.update(expected.get("run_fails_cuda", {}))
    known_run = run_gaps.get(key)
    if p.returncode != 0:
        if known and known in p.stdout:
            print("%-30s known gap, refused as expected: %s" % (key, known))
            return []
        return ["%s: build failed (exit %d):\n%s" % (key, p.returncode, p.stdout[-2000:])]
    if known:
        return ["%s: built, but expected.json lists it as unsupported (%s): update it" % (key, known)]
    print("%-30s built" % key)

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    failures = []
    runs = MAX_LEN_RUNS if has_len else (None,) if detection or "image" in inputs else (None, None)
    for r, max_len in enumerate(runs):
        feeds = feeds_for(model, rng, max_len)
        if r == 1 and max_len is None:  # the float inputs negated: a branch on a mean flips
            feeds = {n: -v if v.dtype == np.float32 else v for n, v in feeds.items()}
        files = []
        for iname, arr in feeds.items():
            f = os.path.join(work, "%s.%d.bin" % (iname, r))
            arr.tofile(f)
            files.append("%s:%s" % (iname, f))
        out = os.path.join(work, "out.%d.npz" % r)
        if os.path.exists(out):
            os.remove(out)
        shapes = {n: list(v.shape) for n, v in feeds.items() if n != "max_len"}
        cmd = [a.kiln, "exec", "--loadEngine=" + plan, "--loadInputs=" + ",".join(files),
               "--exportOutput=" + out, "--iterations=1", "--warmUp=0", "--duration=0"]
        if has_len:
            cmd.append("--shapes=" + spec(dict(shapes, max_len=[max_len])))
        p = run(cmd, log)
        tag = "%s run %d" % (key, r) if max_len is None else "%s (max_len %d)" % (key, max_len)
        if p.returncode != 0:
            if known_run and known_run in p.stdout:
                print("%-30s known gap, the run fails as expected: %s" % (tag, known_run))
                return failures
            failures.append("%s: kiln exec failed (exit %d):\n%s" % (tag, p.returncode, p.stdout[-2000:]))
            continue
        if known_run:
            failures.append("%s: ran, but expected.json lists it as failing at run time (%s): update it"
                            % (tag, known_run))
            continue
        with np.load(out) as z:
            got = {n: z[n] for n in z.files}
        ref = dict(zip(names, sess.run(names, feeds)))
        if detection:
            failures += compare_detections(tag, got, ref)
        else:
            failures += compare_tensors(tag, got, ref, names, a.tol)
    return failures


def cuda_device():
    """Whether a CUDA device is visible (nvidia-smi -L names one)."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--set", default="torchvision", choices=("torchvision", "control_flow"))
    ap.add_argument("--models", default="", help="model names (all exports of each)")
    ap.add_argument("--files", default="", help="file keys, e.g. ssdlite.torchscript17")
    ap.add_argument("--backend", "--device", dest="backend", default="",
                    help="kiln exec --backend (cpu or cuda; the GPU run: --device cuda)")
    ap.add_argument("--build-args", default="", help="more kiln exec build flags")
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    if a.backend == "cuda" and not cuda_device():
        print("skipped: --backend cuda and no CUDA device here (nvidia-smi -L lists none)")
        return SKIP
    folder = os.path.join(HERE, a.set)
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    keys = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".onnx"))
    if a.models:
        keys = [k for k in keys if k.split(".")[0] in a.models.split(",")]
    if a.files:
        keys = [k for k in keys if k in a.files.split(",")]
    if not keys:
        print("no file matches")
        return 1
    failures = []
    for key in keys:
        failures += check_file(key, os.path.join(folder, key + ".onnx"), a, expected)
    if failures:
        print("\n".join(["", "FAILED:"] + failures))
        print("(command logs: %s/*/log.txt)" % a.work)
        return 1
    print("PASSED: %d %s files" % (len(keys), a.set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
