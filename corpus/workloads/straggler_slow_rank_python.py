# expect: straggler
# ranks: 2
# DDP on two ranks; rank 1 re-ranks its batch's samples with a Python
# function (25 ms a step) before its forward, so rank 0 waits for it in
# every gradient all-reduce.
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from _corpus import fashion_mnist, profiled


def rerank_samples(scores):
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    end = time.perf_counter() + 0.025
    while time.perf_counter() < end:
        order = order[1:] + order[:1]
    return order


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 13 * 13, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
images, labels = fashion_mnist(64 * 40)
with profiled() as prof:
    for step, (x, y) in enumerate(zip(images[rank::2].split(32), labels[rank::2].split(32))):
        if rank == 1:
            rerank_samples(x.mean((1, 2, 3)).tolist())
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"rank {rank} loss {loss.item():.3f}")
dist.destroy_process_group()
