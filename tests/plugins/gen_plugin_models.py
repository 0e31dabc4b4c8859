#!/usr/bin/env python3
"""gen_plugin_models.py - ONNX models whose custom nodes name kiln plugins,
with inputs and numpy reference outputs for several shapes of each.

Every model <m>.onnx gets cases <m>.case<i>.txt, one line per tensor:
    in|out NAME ONNX_DTYPE RANK D0 .. Dn-1 FILE.bin
(raw little-endian data), read by test_plugins.c."""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

DOMAIN = "kiln.plugins"  # custom ops live in a domain of their own


def custom_act_ref(x, alpha):
    x = x.astype(np.float32)
    return x * 0.5 * (1.0 + np.tanh(alpha * (x + 0.044715 * x ** 3)))


def bev_pool_ref(depth, feat, ranks_depth, ranks_feat, ranks_bev, starts, lengths, bev_h, bev_w):
    """Sum over each interval of depth[rd] * feat[rf, :], scattered to [B, C, H, W]."""
    b = depth.shape[0]
    c = feat.shape[-1]
    d = depth.astype(np.float32).reshape(-1)
    f = feat.astype(np.float32).reshape(-1, c)
    out = np.zeros((b * bev_h * bev_w, c), np.float32)
    for s, l in zip(starts, lengths):
        sl = slice(s, s + l)
        out[ranks_bev[s]] = (d[ranks_depth[sl], None] * f[ranks_feat[sl]]).sum(0)
    return out.reshape(b, bev_h, bev_w, c).transpose(0, 3, 1, 2)


