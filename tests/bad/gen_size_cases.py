#!/usr/bin/env python3
"""gen_size_cases.py - the bad-input catalog for sizes: ONNX models whose
shapes overflow or whose attributes are absurd (tests/bad/onnx/size_*.onnx,
ub_*.onnx; ubk_*.onnx: constants whose arithmetic overflows inside the CPU
kernels, tests/unit/test_bad_kernels.c), and plans built from good models
with one layer field or profile dim rewritten and the checksums recomputed,
as a hostile plan would be (tests/bad/plans/size_*.plan). tests/unit/test_bad_sizes.c holds the error
each must give. Run from the repository root with a python that has onnx,
after building kiln (the plans are built by build/kiln, or KILN=path):
    python tests/bad/gen_size_cases.py"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

root = os.path.dirname(os.path.abspath(__file__))
onnx_dir = os.path.join(root, "onnx")
plan_dir = os.path.join(root, "plans")
kiln = os.environ.get("KILN", os.path.join(root, "..", "..", "build", "kiln"))

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "sizes", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def f32(name, values, shape=None):
    a = np.array(values, dtype=np.float32)
    return numpy_helper.from_array(a.reshape(shape) if shape else a, name)


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


cases = {}
# -- sizes that overflow (each built and "PASSED" on b149bd2, planned as 0 bytes)
cases["size_expand"] = model(
    [node("Expand", ["x", "shape"], ["y"], "expand")],
    [vi("x", [1])], [vi("y", None)], [i64("shape", [1 << 31, 1 << 31])])
cases["size_constant_of_shape"] = model(
    [node("ConstantOfShape", ["shape"], ["c"], "fill"),
     node("Add", ["x", "c"], ["y"], "add")],
    [vi("x", [1])], [vi("y", None)], [i64("shape", [1 << 31, 1 << 31])])
cases["size_range"] = model(
    [node("Range", ["start", "limit", "delta"], ["r"], "range"),
     node("Add", ["x", "r"], ["y"], "add")],
    [vi("x", [1], TensorProto.INT64)], [vi("y", None, TensorProto.INT64)],
    [i64("start", 0), i64("limit", 1 << 62), i64("delta", 1)])
cases["size_conv_transpose_output_padding"] = model(
    [node("ConvTranspose", ["x", "w"], ["y"], "convt", output_padding=[1 << 30, 1 << 30])],
    [vi("x", [1, 1, 2, 2])], [vi("y", None)], [f32("w", [1.0], [1, 1, 1, 1])])
cases["size_relu_input"] = model(
    [node("Relu", ["x"], ["y"], "relu")],
    [vi("x", [1 << 31, 1 << 31, 4])], [vi("y", [1 << 31, 1 << 31, 4])])
cases["size_tile"] = model(
    [node("Tile", ["x", "repeats"], ["y"], "tile")],
    [vi("x", [1, 1])], [vi("y", None)], [i64("repeats", [1 << 40, 1 << 42])])
# the shape comes from a shape-tensor input; the test sets its profile values
cases["size_shape_input"] = model(
    [node("Expand", ["x", "s"], ["y"], "expand")],
    [vi("x", [1]), vi("s", [2], TensorProto.INT64)], [vi("y", None)])

# -- absurd attributes whose arithmetic overflowed int64 (undefined behaviour)
conv_x, conv_w = vi("x", [1, 4, 4, 4]), f32("w", np.ones(4), [1, 4, 1, 1])
cases["ub_conv_group"] = model(
    [node("Conv", ["x", "w"], ["y"], "conv", group=1 << 62)], [conv_x], [vi("y", None)], [conv_w])
cases["ub_conv_pads"] = model(
    [node("Conv", ["x", "w"], ["y"], "conv", pads=[1 << 62] * 4)], [conv_x], [vi("y", None)],
    [conv_w])
cases["ub_conv_dilations"] = model(
    [node("Conv", ["x", "w3"], ["y"], "conv", dilations=[1 << 62, 1 << 62])], [conv_x],
    [vi("y", None)], [f32("w3", np.ones(36), [1, 4, 3, 3])])
cases["ub_conv_transpose_output_padding"] = model(
    [node("ConvTranspose", ["x", "w"], ["y"], "convt", output_padding=[1 << 40, 1 << 40])],
    [vi("x", [1, 1, 2, 2])], [vi("y", None)], [f32("w", [1.0], [1, 1, 1, 1])])
cases["ub_maxpool_strides"] = model(
    [node("MaxPool", ["x"], ["y"], "pool", kernel_shape=[1, 1], strides=[1 << 62, 1 << 62],
          ceil_mode=1)],
    [conv_x], [vi("y", None)])
cases["ub_reshape"] = model(
    [node("Reshape", ["x", "shape"], ["y"], "reshape")],
    [vi("x", [4])], [vi("y", None)], [i64("shape", [-1, 1 << 40, 1 << 40])])
cases["ub_pad"] = model(
    [node("Pad", ["x", "pads"], ["y"], "pad")],
    [vi("x", [4])], [vi("y", None)], [i64("pads", [1 << 62, 1 << 62])])
cases["ub_resize"] = model(
    [node("Resize", ["x", "", "scales"], ["y"], "resize")],
    [vi("x", [1, 1, 2, 2])], [vi("y", None)], [f32("scales", [1, 1, 1e30, 1e30])])
cases["ub_split"] = model(
    [node("Split", ["x", "split"], ["a", "b", "c", "d"], "split")],
    [vi("x", [4])], [vi(t, None) for t in "abcd"], [i64("split", [1 << 62] * 4)])
cases["ub_depth_to_space"] = model(
    [node("DepthToSpace", ["x"], ["y"], "d2s", blocksize=1 << 40)],
    [conv_x], [vi("y", None)])
cases["ub_onehot"] = model(
    [node("OneHot", ["i", "depth", "values"], ["y"], "onehot")],
    [vi("i", [2], TensorProto.INT64)], [vi("y", None)],
    [f32("depth", [1e30]), f32("values", [0, 1])])
cases["ub_range_span"] = model(
    [node("Range", ["start", "limit", "delta"], ["r"], "range"),
     node("Add", ["x", "r"], ["y"], "add")],
    [vi("x", [1], TensorProto.INT64)], [vi("y", None, TensorProto.INT64)],
    [i64("start", I64_MIN), i64("limit", I64_MAX), i64("delta", 1)])
cases["ub_mel_bins"] = model(
    [node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["m"], "mel"),
     node("Add", ["x", "m"], ["y"], "add")],
    [vi("x", [1])], [vi("y", None)],
    [i64("bins", 1 << 62), i64("dft", 16), i64("rate", 8000), f32("lo", 0.0), f32("hi", 4000.0)])

# -- values read from tensors whose arithmetic overflowed int64 inside the CPU
# reference kernels (undefined behaviour; found with the UBSan build). Each
# adds a run-time input x (zeros in tests/unit/test_bad_kernels.c) so the
# result is an output; the constants are folded at build or run, both
# through the same kernels. tests/unit/test_bad_kernels.c holds the result
# or the error each must give.
I64 = TensorProto.INT64


def i64s(name, values, shape):
    return numpy_helper.from_array(np.array(values, dtype=np.int64).reshape(shape), name)


# four values from INT64_MIN in steps of 2^61: the span just fits int64
cases["ubk_range_step"] = model(
    [node("Range", ["start", "limit", "delta"], ["r"], "range"),
     node("Add", ["x", "r"], ["y"], "add")],
    [vi("x", [4], I64)], [vi("y", None, I64)],
    [i64("start", I64_MIN), i64("limit", -1), i64("delta", 1 << 61)])
# a running sum past INT64_MAX
cases["ubk_cumsum"] = model(
    [node("CumSum", ["c", "axis"], ["s"], "cumsum"), node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [2], I64)], [vi("y", None, I64)],
    [i64s("c", [I64_MAX, 1], [2]), i64("axis", 0)])
# a diagonal offset of INT64_MAX: row + k overflowed
cases["ubk_eyelike"] = model(
    [node("EyeLike", ["x"], ["y"], "eye", k=I64_MAX)],
    [vi("x", [3, 3], I64)], [vi("y", None, I64)])
for tag, k in (("one", 1), ("neg", -1)):  # ordinary offsets, the same loop
    cases["ubk_eyelike_" + tag] = model(
        [node("EyeLike", ["x"], ["y"], "eye", k=k)], [vi("x", [3, 3], I64)], [vi("y", None, I64)])
cases["ubk_eyelike_min"] = model(
    [node("EyeLike", ["x"], ["y"], "eye", k=I64_MIN)],
    [vi("x", [3, 3], I64)], [vi("y", None, I64)])
# extreme starts, ends and steps
cases["ubk_slice_steps"] = model(
    [node("Slice", ["c", "starts", "ends", "axes", "steps"], ["s"], "slice"),
     node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [1], I64)], [vi("y", None, I64)],
    [i64s("c", [0, 1, 2, 3], [4]), i64("starts", [I64_MAX]), i64("ends", [I64_MIN]),
     i64("axes", [0]), i64("steps", [I64_MIN])])
# both axes of a 4x4 slice at once, steps of INT64_MAX and INT64_MIN taking one
# element each: step * stride overflowed
cases["ubk_slice_axes"] = model(
    [node("Slice", ["c", "starts", "ends", "axes", "steps"], ["s"], "slice"),
     node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [1, 1], I64)], [vi("y", None, I64)],
    [i64s("c", list(range(16)), [4, 4]), i64("starts", [I64_MIN, I64_MAX]),
     i64("ends", [I64_MAX, I64_MIN]), i64("axes", [0, 1]), i64("steps", [I64_MAX, I64_MIN])])
# indices of INT64_MIN: normalising a negative index (i + dim) and its offset
cases["ubk_gathernd"] = model(
    [node("GatherND", ["c", "idx"], ["g"], "gathernd"), node("Add", ["x", "g"], ["y"], "add")],
    [vi("x", [1], I64)], [vi("y", None, I64)],
    [i64s("c", [0, 1, 2, 3], [4]), i64s("idx", [I64_MIN], [1, 1])])
cases["ubk_scatter_elements"] = model(
    [node("ScatterElements", ["c", "idx", "u"], ["s"], "scatter"),
     node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [4], I64)], [vi("y", None, I64)],
    [i64s("c", [0, 1, 2, 3], [4]), i64s("idx", [I64_MIN], [1]), i64s("u", [7], [1])])
cases["ubk_onehot_index"] = model(
    [node("OneHot", ["idx", "depth", "values"], ["o"], "onehot"),
     node("Add", ["x", "o"], ["y"], "add")],
    [vi("x", [1, 4], I64)], [vi("y", None, I64)],
    [i64s("idx", [I64_MIN], [1]), i64("depth", [4]), i64s("values", [0, 1], [2])])
cases["ubk_trilu"] = model(
    [node("Trilu", ["x", "k"], ["y"], "trilu", upper=0)],
    [vi("x", [2, 2], I64)], [vi("y", None, I64)], [i64("k", I64_MIN)])
# integer reductions and scatter reductions past int64 (these wrap, as the
# elementwise integer ops do)
for op, vals in (("ReduceSum", [I64_MAX, 1]), ("ReduceProd", [1 << 62, 4]),
                 ("ReduceL1", [I64_MIN, 0]), ("ReduceSumSquare", [1 << 32, 0])):
    cases["ubk_" + op.lower()] = model(
        [node(op, ["c"], ["r"], "reduce", keepdims=0), node("Add", ["x", "r"], ["y"], "add")],
        [vi("x", [], I64)], [vi("y", None, I64)], [i64s("c", vals, [2])], opset=13)
cases["ubk_scatternd_add"] = model(
    [node("ScatterND", ["c", "idx", "u"], ["s"], "scatter", reduction="add"),
     node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [1], I64)], [vi("y", None, I64)],
    [i64s("c", [I64_MAX], [1]), i64s("idx", [0], [1, 1]), i64s("u", [1], [1])], opset=16)
cases["ubk_scatter_elements_mul"] = model(
    [node("ScatterElements", ["c", "idx", "u"], ["s"], "scatter", reduction="mul"),
     node("Add", ["x", "s"], ["y"], "add")],
    [vi("x", [1], I64)], [vi("y", None, I64)],
    [i64s("c", [1 << 62], [1]), i64s("idx", [0], [1]), i64s("u", [4], [1])], opset=16)
# a MaxUnpool index of INT64_MAX: read through a double it became INT64_MIN
# (an undefined conversion), and its plane times the plane size overflowed
cases["ubk_maxunpool"] = model(
    [node("MaxUnpool", ["x", "idx"], ["y"], "unpool", kernel_shape=[2, 2], strides=[2, 2])],
    [vi("x", [1, 1, 1, 1])], [vi("y", None)], [i64s("idx", [I64_MAX], [1, 1, 1, 1])])
# values that became int64 through a double out of range (undefined; GCC's
# -fsanitize=float-cast-overflow, which -fsanitize=undefined leaves out):
# NonMaxSuppression's max_output_boxes_per_class of INT64_MAX, and Resize
# source coordinates from a roi of NaN and 1e30
cases["ubk_nms_max_boxes"] = model(
    [node("NonMaxSuppression", ["boxes", "x", "max"], ["y"], "nms")],
    [vi("x", [1, 1, 2])], [vi("y", None, I64)],
    [f32("boxes", [0, 0, 1, 1, 2, 2, 3, 3], [1, 2, 4]), i64("max", [I64_MAX])])
cases["ubk_resize_roi"] = model(
    [node("Resize", ["x", "roi", "", "sizes"], ["y"], "resize", mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize")],
    [vi("x", [1, 1, 2, 2])], [vi("y", None)],
    [f32("roi", [0, 0, -1e30, float("nan"), 1, 1, 1e30, 1e30]), i64("sizes", [1, 1, 3, 3])])
# RoiAlign regions whose sample grid, ceil(bin size), converted a double
# of 1e30 (or NaN) to int64 (undefined), or at 1e12 (defined) looped for
# hours over 10^12 samples
for tag, roi in (("huge", [0, 0, 1e30, 1e30]), ("nan", [0, 0, float("nan"), 1]),
                 ("big", [0, 0, 1e12, 1])):
    cases["ubk_roi_align_" + tag] = model(
        [node("RoiAlign", ["x", "rois", "idx"], ["y"], "roi", output_height=1, output_width=1,
              sampling_ratio=0, spatial_scale=1.0)],
        [vi("x", [1, 1, 2, 2])], [vi("y", None)],
        [f32("rois", roi, [1, 4]), i64s("idx", [0], [1])])
# sequence lengths far past the time axis
cases["ubk_reverse_sequence"] = model(
    [node("ReverseSequence", ["x", "lens"], ["y"], "reverse", batch_axis=1, time_axis=0)],
    [vi("x", [2, 2], I64)], [vi("y", None, I64)], [i64s("lens", [I64_MAX, I64_MIN], [2])])

for name, m in cases.items():
    save(m, os.path.join(onnx_dir, name + ".onnx"))
    print("wrote", name + ".onnx")

# -- plans: built from good models, one field rewritten, resealed


def hash64(data, seed):
    """kn_hash64 (src/core/hash.c)."""
    mask = (1 << 64) - 1
    m = 0x9E3779B97F4A7C15
    n = len(data)
    h = (seed ^ (n * m)) & mask
    p = 0
    while n - p >= 8:
        w = struct.unpack_from("<Q", data, p)[0]
        w = (w * 0xBF58476D1CE4E5B9) & mask
        w ^= w >> 31
        h = ((h ^ w) * m) & mask
        h ^= h >> 29
        p += 8
    w = int.from_bytes(data[p:] + b"\0" * (8 - (n - p)), "little")
    h = ((h ^ ((w * 0x94D049BB133111EB) & mask)) * m) & mask
    h ^= h >> 32
    return h


def reseal(plan):
    """kp_reseal (src/plan/plan.c): header hash at byte 248, checksum last."""
    struct.pack_into("<Q", plan, 248, hash64(bytes(plan[:248]), 0x4B494C4E48454144))
    struct.pack_into("<Q", plan, len(plan) - 8, hash64(bytes(plan[:-8]), 0x4B494C4E46494C45))


def build_plan(m, shapes):
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "m.plan")
        save(m, src)
        cmd = [kiln, "exec", "--onnx=" + src, "--saveEngine=" + dst, "--skipInference"]
        cmd += ["--%sShapes=%s" % (w, s) for w, s in zip(("min", "opt", "max"), shapes)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(dst, "rb") as f:
            return bytearray(f.read())


def ints_attr(values):
    """An ints attribute's bytes after its name: type 7, u64 count, i64 values."""
    return struct.pack("<IQ", 7, len(values)) + struct.pack("<%dq" % len(values), *values)


