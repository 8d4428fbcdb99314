# expect: straggler
# ranks: 3
# Three ranks with DDP where the sampler is uneven: rank 2 gets batches four
# times as large as the others, so it computes longer every step and the
# others wait for it in the gradient all-reduce.
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from _corpus import profiled

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch = 512 if rank == 2 else 128
gen = torch.Generator().manual_seed(rank)
with profiled() as prof:
    for step in range(20):
        x, y = torch.randn(batch, 256, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"rank {rank} loss {loss.item():.3f}")
dist.destroy_process_group()
