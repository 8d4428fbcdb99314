"""The advisor on PyTorch training loops (docs/ADVICE.md): each workload
plants one problem and the advisor must name it first; a clean loop gets no
finding. ``trainprof.advise`` and ``python -m trainprof advise`` agree."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from conftest import run_dirs, torch
from torch.utils.data import DataLoader, Dataset

import trainprof
from trainprof import tensorboard_trace_handler

STEPS = 8


def mlp(layers: int = 4) -> torch.nn.Module:
    """``layers`` linear layers: 2 parameter tensors each."""
    torch.manual_seed(0)
    parts: list[torch.nn.Module] = []
    for _ in range(layers):
        parts += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    return torch.nn.Sequential(*parts)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def profile_loop(out: Path, step: Callable[[int], None], **options: object) -> Path:
    """STEPS steps of ``step`` (after a warm-up one) recorded and analysed:
    the run directory."""
    step(-1)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(out)), **options) as prof:
        for i in range(STEPS):
            step(i)
            if i + 1 < STEPS:
                prof.step()  # the last step ends at the profile's stop
    [run] = run_dirs(out)
    return run


def rules(run: Path) -> list[str]:
    return [f["rule"] for f in trainprof.advise(run)]


def clean_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[int], None]:
    x = torch.randn(64, 32)

    def step(i: int) -> None:
        train_step(model, optimizer, x)
        with trainprof.record_function("the rest of the step"):  # named: not work outside operators
            time.sleep(0.005)

    return step


def test_a_clean_loop_gets_no_finding(tmp_path: Path) -> None:
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    run = profile_loop(tmp_path, clean_step(model, optimizer))
    assert trainprof.advise(run) == []
    result = subprocess.run([sys.executable, "-m", "trainprof", "advise", str(run)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "no rule fired on its 1 run(s)" in result.stdout


class SlowSamples(Dataset):
    """Samples that take 3 ms each to make: a batch of 8 takes 24 ms."""

    def __len__(self) -> int:
        return 8 * (STEPS + 1)

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.003)
        return torch.randn(32)


def test_a_starved_loop_is_told_to_feed_it_faster(tmp_path: Path) -> None:
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    batches = iter(DataLoader(SlowSamples(), batch_size=8, num_workers=0))

    def step(i: int) -> None:
        train_step(model, optimizer, next(batches))

    run = profile_loop(tmp_path, step, data_process=True)
    [first, *_] = trainprof.advise(run)
    assert first["rule"] == "data_wait", first
    assert first["saving_basis"] == "re-timed: the steps with their data wait hidden"
    assert 0 < first["saving_ms"] < first["step_ms"]
    assert "num_workers" in first["change"]
    result = subprocess.run([sys.executable, "-m", "trainprof", "advise", str(run), "--json"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == trainprof.advise(run)


class ManyScales(torch.nn.Module):
    """A layer and 300 small parameter tensors (per-feature scales) that the
    forward uses in one operator: the update, parameter by parameter, is most
    of the step's operators."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(32, 32)
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(32)) for _ in range(300)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * torch.stack(list(self.scales)).mean(0)


@pytest.mark.parametrize("foreach", [False, True])
def test_an_optimizer_run_per_parameter_is_named(tmp_path: Path, foreach: bool) -> None:
    model = ManyScales()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
    run = profile_loop(tmp_path, clean_step(model, optimizer))
    if foreach:
        assert rules(run) == []
        return
    [first, *_] = trainprof.advise(run)
    assert first["rule"] == "unfused_optimizer", first
    assert first["title"] == "the optimizer runs per parameter (Adam)"
    assert "torch.optim.Adam(..., foreach=True)" in first["change"]


