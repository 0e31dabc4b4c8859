#!/usr/bin/env python3
"""gen_input_cases.py - hostile input files for the bad-input catalog: .npz
archives that lie about their members (tests/bad/inputs/*.npz) and ONNX models
whose attributes have the wrong value or type (tests/bad/onnx/attr_*.onnx),
plus a model keeping a weight in an external file, which the tests replace by
a FIFO. tests/accuracy/test_npy.c, tests/unit/test_bad_graphs.c,
tests/unit/test_inputs.c and tests/bad/run_input_cases.py hold what each
must give. The zip bytes are laid out here field by field (tools/npy.c
documents the format), since the point is archives zipfile would not write.
Run with a python that has numpy and onnx: python tests/bad/gen_input_cases.py"""
import os
import struct
import zlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
from onnx.external_data_helper import set_external_data

here = os.path.dirname(os.path.abspath(__file__))
inputs = os.path.join(here, "inputs")
onnx_dir = os.path.join(here, "onnx")


def npy(a):
    """A version-1 .npy image of array a (what np.save writes)."""
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (a.dtype.str, a.shape)
    pad = 64 - (10 + len(hdr) + 1) % 64
    hdr = hdr + " " * (pad % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + a.tobytes()


def local_header(name, method, crc, csize, usize):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, csize, usize,
                       len(name), 0) + name


def dir_entry(name, method, crc, csize, usize, offset):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, csize,
                       usize, len(name), 0, 0, 0, 0, 0, offset) + name


def end_record(count, cd_size, cd_off):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_off, 0)


def member(name, data, deflate=False):
    """(local header + data, directory entry fields) for one member."""
    payload = data
    if deflate:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        payload = c.compress(data) + c.flush()
    method = 8 if deflate else 0
    crc = zlib.crc32(data) & 0xFFFFFFFF
    return name, method, crc, len(payload), len(data), payload


def archive(members, directory=None):
    """Members laid out one after another; `directory` (a list of (name,
    index of the member whose bytes it claims)) defaults to one entry each."""
    out, offsets = b"", []
    for name, method, crc, csize, usize, payload in members:
        offsets.append(len(out))
        out += local_header(name, method, crc, csize, usize) + payload
    if directory is None:
        directory = [(m[0], i) for i, m in enumerate(members)]
    cd = b""
    for name, i in directory:
        _, method, crc, csize, usize, _ = members[i]
        cd += dir_entry(name, method, crc, csize, usize, offsets[i])
    return out + cd + end_record(len(directory), len(cd), len(out))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    print("wrote", os.path.relpath(path, here), len(data), "bytes")


zeros = np.zeros((1 << 22,), np.float32)  # 16 MiB that deflate to about 16 KiB
small = np.arange(6, dtype=np.float32).reshape(2, 3)

# eight directory entries claiming one deflated member: 16 KiB of file that
# expanded to 8 x 16 MiB (and once to 2.2 GB from 1.1 MB)
bomb = member(b"a0.npy", npy(zeros), deflate=True)
write(os.path.join(inputs, "npz_overlap.npz"),
      archive([bomb], [(b"a%d.npy" % k, 0) for k in range(8)]))
# a member name of 1030 bytes: once copied cut to 1023, then its suffix read
# at byte 1026 of the 1024-byte copy (just past it, where ASan looks)
long_name = b"n" * 1026 + b".npy"
write(os.path.join(inputs, "npz_long_name.npz"), archive([member(long_name, npy(small))]))
# a NUL inside a member name
write(os.path.join(inputs, "npz_nul_name.npz"), archive([member(b"x\0y.npy", npy(small))]))
# two members of one name, at different offsets
write(os.path.join(inputs, "npz_duplicate.npz"),
      archive([member(b"x.npy", npy(small)), member(b"x.npy", npy(small + 1))]))
# one honest member of 16 MiB: over a budget of 1 MB (KILN_MAX_INPUT_BYTES)
write(os.path.join(inputs, "npz_budget.npz"), archive([bomb]))
# a member whose data runs past the end of the archive
m = member(b"x.npy", npy(small))
past = archive([m])
past = past.replace(struct.pack("<II", m[3], m[4]), struct.pack("<II", m[3] + 4096, m[4] + 4096))
write(os.path.join(inputs, "npz_past_end.npz"), past)


def model(nodes, inputs_, outputs, inits=()):
    g = helper.make_graph(nodes, "bad", inputs_, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
save(model([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm", transB=7)],
           [vi("x", [2, 4])], [vi("y", [2, 4])], [w]),
     os.path.join(onnx_dir, "attr_transb_7.onnx"))
print("wrote onnx/attr_transb_7.onnx")
save(model([helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis="1")],
           [vi("x", [2, 4])], [vi("y", [2, 4])]),
     os.path.join(onnx_dir, "attr_softmax_string_axis.onnx"))
print("wrote onnx/attr_softmax_string_axis.onnx")
# a weight kept in external file "weights.bin" beside the model; the tests
# copy the model into a fresh folder and make weights.bin a FIFO there
ext = numpy_helper.from_array(np.ones((4,), np.float32), "b")
set_external_data(ext, "weights.bin", offset=0, length=16)
ext.ClearField("raw_data")
ext.data_location = TensorProto.EXTERNAL
save(model([helper.make_node("Add", ["x", "b"], ["y"], name="add_b")],
           [vi("x", [4])], [vi("y", [4])], [ext]),
     os.path.join(inputs, "external_weights.onnx"))
print("wrote inputs/external_weights.onnx")
