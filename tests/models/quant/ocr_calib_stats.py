#!/usr/bin/env python3
"""ocr_calib_stats.py - the per-tensor figures behind docs/accuracy.md's
"Why" of entropy calibration on PP-OCRv4 (not a test): runs the FP32
recognizer in ONNX Runtime on run_ocr_tests.py's 24 calibration lines, with
the activation inputs of every Conv / MatMul / Gemm as outputs, and prints
for each tensor its maximum |x|, the fraction of values that repeat another
exactly, and, as fractions of the maximum, the thresholds of TensorRT's KL
search (as src/builder/calib.c computes it), of the same search on the
histogram without the repeats, the 99.99 / 99.999 percentiles and the
histogram's expected-squared-error minimum, with the fraction of values the
KL threshold clips and the relative RMS error of each.
Usage: ocr_calib_stats.py [TENSOR_INDEX ...]  (all tensors by default)"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_ocr_tests as R  # noqa: E402  (exits 77 when its packages are missing)

NB, L = 2048, 128


def hist_of(v, amax):
    a = np.abs(v.ravel().astype(np.float64))
    a = a[a > 0]
    j = np.minimum((a * (NB / amax)).astype(np.int64), NB - 1)
    return np.bincount(j, minlength=NB).astype(np.float64)


def kl_thr(h, amax, eps=1e-4):
    """calib.c's kcal_threshold_entropy, vectorized per candidate."""
    ch = np.concatenate([[0], np.cumsum(h)])
    cz = np.concatenate([[0], np.cumsum(h != 0)])
    tail = ch[-1] - ch
    best = (np.inf, NB)
    for i in range(L, NB + 1):
        k = np.arange(L)
        a, e = k * i // L, (k + 1) * i // L
        lsum, lnz = ch[e] - ch[a], cz[e] - cz[a]
        q = np.where(h[:i] != 0, (lsum / np.maximum(lnz, 1))[np.repeat(k, e - a)], 0.0)
        p = h[:i].copy()
        p[i - 1] += tail[i]
        zeros, nonz = ((p > 0) & (q <= 0)).sum(), (q > 0).sum()
        qj = np.where(q > 0, q / q.sum() - eps * zeros / nonz, eps)
        qj = np.where(qj <= 0, eps, qj)
        m = p > 0
        pj = p[m] / p.sum()
        kl = float((pj * np.log(pj / qj[m])).sum())
        if kl < best[0]:
            best = (kl, i)
    return best[1] * amax / NB


def pct(h, amax, p):
    c = np.cumsum(h)
    return (np.searchsorted(c, p / 100 * c[-1]) + 1) * amax / NB


def mse_thr(h, amax):
    w = amax / NB
    cen = (np.arange(NB) + 0.5) * w
    best = None
    for i in range(L, NB + 1):
        t = i * w
        err = h[:i].sum() * (t / 127) ** 2 / 12 + (h[i:] * (cen[i:] - t) ** 2).sum()
        if best is None or err < best[0]:
            best = (err, t)
    return best[1]


def qerr(v, t):
    s = t / 127
    q = np.clip(np.round(v / s), -127, 127) * s
    return np.sqrt(np.mean((q - v) ** 2)) / (np.sqrt(np.mean(v ** 2)) + 1e-30)


def main():
    m = onnx.load(R.REC)
    g = m.graph
    skip = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant"
                                              for o in n.output}
    acts = []
    for n in g.node:
        if n.op_type in ("Conv", "MatMul", "Gemm"):
            for k, t in enumerate(n.input[:2]):
                if t not in skip and t not in acts and (k == 0 or n.op_type == "MatMul"):
                    acts.append(t)
    outs = {o.name for o in g.output}
    for a in acts:
        if a not in outs and a != g.input[0].name:
            g.output.append(onnx.ValueInfoProto(name=a))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    _, cal = R.batch(1000, R.N_CAL)
    names = [o.name for o in s.get_outputs()]
    vals = {a: [] for a in acts}
    for k in range(0, len(cal), 8):
        r = dict(zip(names, s.run(None, {"x": cal[k:k + 8]})))
        r["x"] = cal[k:k + 8]
        for a in acts:
            vals[a].append(r[a])
    pick = [int(a) for a in sys.argv[1:]] or range(len(acts))
    print("idx tensor amax repeats | kl (clipped, err) | kl-no-repeats | p99.99 (err) p99.999 "
          "| mse-min (err) | min-max err")
    for i in pick:
        v = np.concatenate(vals[acts[i]])
        amax = float(np.abs(v).max())
        h = hist_of(v, amax)
        u = np.unique(v.ravel())
        te, tu = kl_thr(h, amax), kl_thr(hist_of(u, amax), amax)
        t4, t5, tm = pct(h, amax, 99.99), pct(h, amax, 99.999), mse_thr(h, amax)
        print("%2d %-28s %8.3f %.2f | %.3f (%.4f, %.3f) | %.3f | %.3f (%.3f) %.3f | %.3f (%.3f) | %.3f"
              % (i, acts[i][-28:], amax, 1 - u.size / v.size, te / amax, (np.abs(v) > te).mean(),
                 qerr(v, te), tu / amax, t4 / amax, qerr(v, t4), t5 / amax, tm / amax,
                 qerr(v, tm), qerr(v, amax)), flush=True)


if __name__ == "__main__":
    main()
