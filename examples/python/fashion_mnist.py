"""Fashion-MNIST training on PyTorch 2.x, profiled by trainprof.

A CNN (the C++ demo's: examples/fashion_mnist_net.h) trained from the IDX
files of Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
nothing downloaded), with a DataLoader of worker processes, profiled with a
schedule (two recorded cycles by default, each analysed as it closes), then
the summary of each cycle: where the time went and where the outputs are.

    python examples/python/fashion_mnist.py [--out DIR] [--steps N]
        [--schedule WAIT,WARMUP,ACTIVE,REPEAT[,SKIP_FIRST]] [--workers N]
        [--flight-recorder [--slow-step N]]

With --flight-recorder the training is recorded all the time into memory
(trainprof.flight_recorder) instead of on a schedule, one step is made slow
on purpose (a stall of thirty times the median step, as a synchronous
checkpoint or a storage hiccup would cause: well above anything a busy
machine does to a step, which the recorder may have dumped before it), and
the run the recorder wrote by itself is summarised: nothing else reaches
the disk.

The profile is the torch.profiler idiom with ``trainprof`` in place of
``torch.profiler``. The same script without its profiler lines runs under
``python -m trainprof run`` (steps are then the optimizer's step() calls).
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import trainprof
from trainprof import ProfilerActivity, _ExperimentalConfig, schedule, tensorboard_trace_handler

DATA_DIR = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path, count: Optional[int] = None) -> torch.Tensor:
    """The first ``count`` items (all when None) of an IDX file, gzipped or
    raw: big-endian dimensions, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        n = dims[0] if count is None else min(count, dims[0])
        item = 1
        for d in dims[1:]:
            item *= d
        data = bytearray(f.read(n * item))
    return torch.frombuffer(data, dtype=torch.uint8).reshape(n, *dims[1:])


def find_idx(data_dir: Path, name: str) -> Path:
    """``name`` (e.g. train-images-idx3-ubyte) in ``data_dir``, gzipped or not."""
    for candidate in (data_dir / f"{name}.gz", data_dir / name):
        if candidate.exists():
            return candidate
    raise SystemExit(f"fashion_mnist: {data_dir / name}[.gz] is missing: "
                     "apt-get install dataset-fashion-mnist (scripts/install_deps.sh does)")


class FashionMnist(Dataset):
    """Images (uint8, decoded per sample into normalized float) and labels."""

    def __init__(self, data_dir: Path, split: str, count: Optional[int] = None) -> None:
        self.images = read_idx(find_idx(data_dir, f"{split}-images-idx3-ubyte"), count)
        self.labels = read_idx(find_idx(data_dir, f"{split}-labels-idx1-ubyte"), count).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[i].float().div_(255).sub_(0.2860).div_(0.3530)  # the training set's mean, std
        return image.unsqueeze(0), self.labels[i]


class Net(torch.nn.Module):
    """Two convolutions and two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def parse_schedule(text: str) -> schedule:
    """'W,U,A,R' or 'W,U,A,R,S' -> trainprof.schedule."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in (4, 5):
        raise argparse.ArgumentTypeError(f"--schedule: WAIT,WARMUP,ACTIVE,REPEAT[,SKIP_FIRST], got {text!r}")
    try:
        return schedule(**dict(zip(("wait", "warmup", "active", "repeat", "skip_first"), values)))
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"--schedule: {e}") from None


