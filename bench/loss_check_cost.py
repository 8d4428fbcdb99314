#!/usr/bin/env python3
"""What the flight recorder's check of the numbers costs a training step, side by side.

    .venv/bin/python bench/loss_check_cost.py [--rounds 11] [--calls 20000] [--steps 200] [--json OUT]

Three figures in one run, on this machine:

- the demo's step (examples/python/fashion_mnist.py's CNN, one batch of 64
  trained over and over, no recorder): its median wall time;
- the loss check: ``backward()`` on a one-operator graph ``--calls`` times
  under a flight recorder with ``check_loss=False`` and with
  ``check_loss=True``, alternating, the order swapped every round; the
  difference per call is what the check adds to each ``backward()`` (the
  graph is tiny so that the check is not lost in the backward's own noise;
  the check does the same work whatever the graph);
- the gradients' check: the optimizer-step hook of ``check_gradients=True``
  (the norm of every gradient) on the demo model's gradients, against the
  same call of an empty hook.

Each check's cost is reported per step and as a share of the demo's step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "python"))
import fashion_mnist  # noqa: E402  (the demo's model and data)

import trainprof  # noqa: E402
from trainprof import _numbers  # noqa: E402


def demo_step_s(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                steps: int) -> float:
    times = []
    for i in range(steps + 5):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def backward_calls_s(out: str, check: bool, calls: int) -> float:
    """Seconds per backward() of a one-operator graph under a recorder."""
    p = torch.ones((), requires_grad=True)
    with trainprof.flight_recorder(out, ring_mb=8, slow_step_factor=0, hang_timeout_s=None, dump_signal=None,
                                   analyse=False, check_loss=check, python_stack_sampling_ms=0):
        t0 = time.perf_counter()
        for _ in range(calls):
            (p * 2.0).backward()
        return (time.perf_counter() - t0) / calls


def gradient_hook_s(model: torch.nn.Module, optimizer: torch.optim.Optimizer, calls: int, check: bool) -> float:
    """Seconds per call of the gradients' hook (or of an empty one)."""
    class Recorder:  # the C++ recorder's two calls the hook makes, doing nothing
        def step_num(self) -> int:
            return 0

        def gradient_norm(self, value: float, step: int) -> None:
            pass

    watch = _numbers.NumberWatch(Recorder(), gradients=True)
    hook = watch._before_optimizer_step if check else (lambda optimizer, args, kwargs: None)
    t0 = time.perf_counter()
    for _ in range(calls):
        hook(optimizer, (), {})
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = fashion_mnist.Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    step_s = demo_step_s(model, optimizer, x, y, args.steps)
    loss_added, grad_added = [], []
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            per_call = {check: backward_calls_s(out, check, args.calls) for check in order}
            loss_added.append(per_call[True] - per_call[False])
            per_hook = {check: gradient_hook_s(model, optimizer, args.calls // 20, check) for check in order}
            grad_added.append(per_hook[True] - per_hook[False])
    loss_us, grad_us = statistics.median(loss_added) * 1e6, statistics.median(grad_added) * 1e6
    result = {
        "demo_step_ms": step_s * 1e3,
        "loss_check_us_per_step": loss_us,
        "loss_check_share_of_step_percent": 100 * loss_us * 1e-6 / step_s,
        "loss_check_us_range": [min(loss_added) * 1e6, max(loss_added) * 1e6],
        "gradient_check_us_per_step": grad_us,
        "gradient_check_share_of_step_percent": 100 * grad_us * 1e-6 / step_s,
        "gradient_check_us_range": [min(grad_added) * 1e6, max(grad_added) * 1e6],
        "parameters": sum(p.numel() for p in model.parameters()),
        "rounds": args.rounds,
    }
    print(f"demo step: {result['demo_step_ms']:.2f} ms (median of {args.steps}, one thread)")
    print(f"loss check: +{loss_us:.2f} us a backward() (rounds {result['loss_check_us_range'][0]:.2f} to "
          f"{result['loss_check_us_range'][1]:.2f}), {result['loss_check_share_of_step_percent']:.4f} % of the step")
    print(f"gradients' check: +{grad_us:.1f} us an optimizer step ({result['parameters']} parameters; rounds "
          f"{result['gradient_check_us_range'][0]:.1f} to {result['gradient_check_us_range'][1]:.1f}), "
          f"{result['gradient_check_share_of_step_percent']:.3f} % of the step")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
