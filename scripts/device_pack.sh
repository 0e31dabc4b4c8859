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
# one archive: the executables each carry the library's device code, which
# compresses to a third across files (the device tool carries 64 MiB at most)
tar czf "$root/.device/bins.tgz" -C "$b" kiln libkiln.so tests/cuda/test_cuda_ops \
    tests/conformance/run_node_tests bench/bench_cuda_kernels bench/wgmma_probe bench/carveout_probe --transform 's|.*/||' 
data=/usr/share/libonnx-testdata/data
[ -d $data/node ] && tar czf "$root/.device/node.tgz" -C $data node
du -sh "$root/.device"
