#!/usr/bin/env python3
"""run_input_cases.py - the command line given hostile or endless inputs
(issue 28): FIFOs (made here with mkfifo; open() would wait for a writer
forever) and /dev/zero (a read would never end) as --onnx, --loadEngine,
--loadInputs, external data, a timing cache, a plugin library, a manifest;
the .npz archives of tests/bad/inputs (gen_input_cases.py); an input named
twice in --loadInputs. Each must fail at once with a clear message; every
command runs under a time limit so a regression fails instead of hanging.
Needs only the Python standard library."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "examples", "tiny_cnn.onnx")
INPUTS = os.path.join(HERE, "inputs")
LIMIT = 60  # seconds per command: each takes well under one

passed = 0
failed = []


def run(kiln, args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run([kiln] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=LIMIT, env=e)
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % LIMIT
    return p.returncode, p.stdout, p.stderr


def expect_error(kiln, what, args, text, env=None):
    """The command must end (non-zero exit, no signal) and say `text`."""
    global passed
    rc, out, err = run(kiln, args, env)
    if rc is not None and rc > 0 and text in err:
        passed += 1
    else:
        failed.append("%s: exit %s, expected %r in stderr:\n%s%s" % (what, rc, text, out, err))
        print("FAIL: " + what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    args = ap.parse_args()
    k = args.kiln
    work = tempfile.mkdtemp(prefix="kiln_bad_inputs_")
    try:
        fifo = os.path.join(work, "fifo")
        os.mkfifo(fifo)
        plan = os.path.join(work, "tiny.plan")
        rc, out, err = run(k, ["exec", "--onnx=" + MODEL, "--saveEngine=" + plan,
                               "--iterations=1", "--warmUp=0", "--duration=0"])
        if rc != 0:
            failed.append("building the plan: exit %s\n%s%s" % (rc, out, err))
        m, once = "--onnx=" + MODEL, ["--iterations=1", "--warmUp=0", "--duration=0"]
        nonreg = "is not a regular file"
        for path in (fifo, "/dev/zero", work):
            expect_error(k, "--onnx=" + path, ["exec", "--onnx=" + path] + once, nonreg)
            expect_error(k, "--loadEngine=" + path, ["exec", "--loadEngine=" + path] + once,
                         nonreg)
            expect_error(k, "--loadInputs=input:" + path,
                         ["exec", "--loadEngine=" + plan, "--loadInputs=input:" + path] + once,
                         nonreg)
            expect_error(k, "--staticPlugins=" + path,
                         ["exec", m, "--staticPlugins=" + path] + once, nonreg)
            expect_error(k, "plugins list --load=" + path, ["plugins", "list", "--load=" + path],
                         nonreg)
            expect_error(k, "doctor --manifest=" + path,
                         ["doctor", plan, "--manifest=" + path], nonreg)
            expect_error(k, "inspect " + path, ["inspect", path], nonreg)
        expect_error(k, "--timingCacheFile=FIFO", ["exec", m, "--timingCacheFile=" + fifo] + once,
                     nonreg)
        # external data that is a FIFO beside the model
        ext = os.path.join(work, "ext")
        os.mkdir(ext)
        shutil.copy(os.path.join(INPUTS, "external_weights.onnx"), ext)
        os.mkfifo(os.path.join(ext, "weights.bin"))
        expect_error(k, "external data FIFO",
                     ["exec", "--onnx=" + os.path.join(ext, "external_weights.onnx")] + once,
                     "weights.bin' is not a regular file")
        # the .npz catalog through --loadInputs
        npz = lambda f: "--loadInputs=input:" + os.path.join(INPUTS, f)  # noqa: E731
        load = ["exec", "--loadEngine=" + plan] + once
        expect_error(k, "npz overlap", load + [npz("npz_overlap.npz")],
                     "member 'a1.npy' overlaps member 'a0.npy'")
        expect_error(k, "npz NUL name", load + [npz("npz_nul_name.npz")],
                     "member name holds a NUL byte")
        expect_error(k, "npz duplicate", load + [npz("npz_duplicate.npz")],
                     "member 'x.npy' appears twice")
        expect_error(k, "npz past end", load + [npz("npz_past_end.npz")],
                     "run past the end of the file")
        expect_error(k, "npz budget", load + [npz("npz_budget.npz")],
                     "over the input memory budget of 1000000 bytes",
                     env={"KILN_MAX_INPUT_BYTES": "1000000"})
        # the long name is read whole: the archive's one array is taken and
        # its shape (2x3) does not fit the input
        expect_error(k, "npz long name", load + [npz("npz_long_name.npz")],
                     "holds float 2x3; input 'input'")
        # one input given twice (once a leak)
        raw = os.path.join(work, "zeros.bin")
        with open(raw, "wb") as f:
            f.write(b"\0" * (3 * 64 * 64 * 4))
        # a lone .npy over the budget is not read, nor a raw file larger than
        # the input
        expect_error(k, ".npy over budget",
                     load + ["--loadInputs=input:" + os.path.join(INPUTS, "npz_budget.npz")],
                     "is 16505 bytes, over the input memory budget of 1000 bytes",
                     env={"KILN_MAX_INPUT_BYTES": "1000"})
        big = os.path.join(work, "big.bin")
        with open(big, "wb") as f:
            f.write(b"\0" * (3 * 64 * 64 * 4 + 1))
        expect_error(k, "raw input too large", load + ["--loadInputs=input:" + big],
                     "has 49153 bytes, more than the 49152 expected")
        expect_error(k, "--loadInputs twice",
                     load + ["--loadInputs=input:%s,input:%s" % (raw, raw)],
                     "input 'input' is given twice")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, len(failed)))
    for f in failed:
        print("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
