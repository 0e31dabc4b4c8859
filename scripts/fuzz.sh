#!/usr/bin/env bash
# fuzz.sh - run every fuzz target for a long time (default 1 hour each) on
# the seed corpora; crashes land in build-fuzz/crashes/. Each crash found
# becomes a regression input under tests/fuzz/regressions_<target>/.
# Usage: scripts/fuzz.sh [seconds-per-target] [jobs]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-3600}
jobs=${2:-1}
CC=clang cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DKILN_CUDA=OFF >/dev/null
ninja -C "$root/build-fuzz" fuzz_onnx fuzz_plan fuzz_plugin_fields fuzz_npy >/dev/null
mkdir -p "$root/build-fuzz/crashes"
for t in onnx plan plugin_fields npy; do
  work=$root/build-fuzz/long_$t
  mkdir -p "$work"
  cp -n "$root"/tests/fuzz/corpus_$t/* "$work"/ 2>/dev/null || true
  echo "fuzz_$t: ${secs}s x $jobs job(s)"
  "$root/build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$secs" -jobs="$jobs" -workers="$jobs" \
      -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$root/build-fuzz/crashes/${t}-" "$work" || echo "fuzz_$t: found a crash"
done
