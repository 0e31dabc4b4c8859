#!/usr/bin/env python3
"""run_attention_ops.py - the attention ops the builder maps onto
kiln::Attention, conformance-style: small graphs made here with onnx.helper
(fixed seed), built by `kiln exec` with a dynamic batch, run at two batches
and compared with a reference that is not kiln:

  - ONNX Attention (opset 23) with past_key / past_value inputs, the present
    outputs, is_causal, softcap, 3-D (grouped heads) and 4-D: onnx.reference;
  - com.microsoft GroupQueryAttention in its prompt form (unpacked and packed
    QKV, softcap, seqlens_k of padded batches): ONNX Runtime; with its present
    outputs read it is not mapped and kiln's reference kernel runs it.

Each plan must hold a kiln::Attention and no attention op left (the mapping
happened; the last case the reverse); outputs within 1e-4 of the reference's
scale.
Exit status: 0 pass, 1 fail, 77 skipped (no onnx / onnxruntime / numpy).
Usage: run_attention_ops.py --kiln build/kiln --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

SKIP = 77
try:
    import numpy as np
    import onnx
    import onnx.reference
    from onnx import TensorProto, helper
    import onnxruntime as ort
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(SKIP)

SEED = 29
S, D, HQ, HKV, P = 5, 8, 4, 2, 3


def attention_past(rank, causal, mask, softcap=0.0):
    """ONNX Attention over x [B, S, HQ*D] projections, with a past cache."""
    rng = np.random.default_rng(SEED)
    e = HQ * D
    hkv = HKV if rank == 3 else HQ
    inits = [helper.make_tensor(n, TensorProto.FLOAT, w.shape, w.flatten())
             for n, w in (("Wq", rng.standard_normal((e, e)).astype(np.float32) * 0.3),
                          ("Wk", rng.standard_normal((e, hkv * D)).astype(np.float32) * 0.3),
                          ("Wv", rng.standard_normal((e, hkv * D)).astype(np.float32) * 0.3))]
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q3"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k3"]),
             helper.make_node("MatMul", ["x", "Wv"], ["v3"])]
    names = ["q3", "k3", "v3"]
    if rank == 4:
        for j, (h, t) in enumerate(((HQ, "q3"), (hkv, "k3"), (hkv, "v3"))):
            shp = "shape_%d" % j
            inits.append(helper.make_tensor(shp, TensorProto.INT64, [4], [0, 0, h, D]))
            nodes += [helper.make_node("Reshape", [t, shp], [t + "r"]),
                      helper.make_node("Transpose", [t + "r"], [t + "t"], perm=[0, 2, 1, 3])]
            names[j] = t + "t"
    ins = names + ["mask" if mask else "", "past_k", "past_v"]
    attrs = {"is_causal": 1 if causal else 0}
    if softcap:
        attrs["softcap"] = softcap
    if rank == 3:
        attrs.update(q_num_heads=HQ, kv_num_heads=hkv)
    out = "o4" if rank == 4 else "y"
    nodes.append(helper.make_node("Attention", ins, [out, "present_k", "present_v"], **attrs))
    if rank == 4:
        inits.append(helper.make_tensor("shape3", TensorProto.INT64, [3], [0, 0, e]))
        nodes += [helper.make_node("Transpose", ["o4"], ["o4t"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["o4t", "shape3"], ["y"])]
    if mask:
        m = rng.standard_normal((1, 1, S, P + S)).astype(np.float32)
        inits.append(helper.make_tensor("mask", TensorProto.FLOAT, m.shape, m.flatten()))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", S, e]),
              helper.make_tensor_value_info("past_k", TensorProto.FLOAT, ["b", hkv, P, D]),
              helper.make_tensor_value_info("past_v", TensorProto.FLOAT, ["b", hkv, P, D])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("present_k", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("present_v", TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, "attention_past", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def gqa(packed, present=False, softcap=0.0):
    """com.microsoft GroupQueryAttention, prompt form, over x projections
    (present: its present key / value are graph outputs too)."""
    rng = np.random.default_rng(SEED)
    e = HQ * D
    widths = (("Wq", HQ * D), ("Wk", HKV * D), ("Wv", HKV * D))
    if packed:
        widths = (("Wqkv", (HQ + 2 * HKV) * D),)
    inits, nodes, names = [], [], []
    for n, w in widths:
        m = rng.standard_normal((e, w)).astype(np.float32) * 0.3
        inits.append(helper.make_tensor(n, TensorProto.FLOAT, m.shape, m.flatten()))
        nodes.append(helper.make_node("MatMul", ["x", n], [n + "_out"]))
        names.append(n + "_out")
    ins = names + ([""] * 2 if packed else []) + ["", "", "seqlens_k", "total_len"]
    nodes.append(helper.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"],
                                  domain="com.microsoft", num_heads=HQ, kv_num_heads=HKV,
                                  **({"softcap": softcap} if softcap else {})))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", S, e]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["b"]),
              helper.make_tensor_value_info("total_len", TensorProto.INT32, [1])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in (("y", "present_k", "present_v") if present else ("y",))]
    g = helper.make_graph(nodes, "gqa", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.microsoft", 1)])


def feeds_for(model, b, rng):
    f = {}
    for i in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else b for d in i.type.tensor_type.shape.dim]
        if i.name == "seqlens_k":
            # right padding: batch i keeps S - 2i tokens (at least one)
            f[i.name] = np.array([max(S - 1 - 2 * k, 0) for k in range(b)], np.int32)
        elif i.name == "total_len":
            f[i.name] = np.array([S], np.int32)
        else:
            f[i.name] = rng.standard_normal(dims).astype(np.float32)
    return f


def spec(model, b):
    parts = []
    for i in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else b for d in i.type.tensor_type.shape.dim]
        parts.append("%s:%s" % (i.name, "x".join(map(str, dims))))
    return ",".join(parts)


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def check(kiln, work, key, model, reference, mapped=True):
    fails = []
    path = os.path.join(work, key + ".onnx")
    onnx.save(model, path)
    plan = os.path.join(work, key + ".plan")
    p = run([kiln, "exec", "--onnx=" + path, "--saveEngine=" + plan, "--minShapes=" + spec(model, 1),
             "--optShapes=" + spec(model, 2), "--maxShapes=" + spec(model, 4), "--skipInference"])
    if p.returncode:
        return ["%s: build failed:\n%s" % (key, p.stdout[-1500:])]
    p = run([kiln, "inspect", plan, "--json"])
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    ops = [(l.get("domain", ""), l["op"]) for l in rep["layers"]]
    att = ops.count(("kiln", "Attention"))
    left = sum(1 for d, o in ops if o in ("Attention", "GroupQueryAttention") and d != "kiln")
    print("%-24s %d kiln::Attention, %d attention ops left" % (key, att, left))
    if (att, left) != ((1, 0) if mapped else (0, 1)):
        fails.append("%s: %d kiln::Attention and %d attention ops left (expected %s)"
                     % (key, att, left, "1 and 0" if mapped else "0 and 1: the reference kernel"))
    rng = np.random.default_rng(SEED)
    names = [o.name for o in model.graph.output]
    for b in (1, 3):
        feeds = feeds_for(model, b, rng)
        files = []
        for n, a in feeds.items():
            fn = os.path.join(work, "%s.%s.%d.bin" % (key, n, b))
            a.tofile(fn)
            files.append("%s:%s" % (n, fn))
        oj = os.path.join(work, "%s.%d.json" % (key, b))
        p = run([kiln, "exec", "--loadEngine=" + plan, "--shapes=" + spec(model, b),
                 "--loadInputs=" + ",".join(files), "--exportOutput=" + oj, "--iterations=1",
                 "--warmUp=0", "--duration=0"])
        if p.returncode:
            fails.append("%s at batch %d: run failed:\n%s" % (key, b, p.stdout[-1500:]))
            continue
        with open(oj) as f:
            got = {r["name"]: np.array(r["values"], np.float64).reshape(r["shape"]) for r in json.load(f)}
        refs = reference(model, names, feeds)
        for n, ref in zip(names, refs):
            out = got.get(n)
            if out is None or out.shape != ref.shape:
                fails.append("%s at batch %d: %s is %s, the reference %s"
                             % (key, b, n, None if out is None else out.shape, ref.shape))
                continue
            err = float(np.max(np.abs(out - ref)))
            scale = max(float(np.max(np.abs(ref))), 1e-12)
            ok = err <= 1e-4 * scale
            print("  batch %d %-10s max|err| %.3e scale %.3e %s" % (b, n, err, scale, "ok" if ok else "FAIL"))
            if not ok:
                fails.append("%s at batch %d: %s differs by %.3e (scale %.3e)" % (key, b, n, err, scale))
    return fails


def onnx_reference(model, names, feeds):
    return onnx.reference.ReferenceEvaluator(model).run(names, feeds)


def ort_reference(model, names, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(names, feeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cases = [("attention_past_4d_causal", attention_past(4, True, True), onnx_reference),
             ("attention_past_3d_causal", attention_past(3, True, False), onnx_reference),
             ("attention_past_3d_mask", attention_past(3, False, True), onnx_reference),
             ("attention_past_4d_softcap", attention_past(4, True, True, 1.5), onnx_reference),
             ("gqa_prompt", gqa(False), ort_reference),
             ("gqa_prompt_packed", gqa(True), ort_reference),
             ("gqa_prompt_softcap", gqa(False, softcap=1.5), ort_reference),
             ("gqa_prompt_present", gqa(False, True), ort_reference)]
    fails = []
    for key, model, ref in cases:
        # present outputs read: not mapped (ONNX Runtime sizes them by
        # total_sequence_length), the reference kernel runs it
        fails += check(a.kiln, a.work, key, model, ref, mapped=not key.endswith("present"))
    if fails:
        print("\n".join(["", "FAILED:"] + fails))
        return 1
    print("PASSED: %d attention-op graphs" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
