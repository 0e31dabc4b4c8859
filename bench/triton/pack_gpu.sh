#!/bin/bash
# pack_gpu.sh - gather what bench/triton/bench_gpu.sh needs on the GPU machine
# (no network there) into .device/: triton.txz holds the tritonserver binary of
# the nvidia-pytriton wheel and the libraries it loads (the wheel's
# nvidia_pytriton.libs, trimmed to what `ldd tritonserver` names, in the
# wheel's layout so its RUNPATH still finds them); kiln_triton.tgz holds the
# CUDA build of kiln, libkiln.so and the backend folder triton/backends/kiln,
# whose libkiln.so is a symlink to the one copy at the top (libkiln.so is most
# of the bytes; two copies would not fit what a run carries), with
# triton_exec_bench beside kiln; perf_analyzer.txz holds perf_analyzer and the
# two libraries it needs (below). Nothing else goes in: the folder should hold
# those three archives only (all written afresh). Carry the folder (.device, or KILN_PACK_OUT).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${KILN_PYTHON:-$root/.venv/bin/python}
# KILN_PACK_BUILD=DIR packs an existing build instead (no build step)
b=${KILN_PACK_BUILD:-$root/build-gpu}
dev=${KILN_PACK_OUT:-$root/.device}
if [ -z "${KILN_PACK_BUILD:-}" ]; then
  launch=""
  command -v ccache >/dev/null && launch="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
  cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_USE_DNNL=OFF \
        -DKILN_USE_OPENBLAS=OFF -DKILN_TRITON=ON $launch >/dev/null
  ninja -C "$b" kiln_cli triton_kiln triton_exec_bench >/dev/null
fi
mkdir -p "$dev"
rm -f "$dev/triton.txz" "$dev/kiln_triton.tgz"
site=$("$py" -c 'import os, pytriton; print(os.path.dirname(os.path.dirname(pytriton.__file__)))')
bin=pytriton/tritonserver/bin/tritonserver
libs=$(cd "$site" && ldd $bin | awk '/nvidia_pytriton.libs/ {print $3}' | xargs -n1 basename | sed 's|^|nvidia_pytriton.libs/|')
tar cf - -C "$site" $bin $libs | xz -T2 -6 > "$dev/triton.txz"
# the slim layout, staged: kiln, libkiln.so, triton/backends/kiln/{libtriton_kiln.so, libkiln.so -> ../../../libkiln.so}
# (libkiln_omp_wait.so exists, and libkiln.so needs it, only in a build with oneDNN: then it goes beside both)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/triton/backends/kiln"
cp "$b/kiln" "$b/libkiln.so" "$stage/"
cp "$b/triton/backends/kiln/libtriton_kiln.so" "$stage/triton/backends/kiln/"
# the backend behind a stand-in server (bench/triton/exec_bench.c), when built
[ -f "$b/src/triton/triton_exec_bench" ] && cp "$b/src/triton/triton_exec_bench" "$stage/"
ln -s ../../../libkiln.so "$stage/triton/backends/kiln/libkiln.so"
if [ -f "$b/libkiln_omp_wait.so" ]; then
    cp "$b/libkiln_omp_wait.so" "$stage/"
    ln -s ../../../libkiln_omp_wait.so "$stage/triton/backends/kiln/libkiln_omp_wait.so"
fi
# the commit the build is of, for the reports' commit line (the device runs a
# copy of the tree where git may name another commit): "unknown" when not known
c=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)
if [ -n "$c" ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    c="$c+uncommitted changes"
fi
echo "${c:-unknown}" > "$stage/COMMIT"
tar czf "$dev/kiln_triton.tgz" -C "$stage" .
n=$(tar tvzf "$dev/kiln_triton.tgz" | awk '$1 !~ /^l/ && $NF ~ /libkiln\.so$/' | wc -l)
[ "$n" = 1 ] || { echo "pack_gpu.sh: kiln_triton.tgz holds $n copies of libkiln.so (want 1)" >&2; exit 1; }
# perf_analyzer (optional; KILN_PACK_PA=0 leaves it out): PyPI's perf-analyzer
# is an empty placeholder, but the tritonclient 2.36.0 wheel still carries the
# binary; it needs libb64.so.0d (Debian's libb64-0d, installed here) and
# libcudart.so.12 (the nvidia-cuda-runtime-cu12 wheel). KILN_PA_DIR: a folder
# already holding those three files.
rm -f "$dev/perf_analyzer.txz"
if [ "${KILN_PACK_PA:-1}" = 1 ]; then
    pa=${KILN_PA_DIR:-}
    if [ -z "$pa" ]; then
        pa=$(mktemp -d)
        dl=$(mktemp -d)
        if "$py" -m pip download --no-deps --only-binary=:all: -d "$dl" tritonclient==2.36.0 nvidia-cuda-runtime-cu12 >/dev/null 2>&1 &&
           (cd "$dl" && "$py" -m zipfile -e tritonclient-2.36.0-*.whl tc >/dev/null &&
            "$py" -m zipfile -e nvidia_cuda_runtime_cu12-*.whl rt >/dev/null); then
            cp "$dl"/tc/tritonclient-2.36.0.data/data/bin/perf_analyzer "$pa/" && chmod +x "$pa/perf_analyzer"
            cp "$dl"/rt/nvidia/cuda_runtime/lib/libcudart.so.12 "$pa/"
        fi
        cp /usr/lib/x86_64-linux-gnu/libb64.so.0d "$pa/" 2>/dev/null || echo "pack_gpu.sh: no libb64.so.0d (apt-get install libb64-0d)" >&2
        rm -rf "$dl"
    fi
    if [ -x "$pa/perf_analyzer" ] && [ -f "$pa/libcudart.so.12" ] && [ -f "$pa/libb64.so.0d" ]; then
        tar cf - -C "$pa" perf_analyzer libcudart.so.12 libb64.so.0d | xz -T2 -6 > "$dev/perf_analyzer.txz"
    else
        echo "pack_gpu.sh: perf_analyzer not packed (bench_gpu.sh runs without it)" >&2
    fi
fi
du -sh "$dev"/*.t?z
