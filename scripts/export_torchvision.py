#!/usr/bin/env python3
"""export_torchvision.py - control-flow modules and torchvision's detection and
segmentation models exported by torch.onnx as users export them, for
tests/models/run_torchvision_tests.py.

  control flow (tests/models/control_flow/, small enough to keep whole):
    torch.jit.script'ed modules through the TorchScript exporter, and
    torch.cond modules through the dynamo exporter: a greedy decoding loop
    (GRU + Linear decoder, argmax token fed back, early stop on EOS -> Loop
    with a trip count and a condition, a growing token row as loop state),
    a data-dependent branch (If on a tensor's value), a recurrence with
    loop-carried state and stacked per-step outputs (scan-like Loop), a
    paste loop whose body's shapes follow values of the data (Mask R-CNN's
    paste_masks_in_image in small).
  torchvision (tests/models/torchvision/, as skeletons: tests/models/
    onnx_skeleton.py strips the large float tensors; the test refills them
    from the seed recorded in the file):
    ssdlite320_mobilenet_v3_large, retinanet_resnet50_fpn,
    fasterrcnn_mobilenet_v3_large_320_fpn, maskrcnn_resnet50_fpn,
    deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large, fcn_resnet50:
    weights=None, weights_backbone=None, 5 classes, eval mode, 256x256
    images (detectors' own resize set to 256 where they take it), through
    the TorchScript exporter (opset 17), and the segmentation models through
    the dynamo exporter too (torch.export refuses the detectors' data-
    dependent post-processing; failures are listed in manifest.json).

For each skeleton the seed is chosen (the first of SEEDS) so that ONNX Runtime
on the refilled model gives a non-empty detection set with distinct scores.
Needs torch, torchvision, onnx, onnxruntime (and onnxscript for dynamo).

Usage: python3 scripts/export_torchvision.py [--out tests/models] [--models a,b]
"""
import argparse
import json
import os
import sys
import traceback
from typing import Tuple

import numpy as np
import onnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
import onnx_skeleton  # noqa: E402

SEED = 20261203
SEEDS = range(1, 4)
IMAGE = 256
VOCAB, HIDDEN, EOS, MAX_LEN = 6, 8, 1, 16


