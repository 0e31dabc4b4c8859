#!/bin/sh
# exec_bench_test.sh KILN_CLI EXEC_BENCH BACKEND_LIB - ctest triton.exec_bench:
# bench/triton/exec_bench.c (the backend behind a stand-in for the server)
# on a CPU plan of examples/tiny_cnn.onnx: one request (inputs and outputs
# bound in place), three (padded up to the bucket of 4, gathered), four in
# pinned memory with zero_copy off, and one with buckets off; every response
# must equal kiln's own run on the same inputs (exit 1 otherwise).
set -eu
kiln=$1 bench=$2 lib=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$kiln" exec --onnx="$root/examples/tiny_cnn.onnx" --saveEngine="$d/tiny.plan" --skipInference --backend=cpu \
    --minShapes=input:1x3x64x64 --optShapes=input:8x3x64x64 --maxShapes=input:8x3x64x64 > "$d/build.log" 2>&1 ||
    { cat "$d/build.log"; exit 1; }
run() {
    echo "== $*"
    "$bench" --backend "$lib" --plan "$d/tiny.plan" --iters 40 --warm 5 --param cpu_threads=1 "$@" 2> "$d/err.log" ||
        { cat "$d/err.log"; exit 1; }
}
run --requests 1
run --requests 3
run --requests 4 --pinned --param zero_copy=false
run --requests 5 --param batch_buckets=none
# a bad request count is refused (usage: exit 2), not run
if "$bench" --backend "$lib" --plan "$d/tiny.plan" --requests 9 > /dev/null 2>&1; then
    echo "--requests 9 past max batch 8 was accepted"; exit 1
fi
echo "exec_bench_test: all responses matched kiln"