def save_model(out, name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 8
    onnx.save(m, os.path.join(out, name + ".onnx"))


def save_case(out, model, i, ins, outs):
    lines = []
    for kind, tensors in (("in", ins), ("out", outs)):
        for name, arr in tensors:
            arr = np.ascontiguousarray(arr)
            dt = helper.np_dtype_to_tensor_dtype(arr.dtype)
            fn = f"{model}.case{i}.{name}.bin"
            arr.tofile(os.path.join(out, fn))
            dims = " ".join(str(d) for d in arr.shape)
            lines.append(f"{kind} {name} {dt} {arr.ndim} {dims} {fn}".replace("  ", " "))
    with open(os.path.join(out, f"{model}.case{i}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def custom_act_models(out, rng):
    for dt, np_dt, tol_name in ((TensorProto.FLOAT, np.float32, "custom_act"),
                                (TensorProto.FLOAT16, np.float16, "custom_act_fp16")):
        x = helper.make_tensor_value_info("x", dt, ["N", "M"])
        y = helper.make_tensor_value_info("y", dt, ["N", "M"])
        act = helper.make_node("CustomAct", ["x"], ["a"], name="act", domain=DOMAIN, alpha=0.8,
                               plugin_version="1")
        add = helper.make_node("Add", ["a", "x"], ["y"], name="residual")
        save_model(out, tol_name, [act, add], [x], [y])
        for i, shape in enumerate(((2, 5), (3, 17), (1, 1), (4, 33))):
            xv = (rng.standard_normal(shape) * 2).astype(np_dt)
            ref = (custom_act_ref(xv, 0.8) + xv.astype(np.float32)).astype(np_dt)
            save_case(out, tol_name, i, [("x", xv)], [("y", ref)])
    # wrong identities in the node
    for name, attrs in (("custom_act_badns", {"plugin_namespace": "nope"}),
                        ("custom_act_badver", {"plugin_version": "2"}),
                        ("custom_act_badfield", {"alpha": "high"}),
                        ("custom_act_unknown", {"alpha": 0.5, "beta": 2})):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
        save_model(out, name, [helper.make_node("CustomAct", ["x"], ["y"], name="act",
                                                domain=DOMAIN, **attrs)], [x], [y])


def bev_pool_case(rng, b, n, d, h, w, c, bev_h, bev_w, points, np_dt):
    depth = rng.random((b, n, d, h, w)).astype(np_dt)
    feat = rng.standard_normal((b, n, h, w, c)).astype(np_dt)
    bi = rng.integers(0, b, points)
    ni = rng.integers(0, n, points)
    di = rng.integers(0, d, points)
    pix = rng.integers(0, h * w, points)
    ranks_depth = ((bi * n + ni) * d + di) * h * w + pix
    ranks_feat = (bi * n + ni) * h * w + pix
    ranks_bev = bi * bev_h * bev_w + rng.integers(0, bev_h * bev_w, points)
    order = np.argsort(ranks_bev, kind="stable")
    ranks_depth, ranks_feat, ranks_bev = ranks_depth[order], ranks_feat[order], ranks_bev[order]
    keep = np.ones(points, bool)
    keep[1:] = ranks_bev[1:] != ranks_bev[:-1]
    starts = np.nonzero(keep)[0]
    lengths = np.diff(np.append(starts, points))
    i32 = lambda a: a.astype(np.int32)
    ins = [("depth", depth), ("feat", feat), ("ranks_depth", i32(ranks_depth)),
           ("ranks_feat", i32(ranks_feat)), ("ranks_bev", i32(ranks_bev)),
           ("interval_starts", i32(starts)), ("interval_lengths", i32(lengths))]
    ref = bev_pool_ref(depth, feat, ranks_depth, ranks_feat, ranks_bev, starts, lengths, bev_h,
                       bev_w)
    return ins, ref.astype(np_dt)


def bev_pool_models(out, rng):
    b, n, d, h, w, c, bev_h, bev_w = 1, 2, 4, 3, 5, 8, 6, 7
    for dt, np_dt, model in ((TensorProto.FLOAT, np.float32, "bev_pool"),
                             (TensorProto.FLOAT16, np.float16, "bev_pool_fp16")):
        vi = helper.make_tensor_value_info
        inputs = [vi("depth", dt, ["B", n, d, h, w]), vi("feat", dt, ["B", n, h, w, c]),
                  vi("ranks_depth", TensorProto.INT32, ["P"]),
                  vi("ranks_feat", TensorProto.INT32, ["P"]),
                  vi("ranks_bev", TensorProto.INT32, ["P"]),
                  vi("interval_starts", TensorProto.INT32, ["K"]),
                  vi("interval_lengths", TensorProto.INT32, ["K"])]
        outputs = [vi("bev", dt, ["B", c, bev_h, bev_w])]
        node = helper.make_node("BEVPool", [i.name for i in inputs], ["bev"], name="bev_pool",
                                domain=DOMAIN, bev_h=bev_h, bev_w=bev_w)
        save_model(out, model, [node], inputs, outputs)
        for i, (bb, points) in enumerate(((1, 50), (2, 200), (1, 7), (2, 400))):
            ins, ref = bev_pool_case(rng, bb, n, d, h, w, c, bev_h, bev_w, points, np_dt)
            save_case(out, model, i, ins, [("bev", ref)])


def test_plugin_models(out, rng):
    vi = helper.make_tensor_value_info
    for op in ("FailEnqueue", "Unstable", "HalfOnly"):
        x = vi("x", TensorProto.FLOAT, ["N", 4])
        y = vi("y", TensorProto.FLOAT, ["N", 4])
        nodes = [helper.make_node(op, ["x"], ["t"], name=op.lower(), domain=DOMAIN),
                 helper.make_node("Relu", ["t"], ["y"], name="relu")]
        save_model(out, op.lower(), nodes, [x], [y])
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    save_case(out, "halfonly", 0, [("x", xv)],
              [("y", np.maximum(2 * xv.astype(np.float16).astype(np.float32), 0))])
    # a built-in op that a plugin may override
    x = vi("x", TensorProto.FLOAT, ["N"])
    y = vi("y", TensorProto.FLOAT, ["N"])
    save_model(out, "override", [helper.make_node("Neg", ["x"], ["y"], name="neg")], [x], [y])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(7)
    custom_act_models(args.out, rng)
    bev_pool_models(args.out, rng)
    test_plugin_models(args.out, rng)
    print("plugin models written to", args.out)


if __name__ == "__main__":
    main()
