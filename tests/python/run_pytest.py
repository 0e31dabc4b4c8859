"""ctest entry of the Python tests: skip (77) without pytest, numpy or the
built package; else pytest over tests/python."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)
try:
    import kiln  # noqa: F401
except ImportError as e:
    print(f"skipped: the kiln package is not importable ({e})")
    sys.exit(77)
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", here] + sys.argv[1:]))