def rewrite(plan, old, new, what):
    at = plan.find(old)
    if at < 0 or plan.find(old, at + 1) >= 0:
        sys.exit("gen_size_cases: %s: the pattern occurs %s" %
                 (what, "nowhere" if at < 0 else "more than once"))
    plan[at:at + len(old)] = new
    reseal(plan)
    return plan


# Conv over x [N, 2, 8, 8] (N dynamic: 1..2), 3x3 weights, pads 1 and
# strides (1, 2): patterns that occur once in the plan
x = vi("x", ["N", 2, 8, 8])
conv = model(
    [node("Conv", ["x", "w"], ["y"], "conv", pads=[1, 1, 1, 1], strides=[1, 2], group=2)],
    [x], [vi("y", None)], [f32("w", np.ones(18), [2, 1, 3, 3])])
shapes = ("x:1x2x8x8", "x:1x2x8x8", "x:2x2x8x8")
base = build_plan(conv, shapes)
plans = {}
for bits in (40, 48, 56):
    plans["size_conv_pads_2e%d" % bits] = rewrite(
        bytearray(base), ints_attr([1, 1, 1, 1]), ints_attr([1 << bits] * 4), "pads")
plans["size_conv_strides"] = rewrite(
    bytearray(base), ints_attr([1, 2]), ints_attr([1, 1 << 40]), "strides")