def evaluate(model: torch.nn.Module, data_dir: Path, count: int) -> float:
    """Accuracy on the first ``count`` test images."""
    test = FashionMnist(data_dir, "t10k", count)
    model.eval()
    with torch.no_grad():
        x = torch.stack([test[i][0] for i in range(len(test))])
        correct = (model(x).argmax(1) == test.labels).sum().item()
    model.train()
    return correct / len(test)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="trainprof_output", help="output directory (emptied first)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (batches of 64)")
    parser.add_argument("--schedule", type=parse_schedule, default=schedule(wait=1, warmup=1, active=3, repeat=2,
                                                                             skip_first=10))
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="directory of the IDX files")
    parser.add_argument("--flight-recorder", action="store_true",
                        help="record all the time into memory, write a run only when a step is slow (one is planted)")
    parser.add_argument("--slow-step", type=int, default=None,
                        help="with --flight-recorder: the step made slow (default: two thirds into --steps)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.workers < 0:
        parser.error("--steps must be >= 1 and --workers >= 0")
    slow_step = args.slow_step if args.slow_step is not None else args.steps * 2 // 3
    if args.flight_recorder and not 20 <= slow_step < args.steps:
        parser.error("--flight-recorder: the slow step must be one of steps 20 to --steps - 1 "
                     "(the recorder waits for 10 steps, the median for a few more)")

    torch.manual_seed(0)
    # The cores the loader workers do not use: on 2 cores with 2 workers, one
    # intra-op thread took 29 ms a step where two took 97 (oversubscribed).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - args.workers))
    train = FashionMnist(args.data, "train")
    loader = DataLoader(train, batch_size=64, shuffle=True, num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        import shutil
        shutil.rmtree(out)
    s = args.schedule
    if args.flight_recorder:
        print(f"training a CNN on Fashion-MNIST ({len(train)} images) for {args.steps} steps (batch 64, "
              f"{args.workers} loader workers); flight recorder on, step {slow_step} made slow on purpose")
        prof = trainprof.flight_recorder(out, activities=[ProfilerActivity.CPU], record_shapes=True)
    else:
        print(f"training a CNN on Fashion-MNIST ({len(train)} images) for {args.steps} steps (batch 64, "
              f"{args.workers} loader workers); profiling: {s}")
        prof = trainprof.profile(activities=[ProfilerActivity.CPU], schedule=s,
                                 on_trace_ready=tensorboard_trace_handler(out), record_shapes=True,
                                 profile_memory=True, with_flops=True, data_process=True,
                                 # the host's CPU and memory every 50 ms: is the machine the bottleneck?
                                 experimental_config=_ExperimentalConfig(host_sys=["cpu", "mem"]))

    start = time.monotonic()
    step, loss = 0, torch.tensor(0.0)
    step_times: list[float] = []
    with prof:
        while step < args.steps:
            step_start = time.monotonic()
            for x, y in loader:
                with trainprof.record_function("forward"):
                    loss = F.cross_entropy(model(x), y)
                with trainprof.record_function("backward"):
                    optimizer.zero_grad()
                    loss.backward()
                optimizer.step()
                if args.flight_recorder and step == slow_step:
                    with trainprof.record_function("planted_stall"):  # a synchronous checkpoint, a storage hiccup
                        time.sleep(30 * sorted(step_times)[len(step_times) // 2])
                prof.step()
                now = time.monotonic()
                step_times.append(now - step_start)
                step_start = now
                step += 1
                if step % 100 == 0 or step == args.steps:
                    print(f"  step {step}: loss {loss.item():.3f}")
                if step == args.steps:
                    break
        if args.flight_recorder:
            prof.wait_for_dumps()
    trained = time.monotonic() - start
    print(f"trained in {trained:.1f} s; test accuracy {evaluate(model, args.data, 2000):.1%} "
          "(first 2000 test images)\n")
    if args.flight_recorder:
        return report_flight_recorder(prof, out)

    runs = sorted(p for p in Path(out).glob("*_trainprof")) if os.path.isdir(out) else []
    if not runs:
        print("no cycle was recorded: more --steps, or a shorter --schedule")
        return 1
    print(trainprof.summary(out), end="")
    print(f"{len(runs)} recorded cycle(s) under {out}\n"
          f"  timeline: {runs[0]}/PROFILER_OUTPUT/trace_view.pftrace (https://ui.perfetto.dev; "
          "trace_view.json for chrome://tracing, TensorBoard and HTA)\n"
          f"  one page: python -m trainprof report {runs[0]}\n"
          f"  the same report again: trainprof summary {out}")
    print_top_advice(out)
    return 0


def print_top_advice(out: str) -> None:
    """The advisor's most valuable finding over the cycles (docs/ADVICE.md)."""
    findings = trainprof.advise(out)
    if not findings:
        print("\nadvice: none of the advisor's rules fired: nothing stands out to change")
        return
    top = findings[0]
    worth = ""
    if top["saving_ms"] >= 0 and top["step_ms"] > 0:
        worth = (f" (worth {top['saving_ms']:.1f} ms of the {top['step_ms']:.1f} ms median step, "
                 f"{top['saving_basis']})")
    print(f"\nadvice, the top of {len(findings)}: {top['title']}{worth}\n"
          f"  evidence: {top['evidence']}\n  change: {top['change']}\n"
          f"  all of them: python -m trainprof advise {out}")


def report_flight_recorder(recorder: trainprof.flight_recorder, out: str) -> int:
    """What the flight recorder wrote by itself, summarised."""
    dumps = [d for d in recorder.dumps() if d.run_dir]
    if not dumps:
        print(f"the flight recorder wrote nothing under {out}: no step was slow enough")
        return 1
    for d in dumps:
        print(f"the flight recorder wrote {d.run_dir} by itself ({d.trigger}: {d.reason})")
    print()
    print(trainprof.summary(dumps[-1].run_dir), end="")
    print(f"{len(dumps)} dump(s) under {out}; nothing else was written while the steps were normal\n"
          f"  timeline: {dumps[-1].run_dir}/PROFILER_OUTPUT/trace_view.pftrace (https://ui.perfetto.dev)\n"
          f"  one page: python -m trainprof report {dumps[-1].run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
