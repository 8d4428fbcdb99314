"""What the Python stack sampler costs a training step: the same loop under
trainprof.profile with python_stack_sampling_ms=0 (off) and 10 (the
default), taking turns in one process, on two models: the demo's CNN on
Fashion-MNIST-sized batches and a small transformer.

    .venv/bin/python bench/python_sampling_cost.py [ROUNDS] [INTERVAL_MS]

Prints each model's median step time with sampling off and on, and their
ratio. docs/PERFORMANCE.md carries the figures.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import torch

import trainprof


def cnn() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))
    return model, torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))


def transformer() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    body = torch.nn.TransformerEncoder(layer, num_layers=2)
    model = torch.nn.Sequential(body, torch.nn.Flatten(), torch.nn.Linear(32 * 128, 10))
    return model, torch.randn(16, 32, 128), torch.randint(0, 10, (16,))


def steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, sampling_ms: int, n: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    config = trainprof._ExperimentalConfig(python_stack_sampling_ms=sampling_ms)
    times = []
    with tempfile.TemporaryDirectory() as out:
        with trainprof.profile(experimental_config=config, on_trace_ready=trainprof.tensorboard_trace_handler(
                out, analyse_flag=False)) as prof:
            for _ in range(n):
                start = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                times.append(time.perf_counter() - start)
                prof.step()
    return times[2:]  # the first steps warm up


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    interval = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {rounds} rounds of each, taking turns")
    for name, make, n in (("CNN (batch 64, 28x28)", cnn, 60), ("transformer (2 layers, d 128)", transformer, 60)):
        model, x, y = make()
        off: list[float] = []
        on: list[float] = []
        for _ in range(rounds):
            off += steps(model, x, y, 0, n)
            on += steps(model, x, y, interval, n)
        a, b = statistics.median(off) * 1e3, statistics.median(on) * 1e3
        print(f"{name:32} off {a:8.3f} ms  on ({interval} ms) {b:8.3f} ms  on/off {b / a:6.3f}")


if __name__ == "__main__":
    main()
