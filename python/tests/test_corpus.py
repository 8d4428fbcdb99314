"""The advisor's scored corpus (docs/ADVICE.md, "The corpus"), its fast
part: training scripts nobody wrote for a test of their own, each run as a
user would (zero-code under ``python -m trainprof run`` and inside
``trainprof.profile()``), then ``trainprof advise``. Each planted problem is
the first finding; each clean loop gets none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import torch  # noqa: F401  (skips without torch)

RUN = Path(__file__).resolve().parents[2] / "corpus" / "run.py"


def test_the_fast_part_of_the_corpus_gets_every_first_finding_right() -> None:
    result = subprocess.run([sys.executable, str(RUN), "--fast"], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " workloads right in zero-code / profile " in result.stdout, result.stdout
