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


class Outcomes:
    """Counts results, so a file whose every test skipped (the GPU tests
    without a GPU) reports a ctest skip rather than a pass."""
    passed = failed = skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            Outcomes.passed += 1
        elif report.failed:
            Outcomes.failed += 1
        elif report.skipped:
            Outcomes.skipped += 1


here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:] or [here]
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "--rootdir", here] + args,
                 plugins=[Outcomes()])
if rc == 0 and Outcomes.passed == 0 and Outcomes.skipped > 0:
    print(f"skipped: all {Outcomes.skipped} test(s) skipped")
    sys.exit(77)
sys.exit(rc)
