#!/usr/bin/env python3
"""run_trust_cli_tests.py - issue 28 on the command line, each step in its own
process: a bare library name given to `kiln plugins list --load`,
`kiln exec --staticPlugins` and `kiln doctor --plugins` is the file in the
working folder, hashed and loaded (the build on LD_LIBRARY_PATH under the
same name never runs, and doctor's PASS is for the code that ran); doctor
refuses a library that is not the manifest's before it runs; exec and doctor
take --allowEmbeddedPluginSha256, and a rejected plan runs no embedded code.
Cases from tests/bad/gen_plugin_cases.py; the TrustScale builds write their
tag to $KILN_TEST_TRUST_MARKER when loaded."""
import argparse
import json
import os
import shutil
import subprocess
import sys

FAILS = []


def check(cond, what, out=""):
    if not cond:
        FAILS.append(f"{what}\n{out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    k, c = os.path.abspath(a.kiln), a.cases
    marker = os.path.join(a.work, "marker")
    sha = dict(line.split() for line in open(os.path.join(c, "sha256.txt")))
    env = dict(os.environ, KILN_TEST_TRUST_MARKER=marker,
               LD_LIBRARY_PATH=os.path.join(c, "shadow"))

    def run(args, expect_rc=0, cwd=None):
        if os.path.exists(marker):
            os.remove(marker)
        p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
        out = p.stdout + p.stderr
        if expect_rc is not None and p.returncode != expect_rc:
            FAILS.append(f"{' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{out}")
        ran = open(marker).read() if os.path.exists(marker) else ""
        return out, ran

    cwd = os.path.join(c, "cwd")  # holds build b as libtrust_shadow.so; shadow/ holds build a
    out, ran = run([k, "plugins", "list", "--load=libtrust_shadow.so"], cwd=cwd)
    check(ran == "b\n", f"plugins list --load of a bare name runs the working folder's file (ran {ran!r})", out)
    check(sha["b"] in out and sha["a"] not in out, "plugins list shows the SHA-256 of the file loaded", out)

    out, ran = run([k, "exec", f"--loadEngine={os.path.join(c, 'trust_a_ext.kiln')}",
                    "--staticPlugins=libtrust_shadow.so", "--iterations=1", "--duration=0",
                    "--warmUp=0"], cwd=cwd)
    check(ran == "b\n" and sha["b"][:16] in out,
          f"exec --staticPlugins of a bare name loads and reports that file (ran {ran!r})", out)

    # doctor: a manifest made for build b; PASS must mean build b ran
    man = os.path.join(a.work, "m.json")
    plan = os.path.join(c, "trust_a_ext.kiln")
    # (the plan was built with build a; the deployment ships build b under that
    # bare name, and the manifest says so)
    run([k, "manifest", plan, "-o", man], expect_rc=None)
    m = json.load(open(man))
    m["libraries"][0]["file"] = "libtrust_shadow.so"
    m["libraries"][0]["sha256"] = sha["b"]
    json.dump(m, open(man, "w"))
    out, ran = run([k, "doctor", plan, "--plugins=libtrust_shadow.so", f"--manifest={man}"], cwd=cwd)
    check("matches the manifest" in out and "every check passed" in out and ran == "b\n",
          f"doctor passes only for the code that ran (ran {ran!r})", out)
    # a manifest for build a: the file in the folder (b) is refused before it runs
    m["libraries"][0]["sha256"] = sha["a"]
    json.dump(m, open(man, "w"))
    out, ran = run([k, "doctor", plan, "--plugins=libtrust_shadow.so", f"--manifest={man}"],
                   expect_rc=1, cwd=cwd)
    check("differs from the one the manifest was made with" in out and ran == "",
          f"doctor refuses a library that is not the manifest's before it runs (ran {ran!r})", out)

    # embedded libraries: the caller's SHA-256s decide
    for tag, ok in (("a", True), ("b", False)):
        out, ran = run([k, "exec", f"--loadEngine={os.path.join(c, f'trust_{tag}.kiln')}",
                        f"--allowEmbeddedPluginSha256={sha['a']}", "--iterations=1",
                        "--duration=0", "--warmUp=0"], expect_rc=0 if ok else None)
        if ok:
            check("PASSED" in out and ran == "a\n", "exec runs an allowed embedded library", out)
        else:
            check("not on the caller's allow-list" in out and ran == "",
                  f"exec refuses an embedded library not on the list (ran {ran!r})", out)
    out, ran = run([k, "exec", f"--loadEngine={os.path.join(c, 'trust_a.kiln')}",
                    "--allowEmbeddedPluginSha256=123"], expect_rc=None)
    check("not a SHA-256" in out and ran == "", "a malformed SHA-256 is refused", out)
    out, ran = run([k, "doctor", os.path.join(c, "trust_b.kiln"),
                    f"--allowEmbeddedPluginSha256={sha['a']}"], expect_rc=1)
    check("not on the caller's allow-list" in out and ran == "",
          f"doctor refuses an embedded library not on the list (ran {ran!r})", out)
    out, ran = run([k, "doctor", os.path.join(c, "trust_b.kiln"),
                    f"--allowEmbeddedPluginSha256={sha['b']}"])
    check("every check passed" in out and ran == "b\n", "doctor loads an allowed embedded library", out)

    # rejected plans run nothing, even when embedded libraries are allowed
    for bad in ("bad_checksum", "bad_version", "bad_table", "bad_graphs", "bad_records",
                "no_record", "bad_altered"):
        out, ran = run([k, "exec", f"--loadEngine={os.path.join(c, bad + '.kiln')}",
                        "--allowEmbeddedPlugins", "--iterations=1"], expect_rc=None)
        check("PASSED" not in out and ran == "",
              f"{bad}: refused without running its embedded library (ran {ran!r})", out)

    for f in FAILS:
        print("FAIL:", f)
    print(f"{'FAILED' if FAILS else 'passed'}: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
