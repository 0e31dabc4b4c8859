#!/usr/bin/env bash
# setup.sh - install what kiln needs on a fresh Debian machine (system
# packages, a Python virtualenv with onnx/onnxruntime/numpy) and build it.
# Usage: scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}

pkgs=(build-essential cmake ninja-build pkg-config python3-venv
      libdnnl-dev libopenblas-dev protobuf-c-compiler libprotobuf-c-dev
      libonnx-testdata clang libclang-rt-14-dev libomp-14-dev python3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv=$root/.venv
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
# The virtualenv is brought up to scripts/requirements.txt whenever that file
# changes (its hash is kept beside the environment).
req=$root/scripts/requirements.txt
stamp=$venv/.kiln-requirements
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing scripts/requirements.txt into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
ninja -C "$build"
