#!/usr/bin/env bash
# run_example.sh - the main job: set up, build, build a plan from the bundled
# example model and run it with kiln's performance summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" "$build"
model=$root/examples/tiny_cnn.onnx
plan=$build/tiny_cnn.plan
backend=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  if grep -q "^KILN_CUDA:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
    backend=cuda
  else
    echo "run_example: a GPU is present, but this build has no CUDA backend (nvcc missing); running on the CPU"
  fi
fi
echo "run_example: building $model into $plan ($backend)"
"$build/kiln" exec --onnx="$model" --saveEngine="$plan" --shapes=input:1x3x64x64 --skipInference \
    --backend=$backend
echo "run_example: running $plan"
"$build/kiln" exec --loadEngine="$plan" --shapes=input:1x3x64x64 --iterations=200 --warmUp=200
