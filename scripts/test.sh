#!/usr/bin/env bash
# test.sh - set up, build and run every test (ctest): the release build first,
# then the same suite under AddressSanitizer + UndefinedBehaviorSanitizer, the
# multi-threaded tests under ThreadSanitizer, and each fuzz target for a short
# fixed time. GPU tests skip on machines without a GPU and say so.
# KILN_TEST_SANITIZERS=0 runs the release suite only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" "$build"
export KILN_PYTHON=${KILN_PYTHON:-$root/.venv/bin/python}
jobs=$(nproc)
status=0

echo "== release build: all tests"
(cd "$build" && ctest --output-on-failure -j"$jobs" "$@") || status=1

if [ "${KILN_TEST_SANITIZERS:-1}" != 0 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer: all tests"
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_SANITIZE=ON >/dev/null
  ninja -C "$root/build-asan" >/dev/null
  (cd "$root/build-asan" && ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
     UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     ctest --output-on-failure -j"$jobs" "$@") || status=1

  echo "== ThreadSanitizer: multi-threaded tests"
  # Libraries that are not instrumented (OpenMP's runtime, oneDNN's primitive
  # cache) synchronise where ThreadSanitizer cannot see it and give false
  # reports: this build leaves oneDNN/OpenBLAS and CUDA out and runs kernels
  # single-threaded, so the reports are about kiln's own sharing of engines,
  # contexts and the plugin registry between threads (cli.flags: kiln exec's
  # streams, a thread each).
  cmake -S "$root" -B "$root/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_TSAN=ON -DKILN_USE_DNNL=OFF -DKILN_USE_OPENBLAS=OFF -DKILN_CUDA=OFF >/dev/null
  ninja -C "$root/build-tsan" >/dev/null
  (cd "$root/build-tsan" && KILN_NUM_THREADS=1 OMP_NUM_THREADS=1 \
     TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R 'unit.test_runtime|plugins.c|cli.flags') || status=1

  echo "== libFuzzer targets (short runs)"
  CC=clang cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_FUZZ_SECONDS="${KILN_FUZZ_SECONDS:-30}" >/dev/null
  ninja -C "$root/build-fuzz" fuzz_onnx fuzz_plan fuzz_plugin_fields fuzz_npy >/dev/null
  (cd "$root/build-fuzz" && ctest --output-on-failure -R '^fuzz\.') || status=1
fi
exit $status
