"""A per-parameter optimizer step against a multi-tensor one (foreach=True),
on the CPU, one thread: what the advisor's unfused_optimizer may promise.

    .venv/bin/python bench/optimizer_foreach.py

Prints, per model and optimizer, the median step of each and the share a
multi-tensor step saves. Small tensors (many layers of 32x32): the cost is
per tensor, and foreach saves about a third. Large tensors (a wide MLP): the
arithmetic dominates, and foreach may be faster or slower depending on the
optimizer's temporaries. docs/ADVICE.md carries the figures.
"""

from __future__ import annotations

import statistics
import time

import torch


def mlp(layers: int, width: int) -> torch.nn.Module:
    parts: list[torch.nn.Module] = []
    for _ in range(layers):
        parts += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*parts)


def step_ms(model: torch.nn.Module, make: type, foreach: bool, repeats: int, **options: object) -> float:
    optimizer = make(model.parameters(), lr=1e-3, foreach=foreach, **options)
    x = torch.randn(64, model[0].in_features)
    model(x).square().mean().backward()  # gradients, then state, once
    optimizer.step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = {"24 layers of 32x32": (mlp(24, 32), 200), "100 layers of 32x32": (mlp(100, 32), 100),
              "3 layers of 2048x2048": (mlp(3, 2048), 20)}
    optimizers = [(torch.optim.SGD, {"momentum": 0.9}), (torch.optim.Adam, {}), (torch.optim.AdamW, {}),
                  (torch.optim.RMSprop, {}), (torch.optim.Adagrad, {})]
    print(f"torch {torch.__version__}, 1 thread")
    print(f"{'model':24} {'optimizer':10} {'per-parameter ms':>17} {'foreach ms':>11} {'saved':>7}")
    for name, (model, repeats) in models.items():
        for make, options in optimizers:
            loop = step_ms(model, make, False, repeats, **options)
            multi = step_ms(model, make, True, repeats, **options)
            print(f"{name:24} {make.__name__:10} {loop:17.3f} {multi:11.3f} {100 * (loop - multi) / loop:6.0f}%")


if __name__ == "__main__":
    main()
