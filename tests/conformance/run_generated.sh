#!/bin/sh
# run_generated.sh - ONNX node cases newer than the Debian test data
# (RotaryEmbedding, RMSNormalization: opset 23), written from the installed
# onnx package by gen_node_cases.py, then run as conformance.node runs the
# others. Usage: run_generated.sh RUN_NODE_TESTS WORK_DIR EXPECTED_FILE
# Exit 77 (skipped) without Python or onnx.
set -u
here=$(cd "$(dirname "$0")" && pwd)
runner=$1 work=$2 expected=$3
rm -rf "$work" && mkdir -p "$work" || exit 1
"$here/../models/py.sh" "$here/gen_node_cases.py" "$work/node" RotaryEmbedding RMSNormalization CastLike Adam
rc=$?
[ $rc -eq 0 ] || exit $rc
exec "$runner" --data "$work/node" --expected "$expected" --results "$work/results.txt"
