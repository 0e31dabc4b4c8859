#!/bin/bash
# device_pack.sh - build the CUDA configuration (no oneDNN/OpenBLAS, which the
# GPU machine lacks) and gather what bench/gpu/session.sh runs into .device/:
# kiln, libkiln.so, the CUDA kernel tests, the kernel micro-benchmark, the
# conformance runner and the ONNX node test data.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build-gpu
cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_USE_DNNL=OFF \
      -DKILN_USE_OPENBLAS=OFF >/dev/null
ninja -C "$b" >/dev/null
rm -rf "$root/.device" && mkdir -p "$root/.device"
cp "$b/kiln" "$b/libkiln.so" "$b/tests/cuda/test_cuda_ops" "$b/tests/conformance/run_node_tests" \
   "$b/bench/bench_cuda_kernels" "$root/.device/"
data=/usr/share/libonnx-testdata/data
[ -d $data/node ] && tar czf "$root/.device/node.tgz" -C $data node
du -sh "$root/.device"
