"""What ``data_process`` adds to a torch DataLoader epoch, per batch.

    .venv/bin/python bench/dataloader_stages.py [--batches N]

A dataset of trivial samples (the worst case: the loader does almost nothing
else), batches of 8, no workers; best of 5 epochs each: bare, profiled
without and with data_process (operators not recorded: LevelNone, so only
the stages differ), and bare again once the DataLoader is instrumented.
Numbers in docs/ARCHITECTURE.md (DataLoader stages).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from torch.utils.data import DataLoader, Dataset

import trainprof
from trainprof import ProfilerLevel, _ExperimentalConfig


class Tiny(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def epoch_us_per_batch(batches: int) -> float:
    loader = DataLoader(Tiny(8 * batches), batch_size=8, num_workers=0)
    start = time.perf_counter()
    n = sum(1 for _ in loader)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4000)
    batches = parser.parse_args().batches
    best = lambda: min(epoch_us_per_batch(batches) for _ in range(5))  # noqa: E731
    print(f"bare                         {best():6.1f} us/batch")
    with tempfile.TemporaryDirectory() as out:
        for data_process in (False, True):
            with trainprof.profile(data_process=data_process,
                                   experimental_config=_ExperimentalConfig(profiler_level=ProfilerLevel.LevelNone),
                                   on_trace_ready=trainprof.tensorboard_trace_handler(out, analyse_flag=False)):
                print(f"profiled, data_process={data_process!s:5} {best():6.1f} us/batch")
    print(f"bare, instrumented           {best():6.1f} us/batch")


if __name__ == "__main__":
    main()
