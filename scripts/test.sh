#!/usr/bin/env bash
# test.sh - set up, build and run every test (ctest). GPU tests skip on
# machines without a GPU and say so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" "$build"
export KILN_PYTHON=${KILN_PYTHON:-$root/.venv/bin/python}
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
