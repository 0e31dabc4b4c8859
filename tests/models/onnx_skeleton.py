#!/usr/bin/env python3
"""onnx_skeleton.py - keep large ONNX models out of the repository: strip the
data of their large float tensors into a "skeleton" (same graph, same tensor
names, dtypes and shapes, no values), and refill a skeleton from a fixed seed.

What is stripped: every float tensor (FLOAT, FLOAT16, DOUBLE, BFLOAT16) with at
least MIN_ELEMS elements, whether an initializer or a Constant node's value, in
the main graph and in every subgraph (If / Loop / Scan bodies, nested).
Integer and bool tensors, and small float ones, are kept verbatim: they are
structure (shapes, axes, indices, thresholds, scales).

What a stripped tensor keeps: its name, dtype and dims, its data cleared, and a
doc_string "kiln-skeleton {json}" with the original's mean, std, min and max.
The model carries metadata_props "kiln.skeleton" = {"seed": S} (the seed the
exporter chose so that the refilled model is well behaved, e.g. detections
are not empty).

Refill: a tensor read as the weight of a Conv, ConvTranspose, Gemm or MatMul
(input 1) gets He's initialization, N(0, 2 / fan_in), fan_in from its shape
and the op (the strip records it): a randomly initialized torch model often
has activations that vanish through its layers (torchvision's SSD heads see
features of 1e-14), which would make every score equal and every comparison
trivial; He's scale keeps them of order one. Every other stripped tensor is
drawn from N(mean, std) clipped to [min, max] (so a variance stays positive
and a constant stays constant). Each is drawn with numpy's PCG64 seeded by
(seed, crc32(name)), so the values depend on the tensor's name and the seed
only, not on the order of the tensors or on numpy's global state.

Usage: onnx_skeleton.py strip IN.onnx OUT.onnx [--seed S]
       onnx_skeleton.py fill SKELETON.onnx OUT.onnx [--seed S]
"""
import argparse
import json
import sys
import zlib

import numpy as np
import onnx
from onnx import numpy_helper

MIN_ELEMS = 64
TAG = "kiln-skeleton "
META = "kiln.skeleton"
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
          onnx.TensorProto.BFLOAT16)


def _tensors(graph):
    """Every TensorProto of a graph and its subgraphs: initializers and the
    value attributes of Constant nodes."""
    for t in graph.initializer:
        yield t
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _tensors(g)


def _name(t, i):
    # a Constant node's tensor may be unnamed: its position names it instead
    return t.name if t.name else "#%d" % i


def _fan_ins(graph, out):
    """name -> fan_in for the tensors graph (and its subgraphs) reads as a
    Conv / ConvTranspose / Gemm / MatMul weight."""
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            shapes[node.output[0]] = list(node.attribute[0].t.dims)
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _fan_ins(g, out)
        if node.domain not in ("", "ai.onnx") or len(node.input) < 2 or node.input[1] not in shapes:
            continue
        w, dims = node.input[1], shapes[node.input[1]]
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Conv" and len(dims) >= 3:
            out[w] = int(np.prod(dims[1:]))
        elif node.op_type == "ConvTranspose" and len(dims) >= 3:
            group = attrs["group"].i if "group" in attrs else 1
            out[w] = int(dims[0] // max(group, 1) * np.prod(dims[2:]))
        elif node.op_type == "Gemm" and len(dims) == 2:
            trans = attrs["transB"].i if "transB" in attrs else 0
            out[w] = int(dims[1] if trans else dims[0])
        elif node.op_type == "MatMul" and len(dims) >= 2:
            out[w] = int(dims[-2])
    return out


def strip(model, seed=0, min_elems=MIN_ELEMS):
    """Clear the data of the large float tensors of model (in place)."""
    stripped = 0
    fan_in = _fan_ins(model.graph, {})
    for i, t in enumerate(_tensors(model.graph)):
        if t.data_type not in FLOATS or t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n < min_elems:
            continue
        a = numpy_helper.to_array(t).astype(np.float64)
        stats = {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()),
                 "max": float(a.max())}
        if t.name in fan_in:
            stats["fan_in"] = fan_in[t.name]
        name = t.name
        dims = list(t.dims)
        dtype = t.data_type
        t.Clear()
        t.name = name
        t.dims.extend(dims)
        t.data_type = dtype
        t.doc_string = TAG + json.dumps(stats, sort_keys=True)
        stripped += 1
    strip_seed(model, seed)
    return stripped


def strip_seed(model, seed):
    """Record the seed a skeleton is to be refilled with."""
    for p in list(model.metadata_props):
        if p.key == META:
            model.metadata_props.remove(p)
    p = model.metadata_props.add()
    p.key = META
    p.value = json.dumps({"seed": int(seed)})


def skeleton_seed(model):
    for p in model.metadata_props:
        if p.key == META:
            return int(json.loads(p.value)["seed"])
    return None


