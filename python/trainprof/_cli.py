# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""The ``trainprof`` command: ``run`` profiles a Python script
(trainprof/_run.py); every other command is the C++ CLI installed in the
package (analyse, summary, ...)."""

from __future__ import annotations

import os
import sys

_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "trainprof")


def main() -> None:
    """``run ...`` runs a script under the profiler; anything else replaces
    this process with ``trainprof/bin/trainprof ARGS...``."""
    if sys.argv[1:2] == ["run"]:
        from . import _run
        sys.exit(_run.main(sys.argv[2:]))
    # The C++ CLI would start a profiler of its own from TRAINPROF_OPTIONS.
    os.environ.pop("TRAINPROF_OPTIONS", None)
    try:
        os.execv(_BINARY, [_BINARY, *sys.argv[1:]])
    except OSError as e:
        sys.exit(f"trainprof: cannot run {_BINARY}: {e}")
