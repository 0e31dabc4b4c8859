#!/bin/sh
# py.sh - run a Python test script with the project's Python: $KILN_PYTHON if
# set, else the repository's .venv, else python3.
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "$KILN_PYTHON" ]; then
  py=$KILN_PYTHON
elif [ -x "$root/.venv/bin/python" ]; then
  py=$root/.venv/bin/python
else
  py=python3
fi
if ! command -v "$py" >/dev/null 2>&1; then
  echo "skipped: no Python ($py) to run $1"
  exit 77
fi
exec "$py" "$@"
