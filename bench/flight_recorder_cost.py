#!/usr/bin/env python3
"""What the always-on flight recorder costs the Python demo's training, A/B in one process.

    .venv/bin/python bench/flight_recorder_cost.py [--rounds 10] [--steps 40] [--workers 2]
        [--sample-operators N] [--json OUT]

The demo's CNN, data and DataLoader (examples/python/fashion_mnist.py), the
same training loop, in blocks of ``--steps`` steps: off (no recorder), then
on (``trainprof.flight_recorder`` with its defaults: Level0 operators, the
slow-step trigger, the hang watchdog; ``analyse=False`` so that a dump, if
one fired, would not analyse on the other core), alternating, the order
swapped every round so that the machine's drift hits both alike. The first
5 steps of a block are not timed (the recorder's start, the loader's
restart). Per block: the median step's wall time and the training thread's
CPU time per step; "added" is on / off - 1 within a round, then the median
over rounds (and its range). With ``--sample-operators N``, a third block
per round records with ``sample_operators=N`` ("sampled"), in the rotation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "python"))
import fashion_mnist  # noqa: E402  (the demo's model and data)

import trainprof  # noqa: E402

WARMUP_STEPS = 5


def run_block(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches, steps: int,
              recorder: trainprof.flight_recorder | None) -> tuple[float, float]:
    """``steps`` timed steps: (median wall seconds, mean thread CPU seconds) per step."""
    wall, cpu = [], []
    for i in range(WARMUP_STEPS + steps):
        x, y = next(batches)
        t0, c0 = time.perf_counter(), time.thread_time()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if recorder is not None:
            recorder.step()
        if i >= WARMUP_STEPS:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
    return statistics.median(wall), statistics.fmean(cpu)


def endless(loader: DataLoader):
    while True:
        yield from loader


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fixed-batch", action="store_true",
                        help="train on one batch over and over: the steps' work is the same, only the machine varies")
    parser.add_argument("--sample-operators", type=int, default=1,
                        help="also measure the recorder sampling about 1 operator call in N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - args.workers))
    train = fashion_mnist.FashionMnist(fashion_mnist.DATA_DIR, "train")
    loader = DataLoader(train, batch_size=64, shuffle=True, num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)
    batches = endless(loader)
    if args.fixed_batch:
        batch = next(batches)
        batches = iter(lambda: batch, None)
    model = fashion_mnist.Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = tempfile.mkdtemp(prefix="trainprof_flight_cost_")
    run_block(model, optimizer, batches, 20, None)  # the loader's workers and the allocator settle

    configs = ["off", "on"] + (["sampled"] if args.sample_operators > 1 else [])
    wall_added, cpu_added, sampled_wall, sampled_cpu, rows = [], [], [], [], []
    for r in range(args.rounds):
        result = {}
        for config in configs[r % len(configs):] + configs[:r % len(configs)]:
            recorder = None
            if config != "off":
                recorder = trainprof.flight_recorder(
                    out, analyse=False, sample_operators=args.sample_operators if config == "sampled" else 1)
            result[config] = run_block(model, optimizer, batches, args.steps, recorder)
            if recorder is not None:
                result["dumps"] = result.get("dumps", 0) + len(recorder.dumps())
                recorder.stop()
        wall_added.append(result["on"][0] / result["off"][0] - 1)
        cpu_added.append(result["on"][1] / result["off"][1] - 1)
        sampled = ""
        if "sampled" in result:
            sampled_wall.append(result["sampled"][0] / result["off"][0] - 1)
            sampled_cpu.append(result["sampled"][1] / result["off"][1] - 1)
            sampled = f"; sampled {result['sampled'][0] * 1e3:.2f} ms ({sampled_wall[-1]:+.2%})"
        rows.append(result)
        print(f"round {r}: step off {result['off'][0] * 1e3:.2f} ms, on {result['on'][0] * 1e3:.2f} ms "
              f"({wall_added[-1]:+.2%}){sampled}; training thread CPU off {result['off'][1] * 1e3:.2f} ms, "
              f"on {result['on'][1] * 1e3:.2f} ms ({cpu_added[-1]:+.2%}); dumps {result.get('dumps', 0)}",
              flush=True)
    summary = {
        "wall_added_median": statistics.median(wall_added), "wall_added_min": min(wall_added),
        "wall_added_max": max(wall_added), "cpu_added_median": statistics.median(cpu_added),
        "cpu_added_min": min(cpu_added), "cpu_added_max": max(cpu_added),
        "step_ms_off_median": statistics.median(r["off"][0] for r in rows) * 1e3,
        "rounds": args.rounds, "steps": args.steps, "workers": args.workers, "fixed_batch": args.fixed_batch,
    }
    if sampled_wall:
        summary.update({"sample_operators": args.sample_operators,
                        "sampled_wall_added_median": statistics.median(sampled_wall),
                        "sampled_wall_added_min": min(sampled_wall), "sampled_wall_added_max": max(sampled_wall),
                        "sampled_cpu_added_median": statistics.median(sampled_cpu)})
    print(f"added to the step (wall, median over {args.rounds} rounds): {summary['wall_added_median']:+.2%} "
          f"(rounds {summary['wall_added_min']:+.2%} to {summary['wall_added_max']:+.2%}); "
          f"training thread CPU: {summary['cpu_added_median']:+.2%} "
          f"({summary['cpu_added_min']:+.2%} to {summary['cpu_added_max']:+.2%}); "
          f"step {summary['step_ms_off_median']:.2f} ms without the recorder")
    if sampled_wall:
        print(f"sampling 1 operator call in {args.sample_operators}: {summary['sampled_wall_added_median']:+.2%} "
              f"(rounds {summary['sampled_wall_added_min']:+.2%} to {summary['sampled_wall_added_max']:+.2%}); "
              f"training thread CPU: {summary['sampled_cpu_added_median']:+.2%}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
