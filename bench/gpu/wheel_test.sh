#!/bin/bash
# wheel_test.sh - one device call: install the kiln wheel that
# scripts/build_wheel.sh put in .device2/whl/ (with pytest, and onnx /
# onnxruntime where the machine lacks them; no index is reached) into
# /tmp/kw and run tests/python against that INSTALLED package, not a build
# tree. Run from the repository root; the log goes to $OUT/wheel_test.log when
# OUT is set. Exit status: pytest's.
#
#   bash bench/gpu/wheel_test.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
py=${PYTHON:-python3}
whl=$root/.device2/whl
tgt=${KW:-/tmp/kw}
log=${OUT:+$OUT/wheel_test.log}
log=${log:-/tmp/kiln_wheel_test.log}
# the CUDA libraries (cudart, cuBLASLt, cuDNN 9) where the machine has them
# (the system's, then those of pip's nvidia-* packages that PyTorch brings)
nv=$($py - 2>/dev/null <<'PY'
import os
try:
    import nvidia
    print(":".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in sorted(os.listdir(p))
                   if os.path.isdir(os.path.join(p, s, "lib"))))
except Exception:
    pass
PY
)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu${nv:+:$nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
    echo "== $(date -u)  $($py --version)  $(uname -m)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
    rm -rf "$tgt"
    # --no-deps: numpy (and torch, cupy) are the machine's own; pytest's
    # dependencies are listed by name
    pkgs=(kiln pytest iniconfig pluggy packaging pygments)
    $py -c "import onnx" 2>/dev/null || pkgs+=(onnx protobuf ml_dtypes typing_extensions)
    $py -c "import onnxruntime" 2>/dev/null || pkgs+=(onnxruntime)
    $py -m pip install --no-index --find-links "$whl" --no-deps -t "$tgt" "${pkgs[@]}" 2>&1 | tail -3
    rc=${PIPESTATUS[0]}
    if [ "$rc" != 0 ]; then echo "pip install failed (rc=$rc)"; exit "$rc"; fi
    export PYTHONPATH=$tgt PATH=$tgt/bin:$PATH
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for so in "$tgt"/kiln/*.so*; do echo "== ldd $so"; ldd "$so" | grep -E "cud|cublas|not found"; done
    # the package the tests import is the installed one
    (cd /tmp && $py - <<'PY')
import os, kiln
print("kiln", getattr(kiln, "__version__", "?"), "from", os.path.dirname(kiln.__file__))
assert kiln.__file__.startswith(os.environ["PYTHONPATH"] + "/"), kiln.__file__
for b in ("cpu", "cuda"):
    try:
        print(b, kiln.backend_info(b))
    except kiln.Error as e:
        print(b, "unavailable:", e)
PY
    # KILN_CLI: the CLI the wheel installs; the plugin-library tests skip
    # (the wheel holds no test plugins)
    export KILN_CLI=$tgt/bin/kiln KILN_TEST_PLUGIN_DIR=/nonexistent
    cd /tmp && $py -m pytest -p no:cacheprovider -q -rs "$root/tests/python"
} > "$log" 2>&1
rc=$?
tail -40 "$log"
echo "wheel_test.sh: pytest rc=$rc (log: $log)"
exit $rc
