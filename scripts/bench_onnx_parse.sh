#!/bin/sh
# bench_onnx_parse.sh - the ONNX reader decision's measurement (docs/decisions.md):
# parse a model with ~1 GB of weights with protobuf-c (Debian's onnx.proto) and
# with kiln's reader, 3 runs each, parse only and parse + read every weight.
# usage: scripts/bench_onnx_parse.sh [model]   (kiln built in build-onnx first)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-/tmp/kiln_bench_1gb.onnx}
OUT=${OUT:-/tmp/kiln_bench_onnx_parse}
PY=${PY:-/tmp/venvtest/bin/python}
[ -f "$MODEL" ] || "$PY" "$ROOT/scripts/bench_onnx_parse.py" --out "$MODEL"
make -s -C "$ROOT/bench/onnx_parse" ROOT="$ROOT" OUT="$OUT"
cat "$MODEL" > /dev/null   # warm the page cache: every run starts equal
echo "model: $MODEL ($(stat -c %s "$MODEL") bytes)"
for mode in "" --touch; do
  for prog in pc_parse kiln_parse; do
    for run in 1 2 3; do
      /usr/bin/time -v "$OUT/$prog" "$MODEL" $mode 2> "$OUT/time.txt" | tr -d '\n'
      wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$OUT/time.txt")
      rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/time.txt")
      echo "; run $run: process wall $wall, max RSS $rss KiB"
    done
  done
done