class GreedyDecoder(nn.Module):
    """Greedy decoding: embed the last token, one GRU step, project, argmax;
    stop once a row produces EOS, or after max_len tokens (rows that have
    ended are padded with EOS)."""

    def __init__(self, max_len: int):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.gru = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.out = nn.Linear(HIDDEN, VOCAB)
        self.max_len = max_len
        self.eos = EOS

    def forward(self, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        tok = torch.zeros(h.shape[1], dtype=torch.long)
        toks = torch.zeros(h.shape[1], 0, dtype=torch.long)
        done = torch.zeros(h.shape[1], dtype=torch.bool)
        for _ in range(self.max_len):
            y, h = self.gru(self.emb(tok).unsqueeze(1), h)
            tok = self.out(y[:, 0]).argmax(-1)
            tok = torch.where(done, torch.full_like(tok, self.eos), tok)
            toks = torch.cat([toks, tok.unsqueeze(1)], 1)
            done = done | (tok == self.eos)
            if bool(done.any()):
                break
        return toks, h


class GreedyDecoderLen(GreedyDecoder):
    """The same loop with max_len a graph input (the trip count known only
    when the model runs)."""

    def forward(self, h: torch.Tensor, max_len: int) -> Tuple[torch.Tensor, torch.Tensor]:
        tok = torch.zeros(h.shape[1], dtype=torch.long)
        toks = torch.zeros(h.shape[1], 0, dtype=torch.long)
        for _ in range(max_len):
            y, h = self.gru(self.emb(tok).unsqueeze(1), h)
            tok = self.out(y[:, 0]).argmax(-1)
            toks = torch.cat([toks, tok.unsqueeze(1)], 1)
            if bool((tok == self.eos).any()):
                break
        return toks, h


class Branch(nn.Module):
    """If on a tensor's value; the branches differ in ops and in shape."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.mean() > 0):
            y = torch.relu(self.a(x)) * 2.0
        else:
            y = torch.sigmoid(self.b(x)) - 1.0
        return y.sum(-1)


class CondBranch(nn.Module):
    """The same branch as torch.cond (the dynamo exporter's control flow)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        def t(x):
            return torch.relu(self.a(x)) * 2.0

        def f(x):
            return torch.sigmoid(self.b(x)) - 1.0

        return torch.cond(x.mean() > 0, t, f, (x,))


class Recurrence(nn.Module):
    """A loop over time steps: carried state h, per-step outputs stacked
    (what Scan computes), plus a running sum as a second carried value."""

    def __init__(self):
        super().__init__()
        self.wx = nn.Linear(6, 8)
        self.wh = nn.Linear(8, 8, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        outs = []
        acc = torch.zeros_like(h)
        for t in range(x.shape[0]):
            h = torch.tanh(self.wx(x[t]) + self.wh(h))
            acc = acc + h
            outs.append(h * 0.5)
        return torch.stack(outs, 0), h, acc


class Paste(nn.Module):
    """Mask pasting as torchvision's paste_masks_in_image does it: per row,
    a piece whose length is a value of the data (not a shape), padded and
    cut back to a fixed width and stacked onto a growing carried tensor; the
    shapes inside the body are known only when it runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        starts = (x[:, 0].abs() * 3).long()
        lens = (x[:, 1].abs() * 3).long() + 1
        res = torch.zeros(0, 8)
        for i in range(x.shape[0]):
            piece = torch.ones(int(lens[i])) * x[i, 2]
            row = torch.cat([torch.zeros(int(starts[i])), piece, torch.zeros(8)])[:8]
            res = torch.cat([res, row.unsqueeze(0)], 0)
        return res


class PasteGrow(Paste):
    """The pieces concatenated without the cut: the result's length is the
    sum of values of the data, which no shape inference knows (kiln plans
    it from an estimate and its run fails naming the Loop; expected.json)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lens = (x[:, 1].abs() * 3).long() + 1
        res = torch.zeros(0)
        for i in range(x.shape[0]):
            res = torch.cat([res, torch.ones(int(lens[i])) * x[i, 2]])
        return res


def with_eos(m):
    """The decoder scripted with an EOS token that its random weights
    produce in some row after a few steps (not at the first), over draws of
    h like the test's, so that the loop stops early on its condition and
    not on max_len."""
    g = torch.Generator().manual_seed(SEED + 1)
    m.eos = -1
    firsts = []
    with torch.no_grad():
        for _ in range(8):
            h = torch.randn(1, 3, HIDDEN, generator=g)
            toks = m(h, MAX_LEN)[0] if isinstance(m, GreedyDecoderLen) else m(h)[0]
            firsts.append([int((toks == t).any(0).float().argmax()) if bool((toks == t).any()) else MAX_LEN
                           for t in range(VOCAB)])
    f = np.array(firsts)  # [draw, token]: the first step any row gives it
    # the token whose stops fall in the middle, most often
    score = [np.mean((f[:, t] >= 2) & (f[:, t] < MAX_LEN - 2)) for t in range(VOCAB)]
    m.eos = int(np.argmax(score))
    print("  %s: EOS %d, stops at steps %s" % (type(m).__name__, m.eos, f[:, m.eos].tolist()))
    return torch.jit.script(m)


def control_flow(out_dir, manifest, only):
    os.makedirs(out_dir, exist_ok=True)
    items = [
        ("greedy_decoder", lambda: with_eos(GreedyDecoder(MAX_LEN)),
         {"h": (1, 3, HIDDEN)}, ["tokens", "h_out"]),
        ("greedy_decoder_len", lambda: with_eos(GreedyDecoderLen(MAX_LEN)),
         {"h": (1, 3, HIDDEN), "max_len": ()}, ["tokens", "h_out"]),
        ("branch", lambda: torch.jit.script(Branch()), {"x": (4, 8)}, ["y"]),
        ("recurrence", lambda: torch.jit.script(Recurrence()), {"x": (5, 2, 6), "h": (2, 8)},
         ["states", "h_out", "acc"]),
        ("paste", lambda: torch.jit.script(Paste()), {"x": (6, 3)}, ["rows"]),
        ("paste_grow", lambda: torch.jit.script(PasteGrow()), {"x": (6, 3)}, ["row"]),
    ]
    for name, make, inputs, outputs in items:
        if only and name not in only:
            continue
        torch.manual_seed(SEED)
        m = make()
        args = tuple(torch.tensor(MAX_LEN) if n == "max_len" else torch.randn(*s)
                     for n, s in inputs.items())
        if name == "greedy_decoder_len":
            args = (args[0], MAX_LEN)
        key = name + ".torchscript17"
        path = os.path.join(out_dir, key + ".onnx")
        try:
            torch.onnx.export(m, args, path, dynamo=False, opset_version=17,
                              input_names=list(inputs), output_names=outputs)
            manifest[key] = describe(path, inputs)
        except Exception as e:  # noqa: BLE001 - the manifest lists why
            manifest[key] = {"ok": False, "error": short(e)}
            traceback.print_exc()
    if not only or "cond_branch" in only:
        torch.manual_seed(SEED)
        key = "cond_branch.dynamo18"
        path = os.path.join(out_dir, key + ".onnx")
        try:
            torch.onnx.export(CondBranch().eval(), (torch.randn(4, 8),), path, dynamo=True,
                              opset_version=18, input_names=["x"], output_names=["y"],
                              external_data=False)
            manifest[key] = describe(path, {"x": (4, 8)})
        except Exception as e:  # noqa: BLE001
            manifest[key] = {"ok": False, "error": short(e)}
            traceback.print_exc()


def vision_models():
    from torchvision.models import detection as D
    from torchvision.models import segmentation as S
    kw = dict(weights=None, weights_backbone=None, num_classes=5)
    det = dict(min_size=IMAGE, max_size=IMAGE)
    return [
        ("ssdlite", "detection", lambda: D.ssdlite320_mobilenet_v3_large(
            detections_per_img=20, score_thresh=0.02, **kw)),
        ("retinanet", "detection", lambda: D.retinanet_resnet50_fpn(
            detections_per_img=20, score_thresh=0.02, topk_candidates=200, **det, **kw)),
        ("fasterrcnn", "detection", lambda: D.fasterrcnn_mobilenet_v3_large_320_fpn(
            box_detections_per_img=20, rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100,
            **det, **kw)),
        ("maskrcnn", "detection", lambda: D.maskrcnn_resnet50_fpn(
            box_detections_per_img=10, rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100,
            **det, **kw)),
        ("deeplabv3", "segmentation", lambda: S.deeplabv3_mobilenet_v3_large(aux_loss=False, **kw)),
        ("lraspp", "segmentation", lambda: S.lraspp_mobilenet_v3_large(**kw)),
        ("fcn", "segmentation", lambda: S.fcn_resnet50(aux_loss=False, **kw)),
    ]


class SegOut(nn.Module):
    """The segmentation forward's "out" (the dict otherwise)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def image(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(3, IMAGE, IMAGE, generator=g)


def ort_outputs(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def pick_seed(full_path, kind, feeds, names):
    """The skeleton of full_path, its layer scales calibrated
    (onnx_skeleton.calibrate), for the first seed whose refilled model gives
    ONNX Runtime at least three detections, all finite (segmentation: finite
    outputs). Returns (seed, skeleton, outputs by name)."""
    base = onnx.load(full_path)
    onnx_skeleton.strip(base, 0)
    for seed, gain in [(s, g) for g in (2.0, 0.5) for s in SEEDS]:
        skel = onnx.ModelProto()
        skel.CopyFrom(base)
        try:  # He's start may leave a detector no proposals: a smaller one next
            runs = onnx_skeleton.calibrate(skel, feeds, seed, gain=gain)
        except Exception as e:  # noqa: BLE001 - e.g. no proposals left: a Reshape of 0 rows
            print("  seed %d gain %.1f: calibration fails: %s" % (seed, gain, short(e)[:200]))
            continue
        onnx_skeleton.strip_seed(skel, seed)
        m = onnx.ModelProto()
        m.CopyFrom(skel)
        onnx_skeleton.fill(m)
        try:
            got = dict(zip(names, ort_outputs(m, feeds)))
        except Exception as e:  # noqa: BLE001 - e.g. no proposals left: a Reshape of 0 rows
            print("  seed %d: ONNX Runtime fails: %s" % (seed, short(e)[:200]))
            continue
        finite = all(np.all(np.isfinite(v)) for v in got.values() if v.dtype.kind == "f")
        n = len(got["scores"]) if kind == "detection" else 0
        print("  seed %d: %d calibration runs, %s%s" % (seed, runs, "finite" if finite else "not finite",
                                                       ", %d detections" % n if kind == "detection" else ""))
        if finite and (kind != "detection" or n >= 3):
            return seed, skel, got
    raise RuntimeError("no seed in %s gives usable outputs" % SEEDS)


def vision(out_dir, manifest, only, dynamo):
    import tempfile
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="kiln_tv_")
    for name, kind, make in vision_models():
        if only and name not in only:
            continue
        torch.manual_seed(SEED)
        m = make().eval()
        x = image(SEED)
        if kind == "detection":
            with torch.no_grad():  # the forward's own dict order names the outputs
                outs = list(m([x])[0].keys())
            mod, args = m, ([x],)
            inputs = {"image": (3, IMAGE, IMAGE)}
            feeds = {"image": x.numpy()}
        else:
            mod, args, outs = SegOut(m).eval(), (x[None],), ["out"]  # eval: Dropout off in dynamo too
            inputs = {"image": (1, 3, IMAGE, IMAGE)}
            feeds = {"image": x[None].numpy()}
        exports = [("torchscript17", dict(dynamo=False, opset_version=17))]
        if dynamo and kind == "segmentation":  # torch.export cannot take the detectors
            exports.append(("dynamo18", dict(dynamo=True, opset_version=18, external_data=False)))
        for tag, opts in exports:
            key = "%s.%s" % (name, tag)
            full = os.path.join(tmp, key + ".onnx")
            try:
                with torch.no_grad():
                    torch.onnx.export(mod, args, full, input_names=list(inputs), output_names=outs,
                                      **opts)
                seed, skel, ref = pick_seed(full, kind, feeds, outs)
                n = sum(1 for t in onnx_skeleton._tensors(skel.graph)
                        if t.doc_string.startswith(onnx_skeleton.TAG))
                path = os.path.join(out_dir, key + ".onnx")
                onnx.save(skel, path)
                d = describe(path, inputs)
                d.update(kind=kind, seed=seed, stripped=n, full_bytes=os.path.getsize(full))
                if kind == "detection":
                    d["detections"] = int(len(ref["scores"]))
                manifest[key] = d
                print("%-26s seed %d, %d tensors stripped, %d -> %d bytes" % (
                    key, seed, n, d["full_bytes"], d["bytes"]))
            except Exception as e:  # noqa: BLE001 - the manifest lists why
                manifest[key] = {"ok": False, "error": short(e), "kind": kind}
                print("%-26s FAILED: %s" % (key, short(e)))


def short(e):
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return (type(e).__name__ + ": " + (lines[0] if lines else ""))[:300]


def describe(path, inputs):
    m = onnx.load(path)
    ops = {}

    def count(g):
        for n in g.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    count(a.g)

    count(m.graph)
    return {"ok": True, "bytes": os.path.getsize(path), "inputs": {k: list(v) for k, v in inputs.items()},
            "ops": dict(sorted(ops.items()))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "models"))
    ap.add_argument("--models", default="", help="names, e.g. ssdlite,branch")
    ap.add_argument("--no-dynamo", action="store_true")
    a = ap.parse_args()
    only = [s for s in a.models.split(",") if s]
    for sub, fn in (("control_flow", control_flow), ("torchvision", vision)):
        d = os.path.join(a.out, sub)
        mpath = os.path.join(d, "manifest.json")
        manifest = {}
        if os.path.exists(mpath):
            with open(mpath) as f:
                manifest = json.load(f).get("models", {})
        if fn is vision:
            fn(d, manifest, only, not a.no_dynamo)
        else:
            fn(d, manifest, only)
        with open(mpath, "w") as f:
            json.dump({"about": "made by scripts/export_torchvision.py (torch %s)" % torch.__version__,
                       "models": dict(sorted(manifest.items()))}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
