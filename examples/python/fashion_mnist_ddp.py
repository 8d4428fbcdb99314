"""Data-parallel Fashion-MNIST on torch.distributed (Gloo), profiled by trainprof.

Several ranks train the CNN of fashion_mnist.py on shards of the training
set (DistributedSampler) with DistributedDataParallel over Gloo on the CPU;
one rank can be made slow on purpose. Each rank records the same steps
(a schedule) at Level1, where trainprof records every torch.distributed call
as communication; then rank 0 runs the cluster analysis, which matches the
collectives across ranks and names the rank the others waited for, and why.

    python examples/python/fashion_mnist_ddp.py [--ranks 4] [--steps 40]
        [--slow-rank R [--slow-ms 30] [--slow-data]] [--out DIR]

It starts its ranks itself (torch.multiprocessing); under torchrun (RANK,
WORLD_SIZE, MASTER_ADDR set) it is one of them instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

import trainprof
from trainprof import ProfilerActivity, ProfilerLevel, _ExperimentalConfig, schedule, tensorboard_trace_handler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DATA_DIR, FashionMnist, Net  # noqa: E402  (the single-process demo's parts)


BATCH = 32


def busy(ms: float) -> None:
    """Computes for ``ms`` milliseconds (a slow rank's extra work)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


class SlowShard(torch.utils.data.Dataset):
    """A dataset whose every item takes ``delay_s`` longer (a slow rank's data loading)."""

    def __init__(self, data: torch.utils.data.Dataset, delay_s: float) -> None:
        self.data, self.delay_s = data, delay_s

    def __len__(self) -> int:
        return len(self.data)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        return self.data[i]


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    """One rank: DDP training under the profiler."""
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the ranks share the machine's cores
    data: torch.utils.data.Dataset = FashionMnist(args.data, "train", args.images)
    slow = rank == args.slow_rank
    if slow and args.slow_data:
        data = SlowShard(data, args.slow_ms / 1000 / BATCH)  # the batch comes late
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, drop_last=True)
    model = DistributedDataParallel(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # Level1: torch.distributed calls (with their tensors and process group)
    # become communication; every rank records the same steps.
    config = _ExperimentalConfig(profiler_level=ProfilerLevel.Level1)
    sched = schedule(wait=1, warmup=1, active=args.active, repeat=1, skip_first=args.skip_first)
    step, epoch, loss = 0, 0, torch.tensor(0.0)
    with trainprof.profile(activities=[ProfilerActivity.CPU], schedule=sched, experimental_config=config,
                           data_process=True,  # the loop's wait for each batch
                           on_trace_ready=tensorboard_trace_handler(args.out, worker_name=f"rank{rank}")) as prof:
        while step < args.steps:
            sampler.set_epoch(epoch)
            epoch += 1
            for x, y in loader:
                with trainprof.record_function("forward"):
                    loss = F.cross_entropy(model(x), y)
                    if slow and not args.slow_data:
                        with trainprof.record_function("slow_rank_extra"):
                            busy(args.slow_ms)
                with trainprof.record_function("backward"):
                    optimizer.zero_grad()
                    loss.backward()  # DDP all-reduces the gradient buckets meanwhile
                optimizer.step()
                prof.step()
                step += 1
                if step == args.steps:
                    break
    if rank == 0:
        print(f"rank 0: {step} steps, last loss {loss.item():.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def spawned(rank: int, world: int, args: argparse.Namespace) -> None:
    train(rank, world, args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="ranks to start (not under torchrun)")
    parser.add_argument("--steps", type=int, default=40, help="training steps (batches of 32 per rank)")
    parser.add_argument("--skip-first", type=int, default=10, help="steps before the schedule's cycle")
    parser.add_argument("--active", type=int, default=10, help="steps recorded")
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank is slow every step")
    parser.add_argument("--slow-ms", type=float, default=30, help="how much slower, in ms")
    parser.add_argument("--slow-data", action="store_true", help="slow in data loading instead of computing")
    parser.add_argument("--images", type=int, default=8192, help="training images read (all ranks' shards)")
    parser.add_argument("--out", default="trainprof_ddp_output", help="output directory (emptied first)")
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="directory of the IDX files")
    args = parser.parse_args(argv)
    if args.ranks < 1 or args.steps < 1 or args.slow_ms < 0:
        parser.error("--ranks and --steps must be >= 1, --slow-ms >= 0")
    args.out = os.path.abspath(args.out)

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun started this rank
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    what = f"; rank {args.slow_rank} slower by {args.slow_ms:g} ms a step" if args.slow_rank >= 0 else ""
    if args.slow_rank >= 0:
        what += " in data loading" if args.slow_data else " in computing"
    print(f"{args.ranks} ranks train a CNN on Fashion-MNIST with DDP over Gloo for {args.steps} steps{what}",
          flush=True)
    start = time.monotonic()
    torch.multiprocessing.spawn(spawned, args=(args.ranks, args), nprocs=args.ranks)
    print(f"trained in {time.monotonic() - start:.1f} s\n", flush=True)
    # The cluster pass: every rank's run, matched collective by collective.
    return subprocess.call([sys.executable, "-m", "trainprof", "cluster", args.out])


if __name__ == "__main__":
    sys.exit(main())