def fill(model, seed=None):
    """Refill a skeleton's stripped tensors (in place); seed None takes the
    one the skeleton records. Returns the number of tensors filled."""
    if seed is None:
        seed = skeleton_seed(model)
        if seed is None:
            raise ValueError("not a skeleton: no %s metadata" % META)
    filled = 0
    for i, t in enumerate(_tensors(model.graph)):
        if not t.doc_string.startswith(TAG):
            continue
        s = json.loads(t.doc_string[len(TAG):])
        key = zlib.crc32(_name(t, i).encode())
        rng = np.random.Generator(np.random.PCG64([int(seed), key]))
        dims = list(t.dims)
        a = rng.standard_normal(int(np.prod(dims)) if dims else 1)
        if "scale" in s:  # a layer's weight, its scale calibrated (calibrate)
            a = (a * s["scale"]).reshape(dims)
        elif "fan_in" in s:  # a layer's weight: He's scale
            a = (a * np.sqrt(2.0 / max(s["fan_in"], 1))).reshape(dims)
        else:
            a = np.clip(a * s["std"] + s["mean"], s["min"], s["max"]).reshape(dims)
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        if t.data_type == onnx.TensorProto.BFLOAT16:
            filled_t = onnx.helper.make_tensor(t.name, t.data_type, dims,
                                               a.astype(np.float32).flatten().tolist())
        else:
            filled_t = numpy_helper.from_array(a.astype(np_dtype), t.name)
        t.CopyFrom(filled_t)
        filled += 1
    return filled


def _weight_uses(graph):
    """weight name -> [(input, output)] of the main graph's Conv / Gemm /
    MatMul nodes that read it as input 1."""
    uses = {}
    for n in graph.node:
        if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1:
            uses.setdefault(n.input[1], []).append((n.input[0], n.output[0]))
    return uses


def calibrate(model, feeds, seed, tol=0.2, max_runs=400, gain=2.0):
    """Set the scale each layer weight of skeleton `model` is refilled with
    so that every layer's output has a standard deviation near one
    (starting from sqrt(gain / fan_in), He's for gain 2)
    (layer-sequential unit variance: in graph order, the first layer whose
    output is off by more than tol is rescaled and the model run again), by
    running the refilled model with ONNX Runtime on `feeds`. The scales are
    graph inputs of the model run here (weight = unit draw * scale), so one
    session serves every run. They are written into the tensors' records,
    so a later fill(seed) reproduces them. Returns the number of runs."""
    import onnxruntime as ort
    uses = _weight_uses(model.graph)
    recs = {}
    for t in model.graph.initializer:
        if t.doc_string.startswith(TAG) and t.name in uses:
            r = json.loads(t.doc_string[len(TAG):])
            if "fan_in" in r:
                r.pop("scale", None)
                recs[t.name] = (t, r)
    if not recs:
        return 0
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name in recs:  # the unit draw: scale 1
            r = dict(recs[t.name][1], scale=1.0)
            t.doc_string = TAG + json.dumps(r, sort_keys=True)
            t.name = t.name + "__unit"
    fill(m, seed)
    muls = []
    for w in recs:
        m.graph.input.append(onnx.helper.make_tensor_value_info(w + "__scale", onnx.TensorProto.FLOAT, []))
        muls.append(onnx.helper.make_node("Mul", [w + "__unit", w + "__scale"], [w]))
    nodes = muls + list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    order = []  # the layers in graph order: (weight, output)
    for n in model.graph.node:
        if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in recs:
            order.append((n.input[1], n.output[0]))
    have = {o.name for o in m.graph.output}
    outs = sorted({y for _, y in order})
    for y in outs:
        if y not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(y))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    scale = {w: float(np.sqrt(gain / max(r["fan_in"], 1))) for w, (t, r) in recs.items()}
    runs = 0
    start = 0
    while runs < max_runs:
        f = dict(feeds)
        f.update({w + "__scale": np.array(v, np.float32) for w, v in scale.items()})
        vals = dict(zip(outs, sess.run(outs, f)))
        runs += 1
        fixed = False
        for k in range(start, len(order)):
            w, y = order[k]
            sy = float(np.std(vals[y])) if vals[y].size else 1.0
            if not np.isfinite(sy) or sy == 0 or abs(sy - 1.0) <= tol:
                continue
            scale[w] /= sy
            start = k
            fixed = True
            break
        if not fixed:
            break
    for w, (t, r) in recs.items():
        r["scale"] = scale[w]
        t.doc_string = TAG + json.dumps(r, sort_keys=True)
    return runs


def load_filled(path, seed=None):
    """A skeleton file refilled, ready for ONNX Runtime or to be saved."""
    m = onnx.load(path)
    fill(m, seed)
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip")
    s.add_argument("inp")
    s.add_argument("out")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--min-elems", type=int, default=MIN_ELEMS)
    f = sub.add_parser("fill")
    f.add_argument("inp")
    f.add_argument("out")
    f.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    m = onnx.load(a.inp)
    if a.cmd == "strip":
        n = strip(m, a.seed, a.min_elems)
    else:
        n = fill(m, a.seed)
    onnx.save(m, a.out)
    print("%s: %d tensors %s" % (a.out, n, "stripped" if a.cmd == "strip" else "filled"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