def test_torchs_default_optimizer_on_a_model_of_few_tensors_is_clean(tmp_path: Path) -> None:
    """Adam as torch makes it on the CPU (the per-parameter loop) on a model
    of 8 tensors: a multi-tensor step would save little of the step."""
    model = mlp()
    run = profile_loop(tmp_path, clean_step(model, torch.optim.Adam(model.parameters(), lr=1e-3)))
    assert rules(run) == []


def test_thousands_of_tiny_operators_are_named(tmp_path: Path) -> None:
    x = torch.ones(4)

    def step(i: int) -> None:
        y = x
        for _ in range(1500):
            y = y + 1
        time.sleep(0.001)

    run = profile_loop(tmp_path, step)
    [first, *_] = trainprof.advise(run)
    assert first["rule"] == "tiny_operators", first
    assert "torch.compile" in first["change"]


def test_garbage_collection_pauses_are_named(tmp_path: Path) -> None:
    kept = []

    def step(i: int) -> None:
        # A heap of objects in reference cycles, collected in full each step.
        for _ in range(20_000):
            a: list = []
            a.append(a)
            kept.append(a)
        gc.collect()
        kept.clear()
        time.sleep(0.002)

    run = profile_loop(tmp_path, step)
    [first, *_] = trainprof.advise(run)
    assert first["rule"] == "gc_pauses", first
    assert "gc.freeze()" in first["change"]
    # The collections are ranges in the timeline, each with a mark of what it collected.
    with open(run / "PROFILER_OUTPUT" / "trace_view.json") as f:
        events = json.load(f)["traceEvents"]
    collections = [e for e in events if e.get("ph") == "X" and e["name"].startswith("gc.collect (generation ")]
    assert len(collections) >= STEPS
    assert any(e.get("ph") == "i" and e["name"].startswith("collected ") for e in events)


GLOO_JOB = """
import os, sys, time, torch, torch.distributed as dist, trainprof
rank, out, overlapped = int(os.environ["RANK"]), sys.argv[1], sys.argv[2] == "overlapped"
torch.set_num_threads(1)
dist.init_process_group("gloo")
grads = torch.ones(4_000_000)  # 16 MB all-reduced each step
level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)  # communication recorded
with trainprof.profile(experimental_config=level1,
                       on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}")) as prof:
    for step in range(8):
        if overlapped:  # started before the step's work, waited for after it
            pending = dist.all_reduce(grads, async_op=True)
            with trainprof.record_function("work"):
                time.sleep(0.040)
            pending.wait()
        else:  # after the step's work: nothing overlaps it
            with trainprof.record_function("work"):
                time.sleep(0.040)
            dist.all_reduce(grads)
        if step < 7:
            prof.step()
dist.destroy_process_group()
"""


def run_two_ranks(script: Path, out: Path, *args: str) -> list[Path]:
    """``script OUT ARGS`` on two Gloo ranks: the ranks' runs under ``out``."""
    import os
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(script), str(out), *args], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"rank {r}: {err}"
    return run_dirs(out)


def run_gloo_job(tmp_path: Path, mode: str) -> list[Path]:
    """GLOO_JOB on two ranks, ``mode`` "exposed" or "overlapped": the ranks' runs."""
    script = tmp_path / "job.py"
    script.write_text(GLOO_JOB)
    return run_two_ranks(script, tmp_path / mode, mode)


def what_if(run: Path) -> dict[str, dict[str, float]]:
    """The run's what-if estimates (profiler_info.json) by change."""
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        return {w["change"]: w for w in json.load(f)["analysis"]["what_if"]}


