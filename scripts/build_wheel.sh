#!/bin/bash
# build_wheel.sh - the kiln wheel for the GPU machine, into .device2/whl/:
# `pip wheel .` (scikit-build-core over the project's CMake, pyproject.toml)
# with the CUDA backend on and without oneDNN / OpenBLAS, so that the wheel
# needs only glibc, the GCC runtime (libgomp, libstdc++ and libgcc_s, the last
# two for the CUDA objects), zlib (libz.so.1, for compressed .npz; the
# distribution's libz.a is not position independent) and the CUDA 13 runtime
# libraries (cudart, cuBLASLt, cuDNN 9) where it is installed.
# It also puts pytest's wheels (and onnx's, onnxruntime's) beside it
# (bench/gpu/wheel_test.sh installs them there and runs tests/python against
# the installed package).
#
#   scripts/build_wheel.sh            # CUDA on (nvcc needed; 10+ minutes cold)
#   KILN_CUDA=OFF scripts/build_wheel.sh   # a CPU-only wheel
#
# The CMake build folder is build-wheel/ (kept, so a second run is
# incremental); ccache is used when present. Every .so in the wheel is listed
# with what it needs (ldd) at the end, and the script fails if one of them
# needs a library outside the allowed set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-$root/.venv/bin/python}
out=$root/.device2/whl
cuda=${KILN_CUDA:-ON}
mkdir -p "$out"
rm -f "$out"/kiln-*.whl

launcher=()
if command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} CCACHE_DIR=${CCACHE_DIR:-/work/.ccache}
    launcher=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
              -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
              -C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
# --no-build-isolation: scikit-build-core comes from the environment (no
# index is reached); --no-deps: numpy is the target machine's own.
"$py" -m pip wheel . --no-build-isolation --no-deps -w "$out" \
    -C build-dir=build-wheel \
    -C cmake.define.KILN_CUDA=$cuda \
    -C cmake.define.KILN_USE_DNNL=OFF -C cmake.define.KILN_USE_OPENBLAS=OFF \
    -C cmake.define.KILN_TRITON=OFF \
    "${launcher[@]}"

# pytest and its dependencies, as wheels (any platform, pure Python)
"$py" -m pip download pytest --only-binary :all: --python-version 3.12 \
    --implementation cp --platform any --platform manylinux2014_x86_64 -d "$out" >/dev/null
# onnx / onnxruntime for the tests, where the GPU machine lacks them
# (bench/gpu/wheel_test.sh installs them only then; --no-deps: numpy is its own)
"$py" -m pip download onnx protobuf ml_dtypes typing_extensions onnxruntime --no-deps \
    --only-binary :all: --python-version 3.12 --implementation cp --platform any \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$out" >/dev/null

whl=$(ls "$out"/kiln-*.whl)
echo "wheel: $whl ($(du -h "$whl" | cut -f1))"
# what every shared object of the wheel needs
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp"
allowed='^(linux-vdso|libc|libm|libdl|libpthread|librt|libgomp|libz|libstdc\+\+|libgcc_s|ld-linux-x86-64|libkiln|libkiln_omp_wait|libcudart|libcublasLt|libcublas|libcudnn)\.so'
bad=0
while IFS= read -r so; do
    rel=${so#$tmp/}
    echo "== $rel"
    # NEEDED entries (what the wheel asks of the target machine)
    needed=$(objdump -p "$so" | awk '/NEEDED/ {print $2}')
    for n in $needed; do
        if [[ $n =~ $allowed ]]; then echo "   $n"; else echo "   $n   <- not allowed"; bad=1; fi
    done
    objdump -p "$so" | awk '/RUNPATH|RPATH/ {print "   runpath " $2}'
    # the newest symbol versions it asks of glibc and libstdc++
    for v in GLIBC GLIBCXX CXXABI; do
        m=$(objdump -T "$so" | grep -o "($v"'_[0-9.]*)' | tr -d '()' | sort -V | tail -1 || true)
        [ -n "$m" ] && echo "   needs $m"
    done
done < <(find "$tmp" -name '*.so*' -type f; find "$tmp" -path '*/bin/kiln' -type f)
if [ $bad != 0 ]; then echo "build_wheel.sh: the wheel needs a library outside the allowed set" >&2; exit 1; fi
ls -la "$out"
