#!/usr/bin/env python3
"""gen_plugin_cases.py - plans and libraries for the plugin- and plan-trust
tests (tests/plugins/test_plugin_trust.c, run_trust_cli_tests.py). Plans are
built by kiln itself from small ONNX models, then damaged here (never
hand-edited bytes): each bad plan embeds the TrustScale library, so a test
can tell whether any of its code ran.

    trust_a.kiln, trust_b.kiln  valid; embed build a (y = 2x) / build b (y = 3x)
    trust_a_ext.kiln            valid; names build a as an external library
    bad_checksum.kiln           a byte of the nodes section flipped (checksum fails)
    bad_version.kiln            format version 2, resealed
    bad_table.kiln              the strings section overlaps the next, resealed
    bad_graphs.kiln             the graphs section's count is absurd, resealed
    bad_records.kiln            the plugin record after the library names library 9, resealed
    no_record.kiln              no plugin records at all (the layer has none), resealed
    bad_altered.kiln            a byte of the embedded library flipped, resealed
    weights.onnx, weights.kiln  y = x + W with W of 16384 floats (plan-file tests)
    shadow/libtrust_shadow.so   build a;  cwd/libtrust_shadow.so  build b (one bare name,
                                two files: LD_LIBRARY_PATH=shadow, working folder cwd)
    sha256.txt                  "a <sha>", "b <sha>"

Usage: gen_plugin_cases.py --kiln KILN --lib-a A.so --lib-b B.so --out DIR"""
import argparse
import hashlib
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

M = (1 << 64) - 1
SEED_HEADER = 0x4B494C4E48454144  # "KILNHEAD", src/plan/plan.c
SEED_FILE = 0x4B494C4E46494C45    # "KILNFILE"


def hash64(data, seed):
    """kn_hash64 (src/core/hash.c)."""
    m = 0x9E3779B97F4A7C15
    n = len(data)
    h = (seed ^ (n * m)) & M
    full = n // 8 * 8
    for (w,) in struct.iter_unpack("<Q", data[:full]):
        w = (w * 0xBF58476D1CE4E5B9) & M
        w ^= w >> 31
        h = ((h ^ w) * m) & M
        h ^= h >> 29
    w = int.from_bytes(data[full:], "little")
    h = ((h ^ ((w * 0x94D049BB133111EB) & M)) * m) & M
    h ^= h >> 32
    return h


def reseal(b):
    """kp_reseal: header hash and whole-file checksum."""
    b[248:256] = struct.pack("<Q", hash64(bytes(b[:248]), SEED_HEADER))
    b[-8:] = struct.pack("<Q", hash64(bytes(b[:-8]), SEED_FILE))


def sections(b):
    hs, = struct.unpack_from("<I", b, 12)
    n, = struct.unpack_from("<I", b, 32)
    out = {}
    for i in range(n):
        sid, _, off, size = struct.unpack_from("<IIQQ", b, hs + 24 * i)
        out[sid] = (hs + 24 * i, off, size)
    return out


def plugin_layout(b):
    """Offsets in the plugin-records section (src/plugin/build.c): the first
    library's bytes, the record count and the first record's library index."""
    _, off, _ = sections(b)[8]
    at = off + 4
    nl, = struct.unpack_from("<I", b, at)
    at += 4
    lib_bytes = None
    for _ in range(nl):
        ln, = struct.unpack_from("<I", b, at)
        at += 4 + ln + 64 + 4
        size, = struct.unpack_from("<Q", b, at)
        at += 8
        if lib_bytes is None:
            lib_bytes = (at, size)
        at += size
    count_at = at
    at += 4
    for _ in range(4):  # layer, name, version, namespace
        ln, = struct.unpack_from("<I", b, at)
        at += 4 + ln
    return lib_bytes, count_at, at


def kiln(args, env):
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--lib-a", required=True)
    ap.add_argument("--lib-b", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = a.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.pop("KILN_TEST_TRUST_MARKER", None)  # building runs the library; that is not a test

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("TrustScale", ["x"], ["y"], name="scale",
                                            domain="kiln.plugins")], "trust", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("kiln.plugins", 1)])
    m.ir_version = 8
    model = os.path.join(out, "trust.onnx")
    onnx.save(m, model)

    rng = np.random.default_rng(28)
    w = rng.standard_normal(16384).astype(np.float32)
    xw = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16384])
    yw = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16384])
    gw = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], "weights",
                           [xw], [yw], [numpy_helper.from_array(w, "w")])
    mw = helper.make_model(gw, opset_imports=[helper.make_opsetid("", 17)])
    mw.ir_version = 8
    onnx.save(mw, os.path.join(out, "weights.onnx"))
    kiln([a.kiln, "exec", f"--onnx={os.path.join(out, 'weights.onnx')}",
          f"--saveEngine={os.path.join(out, 'weights.kiln')}", "--skipInference"], env)

    for tag, lib in (("a", a.lib_a), ("b", a.lib_b)):
        kiln([a.kiln, "exec", f"--onnx={model}", f"--dynamicPlugins={lib}",
              f"--setPluginsToSerialize={lib}", f"--saveEngine={os.path.join(out, f'trust_{tag}.kiln')}",
              "--skipInference"], env)
    kiln([a.kiln, "exec", f"--onnx={model}", f"--staticPlugins={a.lib_a}",
          f"--saveEngine={os.path.join(out, 'trust_a_ext.kiln')}", "--skipInference"], env)

    good = bytearray(open(os.path.join(out, "trust_a.kiln"), "rb").read())
    sec = sections(good)
    cases = {}

    b = bytearray(good)
    _, off, size = sec[4]
    b[off + size // 2] ^= 0x5A
    cases["bad_checksum"] = b

    b = bytearray(good)
    struct.pack_into("<I", b, 8, 2)
    reseal(b)
    cases["bad_version"] = b

    b = bytearray(good)
    entry, off, size = sec[1]
    struct.pack_into("<Q", b, entry + 16, size + 16)
    reseal(b)
    cases["bad_table"] = b

    b = bytearray(good)
    _, off, _ = sec[2]
    struct.pack_into("<I", b, off, 0x7FFFFFFF)
    reseal(b)
    cases["bad_graphs"] = b

    (lib_at, lib_size), count_at, lib_index_at = plugin_layout(good)
    b = bytearray(good)
    struct.pack_into("<I", b, lib_index_at, 9)
    reseal(b)
    cases["bad_records"] = b

    b = bytearray(good)
    struct.pack_into("<I", b, count_at, 0)
    reseal(b)
    cases["no_record"] = b

    b = bytearray(good)
    b[lib_at + lib_size // 2] ^= 0x5A
    reseal(b)
    cases["bad_altered"] = b

    for name, data in cases.items():
        with open(os.path.join(out, name + ".kiln"), "wb") as f:
            f.write(data)

    for d, lib in (("shadow", a.lib_a), ("cwd", a.lib_b)):
        os.makedirs(os.path.join(out, d))
        shutil.copy(lib, os.path.join(out, d, "libtrust_shadow.so"))
    with open(os.path.join(out, "sha256.txt"), "w") as f:
        for tag, lib in (("a", a.lib_a), ("b", a.lib_b)):
            f.write(f"{tag} {hashlib.sha256(open(lib, 'rb').read()).hexdigest()}\n")
    print(f"wrote {len(cases)} damaged plans and their sources to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
