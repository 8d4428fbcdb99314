"""``data_process`` with torch.utils.data.DataLoader: fetch, collate and wait
stages in dataset.csv and on the timeline's Dataset tracks, with worker
processes (fork and spawn) as well as in the training process."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
from conftest import run_dirs, torch, trace_events
from torch.utils.data import DataLoader, Dataset

import trainprof
from trainprof import tensorboard_trace_handler

SAMPLES, BATCH = 64, 8
BATCHES = SAMPLES // BATCH


class Squares(Dataset):
    """Samples made on demand: a real __getitem__ in whichever process fetches."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((4, 4), float(i)).square(), i % 10


def stages(run_dir: Path) -> dict[tuple[str, str], dict]:
    """dataset.csv by (Operation, Stage)."""
    with open(run_dir / "PROFILER_OUTPUT" / "dataset.csv", newline="") as f:
        return {(row["Operation"], row["Stage"]): row for row in csv.DictReader(f)}


def profile_one_epoch(out: Path, **loader_options: object) -> tuple[Path, int]:
    """One epoch of a model fed by the loader, profiled with data_process;
    returns the analysed run and the samples seen."""
    loader = DataLoader(Squares(), batch_size=BATCH, **loader_options)
    model = torch.nn.Linear(16, 10)
    seen = 0
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(out), data_process=True):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x.flatten(1)), y).backward()
            seen += len(y)
    runs = run_dirs(out)
    assert len(runs) == 1
    return runs[0], seen


@pytest.mark.parametrize("workers", [0, 2])
def test_each_batch_has_its_fetch_collate_and_wait_stage(tmp_path: Path, workers: int) -> None:
    run, seen = profile_one_epoch(tmp_path / "prof", num_workers=workers)
    assert seen == SAMPLES
    rows = stages(run)
    assert int(rows[("Squares", "dataset")]["Occurrences"]) == BATCHES
    assert int(rows[("default_collate", "collate")]["Occurrences"]) == BATCHES
    # one wait per batch, and the one that ends the epoch
    assert int(rows[("DataLoader", "wait")]["Occurrences"]) == BATCHES + 1
    assert {row["Custom Info"] for row in rows.values()} == {f"workers={workers}"}
    assert float(rows[("Squares", "dataset")]["Avg. time (us)"]) > 0

    dataset_events = [e for e in trace_events(run) if e.get("cat") == "dataset"]
    fetches = [e for e in dataset_events if e["args"]["Stage"] == "dataset"]
    waits = [e for e in dataset_events if e["args"]["Stage"] == "wait"]
    assert len(fetches) == BATCHES and len(waits) == BATCHES + 1
    if workers == 0:  # the loop fetches: its waits enclose the fetches, on its own thread
        assert {e["tid"] for e in fetches} == {e["tid"] for e in waits}
    else:  # fetched by the workers: a track per worker, none the loop's
        assert len({e["tid"] for e in fetches}) == workers
        assert not {e["tid"] for e in fetches} & {e["tid"] for e in waits}
        wait = waits[0]
        assert wait["ts"] <= min(e["ts"] for e in fetches) + 1e6  # one clock: worker times in the run's span


# torch 2.x pins only where an accelerator exists (DataLoader checks
# torch.accelerator.is_available()); on a CPU-only machine pin_memory=True
# is a no-op with a warning, so there is no stage to see.
@pytest.mark.device
@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_stage(tmp_path: Path, workers: int) -> None:
    run, seen = profile_one_epoch(tmp_path / "prof", num_workers=workers, pin_memory=True)
    assert seen == SAMPLES
    rows = stages(run)
    assert int(rows[("pin_memory", "pin_memory")]["Occurrences"]) == BATCHES
    dataset_events = [e for e in trace_events(run) if e.get("cat") == "dataset"]
    pins = [e for e in dataset_events if e["args"]["Stage"] == "pin_memory"]
    waits = [e for e in dataset_events if e["args"]["Stage"] == "wait"]
    assert len(pins) == BATCHES
    if workers > 0:  # pinned by the loader's pin-memory thread, not the loop's
        assert len({e["tid"] for e in pins}) == 1
        assert not {e["tid"] for e in pins} & {e["tid"] for e in waits}


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_spawned_workers_report_their_stages(tmp_path: Path, start_method: str) -> None:
    """spawn and forkserver (Python 3.14's default) start workers without
    the patches: the worker_init_fn wrapper brings them."""
    run, seen = profile_one_epoch(tmp_path / "prof", num_workers=2, multiprocessing_context=start_method,
                                  worker_init_fn=_remember_worker)
    assert seen == SAMPLES
    assert int(stages(run)[("Squares", "dataset")]["Occurrences"]) == BATCHES


