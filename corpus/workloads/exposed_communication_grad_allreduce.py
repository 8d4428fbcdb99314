# expect: exposed_communication
# ranks: 2
# Data parallel by hand, as before DDP: after backward, each gradient is
# all-reduced one by one, and nothing overlaps the communication.
import torch
import torch.distributed as dist

from _corpus import profiled

dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(dist.get_rank())
with profiled() as prof:
    for step in range(20):
        x, y = torch.randn(16, 1024, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
dist.destroy_process_group()
