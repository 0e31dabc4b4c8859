#!/usr/bin/env bash
# test.sh - set up, build and run every test (ctest): the release build first,
# then the same suite under AddressSanitizer + UndefinedBehaviorSanitizer, the
# multi-threaded tests under ThreadSanitizer, and each fuzz target replaying
# its corpus and regressions plus a bounded, fixed-seed mutation run. GPU
# tests skip on machines without a GPU and say so. Every stage is the same
# run each time: time limits scale with the build and the machine's load, and
# a test that times out is rerun once alone before it counts.
# KILN_TEST_SANITIZERS=0 runs the release suite only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" "$build"
export KILN_PYTHON=${KILN_PYTHON:-$root/.venv/bin/python}
jobs=$(nproc)
status=0
# Idle OpenMP threads spin briefly, then sleep (as the kiln command sets for
# itself, tools/omp_wait.c): libgomp's default spin of milliseconds on a busy
# machine makes every test many times slower.
if [ -z "${OMP_WAIT_POLICY:-}" ] && [ -z "${GOMP_SPINCOUNT:-}" ]; then
  export GOMP_SPINCOUNT=1000
fi

# The load over the CPUs this process may use (nproc honours the affinity),
# rounded up, 1 to 8: ctest's time limits are multiplied by it.
load_scale() {
  awk -v n="$(nproc)" '{ s = $1 / n; s = (s == int(s)) ? s : int(s) + 1;
                         if (s < 1) s = 1; if (s > 8) s = 8; print s }' /proc/loadavg
}

# run_ctest DIR [ENV=VALUE...] -- [ctest args]: ctest in DIR with its time
# limits set for the load now; tests that time out (and only those) are run
# again one at a time, and count as failed only when they fail then.
run_ctest() {
  local dir=$1; shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local scale log rc=0
  scale=$(load_scale)
  cmake -S "$root" -B "$dir" -DKILN_TEST_LOAD_SCALE="$scale" >/dev/null
  echo "(time limits x$scale for the load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) CPUs)"
  log=$(mktemp)
  (cd "$dir" && env "${envs[@]}" ctest --output-on-failure "$@") 2>&1 | tee "$log" || rc=1
  [ "$rc" = 0 ] && { rm -f "$log"; return 0; }
  # the summary lists "  12 - name (Failed)" / "(Timeout)"
  local timed others
  timed=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Timeout).*/\1/p' "$log")
  others=$(grep -E '^[[:space:]]*[0-9]+ - [^ ]+ \(' "$log" | grep -vc '(Timeout)' || true)
  rm -f "$log"
  [ -z "$timed" ] && return 1
  local re
  re="^($(echo "$timed" | sed 's/\./\\./g' | paste -sd'|'))\$"
  echo "== rerunning alone what timed out: $(echo "$timed" | paste -sd' ')"
  (cd "$dir" && env "${envs[@]}" ctest --output-on-failure -j1 -R "$re") || return 1
  [ "$others" = 0 ]
}

echo "== release build: all tests"
run_ctest "$build" -- -j"$jobs" "$@" || status=1

if [ "${KILN_TEST_SANITIZERS:-1}" != 0 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer: all tests"
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_SANITIZE=ON >/dev/null
  ninja -C "$root/build-asan" >/dev/null
  run_ctest "$root/build-asan" ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
     UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 -- -j"$jobs" "$@" || status=1

  echo "== ThreadSanitizer: multi-threaded tests"
  # Libraries that are not instrumented (OpenMP's runtime, oneDNN's primitive
  # cache) synchronise where ThreadSanitizer cannot see it and give false
  # reports: this build leaves oneDNN/OpenBLAS and CUDA out and runs the
  # engine tests' kernels single-threaded, so the reports are about kiln's own
  # sharing of engines, contexts and the plugin registry between threads
  # (cli.flags: kiln exec's streams, a thread each); kiln's thread pool, which
  # is instrumented, is checked by its own tests with many threads.
  cmake -S "$root" -B "$root/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_TSAN=ON -DKILN_USE_DNNL=OFF -DKILN_USE_OPENBLAS=OFF -DKILN_CUDA=OFF >/dev/null
  ninja -C "$root/build-tsan" >/dev/null
  run_ctest "$root/build-tsan" KILN_NUM_THREADS=1 OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
     -- -R '^(unit.test_runtime|unit.test_pool|unit.test_pool_sleep|plugins.c|cli.flags)$' || status=1

  echo "== libFuzzer targets: corpus and regressions, then ${KILN_FUZZ_RUNS:-2000} mutations from seed ${KILN_FUZZ_SEED:-1}"
  # Deterministic: open-ended fuzzing is scripts/fuzz.sh, and what it finds
  # is added to tests/fuzz/regressions_<target>/, which this replays.
  CC=clang cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_FUZZ_RUNS="${KILN_FUZZ_RUNS:-2000}" \
        -DKILN_FUZZ_SEED="${KILN_FUZZ_SEED:-1}" >/dev/null
  ninja -C "$root/build-fuzz" fuzz_onnx fuzz_plan fuzz_plugin_fields fuzz_npy >/dev/null
  run_ctest "$root/build-fuzz" -- -R '^fuzz\.' || status=1
fi
exit $status
