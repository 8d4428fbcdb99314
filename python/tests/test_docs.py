"""The docs run: every code block of README.md and docs/GUIDE.md is executed
as a reader following the page would, in order, each page in a directory
of its own (so the `./prof` one block makes is there for the next).

A block is run as it is written: ```python with this environment's
Python, ```sh with bash -e, this environment's bin/ first on PATH (so
`python`, `trainprof` and `torchrun` are the installed ones). The
directory holds a small `train.py` (a PyTorch loop that takes any
arguments), the script the guide's commands profile.

A comment just before a block's fence says what is different:

- `<!-- doc-test: skip: WHY -->`: not run here, and why (it needs a GPU,
  it makes the environment this test runs in, ...);
- `<!-- doc-test: context -->`: a Python fragment that uses `net`,
  `loader`, `train_step(batch)` or `train(net)` as the page's prose
  describes them: run after definitions of those (a small PyTorch loop);
- `<!-- doc-test: output: WHAT -->`: a block of quoted output (or a
  directory tree), not a command; a test that makes WHAT checks that the
  output has lines of the quoted ones' shape, numbers aside (the
  straggler report: test_distributed.py with assert_printed_as_quoted;
  a hang's incident report and the directory it is in, where `{host}`
  and `...` stand for any name: tests/mpi_test.cc).

A block without a language must be marked; a block with one is run unless
marked, so a new block is tested by default.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/GUIDE.md")
MARKER = re.compile(r"^<!-- doc-test: (skip|context|output)(?:: (.*?))? -->$")

TRAIN_PY = '''"""What the guide's commands profile: a few steps of a small model."""
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained")
'''

CONTEXT = '''import torch, trainprof
net = torch.nn.Linear(64, 10)
_optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
loader = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(6)]


def train_step(batch):
    x, y = batch
    loss = torch.nn.functional.cross_entropy(net(x), y)
    _optimizer.zero_grad()
    loss.backward()
    _optimizer.step()


def train(net):
    for batch in loader:
        train_step(batch)


'''


@dataclasses.dataclass
class Block:
    page: str
    line: int  # of the opening fence
    language: str
    text: str
    mark: str  # "", "skip", "context" or "output"
    why: str


def blocks(page: str) -> list[Block]:
    found: list[Block] = []
    lines = (REPO / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before.strip())
        found.append(Block(page, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           marker.group(1) if marker else "", (marker.group(2) or "") if marker else ""))
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dirs = {}
    for page in PAGES:
        d = tmp_path_factory.mktemp(Path(page).stem)
        (d / "train.py").write_text(TRAIN_PY)
        dirs[page] = d
    return dirs


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAINPROF_OPTIONS", "TRAINPROF_DYNAMIC_CONFIG", "TRAINPROF_DYNAMIC_OUTPUT")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def quoted_output(page: str, what: str) -> list[str]:
    """The lines of the block of `page` marked as output whose reason holds `what`."""
    [block] = [b for b in blocks(page) if b.mark == "output" and what in b.why]
    return block.text.splitlines()


NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def shape(line: str) -> re.Pattern:
    """A quoted output line with each of its numbers standing for any:
    what another run prints has this shape when the wording is the page's."""
    parts = NUMBER.split(line)
    return re.compile(r"[+-]?\d+(?:\.\d+)?".join(re.escape(p) for p in parts))


def assert_printed_as_quoted(page: str, what: str, printed: str) -> None:
    """Each line `page` quotes as `what` prints has a line of that shape in `printed`."""
    for line in quoted_output(page, what):
        assert any(shape(line).fullmatch(p) for p in printed.splitlines()), (
            f"{page} quotes a line the program no longer prints:\n{line}\nprinted:\n{printed}")


def test_every_block_is_run_or_says_why_not() -> None:
    for b in ALL:
        where = f"{b.page}:{b.line}"
        assert b.language or b.mark == "output", f"{where}: a block without a language must be marked output"
        assert b.mark not in ("skip", "output") or b.why, f"{where}: a skipped or quoted block says why"
        assert b.mark != "context" or b.language == "python", f"{where}: context is for Python blocks"
    assert sum(b.mark == "" or b.mark == "context" for b in ALL) >= 10  # most of it runs


@pytest.mark.parametrize("block", ALL, ids=[f"{b.page}:{b.line}" for b in ALL])
def test_the_block_runs(block: Block, workdirs: dict[str, Path]) -> None:
    if block.mark in ("skip", "output"):
        pytest.skip(f"{block.mark}: {block.why}")
    cwd = workdirs[block.page]
    if block.language == "python":
        code = (CONTEXT if block.mark == "context" else "") + block.text
        command = [sys.executable, "-c", code]
    elif block.language in ("sh", "bash"):
        command = ["bash", "-e", "-c", block.text]
    else:
        pytest.fail(f"{block.page}:{block.line}: a ```{block.language} block cannot be run here: mark it skip")
    done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.page}:{block.line} failed:\n{block.text}\n{done.stdout}\n{done.stderr}"