def _remember_worker(worker_id: int) -> None:
    """A user's worker_init_fn: still called under trainprof's."""
    assert torch.utils.data.get_worker_info().id == worker_id


class Countdown(torch.utils.data.IterableDataset):
    """An iterable dataset: samples come from next(), not __getitem__."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(torch.arange(SAMPLES, dtype=torch.float32).split(1))


def test_iterable_dataset_stages(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(out), data_process=True):
        batches = list(DataLoader(Countdown(), batch_size=BATCH))
    assert len(batches) == BATCHES and batches[0].shape == (BATCH, 1)  # collated as without trainprof
    rows = stages(run_dirs(out)[0])
    assert int(rows[("Countdown", "dataset")]["Occurrences"]) == BATCHES
    assert int(rows[("default_collate", "collate")]["Occurrences"]) == BATCHES


def test_no_stage_without_data_process(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(out)):
        for _ in DataLoader(Squares(), batch_size=BATCH, num_workers=2):
            pass
    assert not (run_dirs(out)[0] / "PROFILER_OUTPUT" / "dataset.csv").exists()


class SlowSamples(Dataset):
    """A loader-starved input: 3 ms to read each sample, in the training
    process (no workers): 24 ms a batch, against well under 1 ms of training
    (a margin no load on the machine closes)."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.003)
        return torch.full((16,), float(i)), i % 10


def step_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return list(csv.DictReader(f))


def profile_steps(out: Path, loader: DataLoader, data_process: bool, passes: int) -> list[dict]:
    """Trains one step per batch (`passes` forward and backward passes of a
    small model), one profiler step each; the rows of the full steps."""
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(8)])
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(out), data_process=data_process) as prof:
        for x, _ in loader:
            for _ in range(passes):
                model(x).sum().backward()
            prof.step()
    rows = step_rows(run_dirs(out)[0])
    # Steps 1..7: each fetched its batch and trained on it (step 0, the
    # start-up, and the tail open at stop() are not steps).
    assert [int(r["Step"]) for r in rows] == list(range(1, BATCHES))
    return rows


@pytest.mark.parametrize("data_process", [False, True])
def test_a_loader_starved_loop_shows_its_steps_as_data_wait_not_computing(tmp_path: Path,
                                                                          data_process: bool) -> None:
    # torch's own DataLoader range (and, with data_process, our wait stage) marks the wait.
    rows = profile_steps(tmp_path / "prof", DataLoader(SlowSamples(), batch_size=BATCH), data_process, passes=1)
    for row in rows:
        wait, computing = float(row["Data Wait"]), float(row["Computing"])
        assert wait >= BATCH * 3000.0, row  # µs: at least its 8 samples' 3 ms sleeps
        assert computing < wait, row
    summary = trainprof.summary(str(run_dirs(tmp_path / "prof")[0]))
    assert "data wait ms" in summary, summary


def test_a_loop_fed_from_memory_shows_its_steps_as_computing(tmp_path: Path) -> None:
    memory = torch.utils.data.TensorDataset(torch.randn(SAMPLES, 16), torch.zeros(SAMPLES, dtype=torch.long))
    rows = profile_steps(tmp_path / "prof", DataLoader(memory, batch_size=BATCH), data_process=False, passes=20)
    for row in rows:
        wait, computing = float(row["Data Wait"]), float(row["Computing"])
        # The fetch is there, and below the training: 20 passes against
        # indexing 8 rows (about 50 times less on an idle machine, 3.5 times
        # less with a build and the sanitizer tests sharing its 2 cores).
        assert 0 < wait < computing, row
