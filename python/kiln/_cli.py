"""The `kiln` console script of an installed package: runs the kiln CLI
binary installed in the package (kiln/bin/kiln) with the same arguments."""
from __future__ import annotations

import os
import sys


def cli_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "bin", "kiln")


def main() -> None:
    exe = cli_path()
    if not os.access(exe, os.X_OK):
        sys.exit(f"kiln: the CLI binary is not installed at {exe} (build tree? use build/kiln)")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
