#!/bin/bash
# pack_gpu.sh - gather what bench/triton/bench_gpu.sh needs on the GPU machine
# (no network there) into .device/: triton.txz holds the tritonserver binary of
# the nvidia-pytriton wheel and the libraries it loads (the wheel's
# nvidia_pytriton.libs, trimmed to what `ldd tritonserver` names, in the
# wheel's layout so its RUNPATH still finds them); kiln_triton.tgz holds the
# CUDA build of kiln, libkiln.so and libtriton_kiln.so. Carry .device.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${KILN_PYTHON:-$root/.venv/bin/python}
# KILN_PACK_BUILD=DIR packs an existing build instead (no build step)
b=${KILN_PACK_BUILD:-$root/build-gpu}
dev=${KILN_PACK_OUT:-$root/.device}
if [ -z "${KILN_PACK_BUILD:-}" ]; then
  cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_USE_DNNL=OFF \
        -DKILN_USE_OPENBLAS=OFF -DKILN_TRITON=ON >/dev/null
  ninja -C "$b" kiln_cli triton_kiln >/dev/null
fi
mkdir -p "$dev"
site=$("$py" -c 'import os, pytriton; print(os.path.dirname(os.path.dirname(pytriton.__file__)))')
bin=pytriton/tritonserver/bin/tritonserver
libs=$(cd "$site" && ldd $bin | awk '/nvidia_pytriton.libs/ {print $3}' | xargs -n1 basename | sed 's|^|nvidia_pytriton.libs/|')
tar cf - -C "$site" $bin $libs | xz -T2 -6 > "$dev/triton.txz"
# libkiln_omp_wait.so exists (and libkiln.so needs it) only in a build with oneDNN
shim=$(cd "$b" && ls libkiln_omp_wait.so 2>/dev/null || true)
tar czf "$dev/kiln_triton.tgz" -C "$b" kiln libkiln.so $shim triton/backends/kiln
du -sh "$dev"/triton.txz "$dev"/kiln_triton.tgz
