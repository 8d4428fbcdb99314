# expect: exposed_communication
# ranks: 2
# Local SGD with model averaging: each rank steps on its own, then the
# flattened weights of a wide model are averaged across ranks every step.
import torch
import torch.distributed as dist

from _corpus import profiled

dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(20000, 128), torch.nn.Flatten(), torch.nn.Linear(8 * 128, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(dist.get_rank())
with profiled() as prof:
    for step in range(20):
        ids, y = torch.randint(0, 20000, (32, 8), generator=gen), torch.randint(0, 2, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(ids), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            flat = torch.nn.utils.parameters_to_vector(model.parameters())
            dist.all_reduce(flat)
            torch.nn.utils.vector_to_parameters(flat / world, model.parameters())
        prof.step()
print(f"loss {loss.item():.3f}")
dist.destroy_process_group()