def test_exposed_communication_is_named_and_its_overlap_re_timed(tmp_path: Path) -> None:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with Gloo is not available")
    estimated = []
    for run in run_gloo_job(tmp_path, "exposed"):
        [first, *_] = trainprof.advise(run)
        assert first["rule"] == "exposed_communication", first
        assert "bucket_cap_mb" in first["change"]
        # Gloo runs the all-reduce on its own thread while the step's thread
        # waits outside any recorded call; the wait is still the caller's on
        # the critical path (the COMM starts when its c10d:: call does), so
        # the saving is re-timed.
        assert first["saving_basis"] == "re-timed: the steps with their communication overlapped"
        assert first["saving_ms"] > 0.1 * first["step_ms"]
        estimated.append(what_if(run)["communication overlapped"]["estimated_step_ms"])
    # The real change: the same all-reduce started before the step's work
    # (a sleep, so that Gloo's thread has a core of its own on a small
    # machine), waited for after it. Nothing to say, and the step takes
    # what the estimate said, within 10 %.
    for run, estimate in zip(run_gloo_job(tmp_path, "overlapped"), estimated):
        assert "exposed_communication" not in rules(run)
        measured = next(iter(what_if(run).values()))["median_step_ms"]
        assert abs(estimate - measured) <= 0.10 * measured, (estimate, measured)


# DDP on two ranks, rank 1 spending 30 ms a step in a Python function before
# its forward: rank 0 waits for it in every gradient all-reduce, which runs
# in flight (no call holds rank 0), outside any operator on rank 0's side.
SLOW_PYTHON_RANK = """
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def load_features():
    end = time.perf_counter() + 0.030
    while time.perf_counter() < end:
        pass


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(16):
    if rank == 1:
        load_features()
    loss = model(torch.randn(32, 64)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
"""


def test_a_straggler_under_ddp_is_named_first_with_its_function_and_re_timed(tmp_path: Path) -> None:
    """Zero-code under torchrun: the straggler comes first, its cause names
    the function, the what-if re-times the in-flight buckets (2 ranks), and
    neither rank 0's wait nor rank 1's function is a finding of its own."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with Gloo is not available")
    script = tmp_path / "train.py"
    script.write_text(SLOW_PYTHON_RANK)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "--module", "trainprof", "run", str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    advice = trainprof.advise(tmp_path / "data")
    first = advice[0]
    assert first["rule"] == "straggler" and first["ranks"] == [1], advice
    assert first["cause"] == "host work outside operators", first
    assert "cause: host work outside operators" in first["evidence"], first
    assert "load_features (train.py:" in first["evidence"] and "load_features (train.py:" in first["change"], first
    assert first["saving_basis"].startswith("re-timed"), first
    assert first["saving_ms"] >= 15, first  # of the 30 ms rank 1 adds to every step
    assert "not counted again" in first["evidence"], first
    for other in advice[1:]:
        assert other["rule"] != "exposed_communication", advice
        assert not (other["rule"] == "host_outside_operators" and other["ranks"] == [1]), advice


# Two ranks late by turns (each sleeps 20 ms before the all-reduce of a
# small tensor in every other step): each rank's exposed communication is
# its wait for the other, which no overlap would hide.
TURNS_JOB = """
import os, sys, time, torch, torch.distributed as dist, trainprof
rank, out = int(os.environ["RANK"]), sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("gloo")
level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
with trainprof.profile(experimental_config=level1,
                       on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}")) as prof:
    t = torch.ones(16)
    for step in range(13):
        with trainprof.record_function("work"):
            time.sleep(0.030 if step % 2 == rank else 0.010)
        dist.all_reduce(t)
        prof.step()
dist.destroy_process_group()
"""


def test_ranks_late_by_turns_are_not_told_to_overlap_their_communication(tmp_path: Path) -> None:
    """Each rank alone sees a third of its step exposed; the job's cluster
    pass knows that was waiting for the other (no straggler: they take
    turns), so `advise` on the job has nothing to say about overlap."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with Gloo is not available")
    script = tmp_path / "turns.py"
    script.write_text(TURNS_JOB)
    out = tmp_path / "out"
    runs = run_two_ranks(script, out)
    assert len(runs) == 2
    assert all("exposed_communication" in rules(run) for run in runs)  # each run alone cannot tell
    job = trainprof.advise(out)
    assert [f["rule"] for f in job] == [], job
