"""The ``trainprof`` command: runs the C++ CLI installed in the package."""

from __future__ import annotations

import os
import sys

_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "trainprof")


def main() -> None:
    """Replaces this process with ``trainprof/bin/trainprof ARGS...``."""
    try:
        os.execv(_BINARY, [_BINARY, *sys.argv[1:]])
    except OSError as e:
        sys.exit(f"trainprof: cannot run {_BINARY}: {e}")
