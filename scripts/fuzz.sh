#!/usr/bin/env bash
# fuzz.sh - open-ended fuzzing: run every fuzz target for a long time
# (default 1 hour each) from its seed corpus and regressions, with a seed from
# the clock (printed by libFuzzer as "INFO: Seed:"). Crashes land in
# build-fuzz/crashes/<target>-crash-*. For each one: fix the defect, then copy
# the input into tests/fuzz/regressions_<target>/ (a name that says what it
# is) and commit it, so CI's deterministic replay (ctest -R '^fuzz\.', in
# scripts/test.sh) keeps it fixed. Repeat a find with
#   build-fuzz/tests/fuzz/fuzz_<target> build-fuzz/crashes/<file>
# Usage: scripts/fuzz.sh [seconds-per-target] [jobs] [target...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-3600}
jobs=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx plan plugin_fields npy)
CC=clang cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DKILN_CUDA=OFF >/dev/null
ninja -C "$root/build-fuzz" "${targets[@]/#/fuzz_}" >/dev/null
mkdir -p "$root/build-fuzz/crashes"
found=0
for t in "${targets[@]}"; do
  work=$root/build-fuzz/long_$t
  mkdir -p "$work"
  cp -n "$root"/tests/fuzz/corpus_$t/* "$work"/ 2>/dev/null || true
  echo "fuzz_$t: ${secs}s x $jobs job(s)"
  (cd "$root/build-fuzz" && "$root/build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$secs" \
      -jobs="$jobs" -workers="$jobs" -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$root/build-fuzz/crashes/${t}-" "$work" "$root/tests/fuzz/regressions_$t") ||
      { echo "fuzz_$t: found a crash"; found=1; }
done
if ls "$root"/build-fuzz/crashes/* >/dev/null 2>&1; then
  echo "inputs in build-fuzz/crashes/ (fix each, then copy it to tests/fuzz/regressions_<target>/):"
  ls -l "$root"/build-fuzz/crashes/
fi
exit $found
