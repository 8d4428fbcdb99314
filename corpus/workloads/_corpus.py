"""What the corpus's workloads share, kept out of them so that each reads as
the training script a user would write.

A workload runs in one of two modes (``CORPUS_MODE``):

- ``zero-code``: the script is run as ``python -m trainprof run SCRIPT``
  and never imports trainprof; steps are the optimizer's step() calls.
- ``profile``: the loop runs inside ``trainprof.profile(...)`` and calls
  ``prof.step()`` after each step, as a torch.profiler user would.

``profiled()`` hides the difference: the loop always calls ``prof.step()``.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
from pathlib import Path
from typing import Iterator

import torch

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


class _NotProfiling:
    """Zero-code mode: trainprof run counts the optimizer's steps itself."""

    def step(self) -> None:
        pass


@contextlib.contextmanager
def profiled() -> Iterator[object]:
    """The profile the loop runs in: trainprof.profile(...) writing under
    CORPUS_OUT in profile mode, else a stand-in whose step() does nothing."""
    if os.environ.get("CORPUS_MODE") != "profile":
        yield _NotProfiling()
        return
    import trainprof

    rank = os.environ.get("RANK")
    handler = trainprof.tensorboard_trace_handler(os.environ.get("CORPUS_OUT", "data"),
                                                  worker_name=f"rank{rank}" if rank is not None else None)
    # A distributed user asks for communication (Level1), as torch.profiler's
    # users record shapes to see their collectives.
    config = (trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
              if rank is not None else None)
    with trainprof.profile(on_trace_ready=handler, data_process=True, experimental_config=config) as prof:
        yield prof


def _read_idx(path: Path, count: int) -> torch.Tensor:
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = [struct.unpack(">I", f.read(4))[0] for _ in range(magic & 0xFF)]
        dims[0] = min(dims[0], count)
        size = 1
        for d in dims:
            size *= d
        return torch.frombuffer(bytearray(f.read(size)), dtype=torch.uint8).reshape(dims)


def fashion_mnist(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` Fashion-MNIST training images (N, 1, 28, 28, in [0, 1]) and
    labels; random ones of the same shapes where Debian's
    dataset-fashion-mnist is not installed."""
    images = FASHION_MNIST / "train-images-idx3-ubyte.gz"
    if images.exists():
        x = _read_idx(images, count).float().div(255).unsqueeze(1)
        y = _read_idx(FASHION_MNIST / "train-labels-idx1-ubyte.gz", count).long()
        return x, y
    gen = torch.Generator().manual_seed(0)
    return torch.rand(count, 1, 28, 28, generator=gen), torch.randint(0, 10, (count,), generator=gen)