plans["size_conv_group"] = rewrite(
    bytearray(base), struct.pack("<Iq", 2, 2),
    struct.pack("<Iq", 2, 1 << 40), "group")
# the profile's max shape of x (2x2x8x8, after min and opt 1x2x8x8)
prof = struct.pack("<4q", 1, 2, 8, 8) + struct.pack("<4q", 2, 2, 8, 8)
plans["size_profile_dims"] = rewrite(
    bytearray(base), prof, struct.pack("<4q", 1, 2, 8, 8) + struct.pack("<4q", 1 << 44, 2, 8, 8),
    "profile max")


def strings(plan):
    """The strings section as a list (docs in src/plan/plan.c)."""
    hs, n_sec = struct.unpack_from("<I", plan, 12)[0], struct.unpack_from("<I", plan, 32)[0]
    for k in range(n_sec):
        sid, _, off, _ = struct.unpack_from("<IIQQ", plan, hs + 24 * k)
        if sid == 1:
            count, at, out = struct.unpack_from("<I", plan, off)[0], off + 4, []
            for _ in range(count):
                n = struct.unpack_from("<I", plan, at)[0]
                out.append(bytes(plan[at + 4:at + 4 + n]).decode())
                at += 4 + n
            return out
    sys.exit("gen_size_cases: no strings section")


# an int8 MaxPool runs on the reference kernel; the plan is made to name
# oneDNN's float-only kernel for it (the string "dnnl" is there as the
# input's name), which would read int8 data as float
pool = model([node("MaxPool", ["dnnl"], ["y"], "pool", kernel_shape=[2, 2])],
             [vi("dnnl", [1, 1, 4, 4], TensorProto.INT8)], [vi("y", None, TensorProto.INT8)])
p = build_plan(pool, ("dnnl:1x1x4x4",) * 3)
st = strings(p)
head = struct.pack("<III", st.index("pool"), st.index("MaxPool"), st.index(""))
at = p.find(head)
opset, tactic = struct.unpack_from("<iI", p, at + 12)
if st[tactic] != "ref":
    sys.exit("gen_size_cases: the MaxPool layer's tactic is '%s', not 'ref'" % st[tactic])
plans["size_tactic"] = rewrite(p, head + struct.pack("<iI", opset, tactic),
                               head + struct.pack("<iI", opset, st.index("dnnl")), "tactic")
for name, p in plans.items():
    with open(os.path.join(plan_dir, name + ".plan"), "wb") as f:
        f.write(p)
    print("wrote", name + ".plan")
