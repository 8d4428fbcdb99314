"""Without a usable torch, trainprof imports, says why operators are not
recorded, and profiles everything else (run in child processes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PROFILE_WITHOUT_OPERATORS = """
import warnings, trainprof
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with trainprof.profile(on_trace_ready=trainprof.tensorboard_trace_handler("out")):
        with trainprof.record_function("work"):
            pass
print("WARNING:", *[str(w.message) for w in caught])
print("STATUS:", trainprof.torch_collector_status())
"""


def run_child(prelude: str, cwd: Path) -> str:
    code = textwrap.dedent(prelude) + PROFILE_WITHOUT_OPERATORS
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_missing_torch(tmp_path: Path) -> None:
    # sys.modules["torch"] = None makes `import torch` fail as if not installed.
    out = run_child("import sys; sys.modules['torch'] = None\n", tmp_path)
    assert "WARNING: trainprof: torch operators are not recorded: torch cannot be imported" in out
    assert "STATUS: torch cannot be imported" in out
    (run,) = (p for p in (tmp_path / "out").iterdir() if p.is_dir())  # beside it: the trace link for TensorBoard
    assert "work" in (run / "PROFILER_OUTPUT" / "op_statistic.csv").read_text()


def test_torch_other_than_the_one_built_against(tmp_path: Path) -> None:
    out = run_child("import trainprof._build_info as b; b.TORCH_VERSION = '1.0.0'\n", tmp_path)
    assert "was built against torch 1.0.0, this process runs torch 2." in out
    assert "reinstall trainprof" in out
