"""Shared helpers: a tiny real training loop and readers of the outputs."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest

torch = pytest.importorskip("torch")

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"

sys.path.insert(0, str(EXAMPLES))
from fashion_mnist import read_idx  # noqa: E402  (the demo's IDX reader)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``device`` need a CUDA device: skipped, saying so, without one."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs pytest -m device)")
    for item in items:
        if "device" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def batches() -> list:
    """Eight batches of 32 Fashion-MNIST images (random ones where Debian's
    dataset-fashion-mnist is not installed)."""
    n = 256
    images = FASHION_MNIST / "train-images-idx3-ubyte.gz"
    if images.exists():
        x = read_idx(images, n).float().div(255).unsqueeze(1)
        y = read_idx(FASHION_MNIST / "train-labels-idx1-ubyte.gz", n).long()
    else:
        gen = torch.Generator().manual_seed(0)
        x, y = torch.rand(n, 1, 28, 28, generator=gen), torch.randint(0, 10, (n,), generator=gen)
    return list(zip(x.split(32), y.split(32)))


class Trainer:
    """A small CNN trained by SGD: real aten operators, forward and backward."""

    def __init__(self, batches: list) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(4 * 13 * 13, 10))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.batches = batches

    def train_step(self, i: int) -> float:
        x, y = self.batches[i % len(self.batches)]
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def run(self, steps: int, after_step: Optional[Callable[[], None]] = None) -> None:
        for i in range(steps):
            self.train_step(i)
            if after_step is not None:
                after_step()


@pytest.fixture
def trainer(batches: list) -> Trainer:
    return Trainer(batches)


def run_dirs(root: Path) -> list[Path]:
    """The run directories under ``root``, oldest first."""
    return sorted((p for p in root.iterdir() if p.name.endswith("_trainprof")), key=lambda p: p.name)


def trace_events(run_dir: Path) -> list[dict]:
    with open(run_dir / "PROFILER_OUTPUT" / "trace_view.json") as f:
        return json.load(f)["traceEvents"]


def op_statistic(run_dir: Path) -> dict[str, dict]:
    """op_statistic.csv by OP Type."""
    with open(run_dir / "PROFILER_OUTPUT" / "op_statistic.csv", newline="") as f:
        return {row["OP Type"]: row for row in csv.DictReader(f)}


def names(events: list[dict], cat: str) -> list[str]:
    return [e["name"] for e in events if e.get("cat") == cat]


def outputs_on_threads(run_dir: Path, threads: int) -> dict[str, bytes]:
    """Every output of ``run_dir`` analysed again with ``--jobs threads``, by
    file name; profiler_info.json without when the analysis ran, how long it
    took and on how many threads."""
    import subprocess
    result = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run_dir), "--jobs", str(threads)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    files = {p.name: p.read_bytes() for p in (run_dir / "PROFILER_OUTPUT").iterdir() if p.is_file()}
    info = json.loads(files["profiler_info.json"])
    assert info["analysis"]["analysis_threads"] == threads
    for varies in ("analysed_at_ns", "analysis_seconds", "analysis_threads"):
        del info["analysis"][varies]
    files["profiler_info.json"] = json.dumps(info, sort_keys=True).encode()
    return files


def assert_outputs_do_not_depend_on_threads(run_dir: Path) -> None:
    """The run's outputs on 1 thread and on 3 are the same bytes, file by file."""
    one, three = outputs_on_threads(run_dir, 1), outputs_on_threads(run_dir, 3)
    assert sorted(one) == sorted(three)
    assert "trace_view.pftrace" in one and "trace_view.json" in one
    differ = [name for name in one if one[name] != three[name]]
    assert not differ, f"{run_dir}: {differ} differ between 1 and 3 threads"


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own directory: the default ./data lands there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINPROF_OPTIONS", raising=False)
    monkeypatch.delenv("TRAINPROF_DYNAMIC_CONFIG", raising=False)


def profiled_run(out: Path, batches: list, active: int) -> Path:
    """One analysed run of ``active`` recorded training steps (after a warm-up
    step), with memory, through the trace handler; its run directory."""
    import trainprof
    trainer = Trainer(batches)
    with trainprof.profile(activities=[trainprof.ProfilerActivity.CPU],
                           schedule=trainprof.schedule(wait=0, warmup=1, active=active), profile_memory=True,
                           on_trace_ready=trainprof.tensorboard_trace_handler(str(out))) as prof:
        trainer.run(active + 1, prof.step)
    [run] = run_dirs(out)
    return run
