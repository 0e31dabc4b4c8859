#!/usr/bin/env python3
"""run_cli_plugin_tests.py - the plugin side of the kiln command line, each
step in its own process: kiln plugins list, exec with plugin flags (a plan
built with a plugin and loaded in a process without it), embedded libraries,
kiln inspect of reformat layers, kiln manifest and kiln doctor (passing, and
failing on a missing dependency, a changed library, a missing plugin)."""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

FAILS = []


def run(args, expect_rc=0):
    p = subprocess.run(args, capture_output=True, text=True)
    out = p.stdout + p.stderr
    ok = p.returncode == expect_rc if expect_rc is not None else p.returncode != 0
    if not ok:
        FAILS.append(f"{' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{out}")
    return out


def check(cond, what, out=""):
    if not cond:
        FAILS.append(f"{what}\n{out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--plugins", required=True, help="folder of the example plugin libraries")
    ap.add_argument("--libs", required=True, help="folder of the test plugin libraries")
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    k = a.kiln
    act = os.path.join(a.plugins, "libkiln_plugin_custom_act.so")
    bev = os.path.join(a.plugins, "libkiln_plugin_bev_pool.so")
    model = os.path.join(a.models, "custom_act.onnx")
    plan = os.path.join(a.work, "act.kiln")
    shapes = ["--minShapes=x:1x1", "--optShapes=x:4x33", "--maxShapes=x:4x33"]

    out = run([k, "plugins", "list", f"--load={act}", "--load", bev])
    check("CustomAct  version '1'" in out and "field bev_h" in out and "required" in out,
          "plugins list shows identities and fields", out)

    out = run([k, "plugins", "list", "--namespace=acme", f"--load={act}"])
    check("CustomAct  version '1'  namespace 'acme'" in out, "a library loaded into a namespace", out)

    out = run([k, "exec", f"--onnx={model}", f"--staticPlugins={act}", *shapes,
               f"--saveEngine={plan}", "--skipInference"])
    # a fresh process without the plugin: refused before any work, naming it
    out = run([k, "exec", f"--loadEngine={plan}", "--shapes=x:2x5"], expect_rc=None)
    check("needs plugin 'CustomAct' (version '1', namespace '')" in out and
          "registered creators named 'CustomAct': none" in out,
          "loading a plan without its plugin names the identity", out)
    out = run([k, "exec", f"--loadEngine={plan}", f"--staticPlugins={act}", "--shapes=x:2x5",
               "--duration=0", "--iterations=2", "--warmUp=0"])
    check("PASSED" in out, "the plan runs with its plugin", out)

    # embedded library: refused unless allowed
    emb = os.path.join(a.work, "emb.kiln")
    run([k, "exec", f"--onnx={model}", f"--dynamicPlugins={act}",
         f"--setPluginsToSerialize={act}", *shapes, f"--saveEngine={emb}", "--skipInference"])
    out = run([k, "exec", f"--loadEngine={emb}", "--shapes=x:2x5"], expect_rc=None)
    check("is not allowed" in out, "an embedded library needs permission", out)
    out = run([k, "exec", f"--loadEngine={emb}", "--allowEmbeddedPlugins", "--shapes=x:2x5",
               "--duration=0", "--iterations=2", "--warmUp=0"])

    # reformat layers show in kiln inspect
    half = os.path.join(a.work, "half.kiln")
    tl = os.path.join(a.libs, "libkiln_test_plugins.so")
    run([k, "exec", f"--onnx={os.path.join(a.models, 'halfonly.onnx')}", f"--staticPlugins={tl}",
         "--shapes=x:2x4", f"--saveEngine={half}", "--skipInference"])
    out = run([k, "inspect", half, f"--staticPlugins={tl}"])
    check("reformat x to float16 for halfonly" in out and "reformat t to float after halfonly" in out,
          "inspect shows the reformat layers", out)

    # manifest
    man = os.path.join(a.work, "m.json")
    run([k, "manifest", plan, f"--plugins={act}", "-o", man])
    m = json.load(open(man))
    check(m["plan"]["sha256"] == hashlib.sha256(open(plan, "rb").read()).hexdigest(),
          "manifest: plan SHA-256", json.dumps(m))
    lib = m["libraries"][0]
    check(lib["sha256"] == hashlib.sha256(open(act, "rb").read()).hexdigest() and
          lib["packaging"] == "external" and lib["identities"][0]["name"] == "CustomAct",
          "manifest: library entry", json.dumps(m))
    out = run([k, "manifest", emb])
    check('"packaging": "embedded"' in out, "manifest of an embedded library", out)

    # doctor: all pass with golden data
    golden = os.path.join(a.work, "golden")
    os.makedirs(golden)
    shutil.copy(os.path.join(a.models, "custom_act.case1.x.bin"), os.path.join(golden, "x.bin"))
    shutil.copy(os.path.join(a.models, "custom_act.case1.y.bin"), os.path.join(golden, "y.bin"))
    open(os.path.join(golden, "shapes.txt"), "w").write("x:3x17\n")
    out = run([k, "doctor", plan, f"--plugins={act}", f"--manifest={man}", f"--golden={golden}"])
    check("every check passed" in out and "[FAIL]" not in out and "outputs vs golden" in out
          and "p95" in out, "doctor passes", out)
    # ... fails on a missing dependency, naming it
    out = run([k, "doctor", plan, f"--plugins={os.path.join(a.libs, 'libkiln_broken_missing_dep.so')}"],
              expect_rc=1)
    check("missing dependency 'libkiln_test_dep.so'" in out and "LD_LIBRARY_PATH" in out,
          "doctor: missing dependency", out)
    # ... on a library that is not the manifest's
    changed = os.path.join(a.work, os.path.basename(act))
    shutil.copy(act, changed)
    with open(changed, "ab") as f:
        f.write(b"\0")
    out = run([k, "doctor", plan, f"--plugins={changed}", f"--manifest={man}"], expect_rc=1)
    check("differs from the one the manifest was made with" in out, "doctor: changed library", out)
    # ... and when the plan's plugin is not given
    out = run([k, "doctor", plan], expect_rc=1)
    check("[FAIL] plugin identities" in out and "'CustomAct'" in out, "doctor: missing plugin", out)
    out = run([k, "doctor", emb], expect_rc=1)
    check("--allowEmbeddedPlugins" in out, "doctor: embedded library needs permission", out)
    run([k, "doctor", emb, "--allowEmbeddedPlugins"])

    for f in FAILS:
        print("FAIL:", f)
    print(f"{'FAILED' if FAILS else 'passed'}: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
