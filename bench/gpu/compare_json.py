#!/usr/bin/env python3
"""compare_json.py - max relative difference between two `kiln exec
--exportOutput` JSON files (every number, in order): |a - b| / (1 + |a|).
Usage: compare_json.py REF.json OTHER.json LABEL"""
import json
import sys


def values(path):
    out = []

    def walk(x):
        if isinstance(x, bool):
            out.append(float(x))
        elif isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for k in sorted(x):
                if k not in ("name", "dims", "shape", "dtype", "type"):
                    walk(x[k])

    walk(json.load(open(path)))
    return out


try:
    a, b = values(sys.argv[1]), values(sys.argv[2])
except (OSError, ValueError) as e:
    print("%s: cannot compare (%s)" % (sys.argv[3], e))
    sys.exit(1)
if not a or len(a) != len(b):
    print("%s: cannot compare (%d vs %d values)" % (sys.argv[3], len(a), len(b)))
    sys.exit(1)
err = max(abs(x - y) / (1 + abs(x)) for x, y in zip(a, b))
print("%s: %d values, max |diff|/(1+|ref|) %.3g" % (sys.argv[3], len(a), err))
