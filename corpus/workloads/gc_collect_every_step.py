# expect: gc_pauses
# A loop that calls gc.collect() after every step "to keep memory down",
# in a process that holds a large index of its samples as Python objects:
# each full collection walks all of them.
import gc

import torch

from _corpus import profiled

torch.manual_seed(0)
index = [{"id": i, "path": f"shard{i % 64}/{i}.bin", "tags": [i % 7, i % 11]} for i in range(300_000)]
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
with profiled() as prof:
    for step in range(30):
        rows = index[step * 64:(step + 1) * 64]
        x = torch.randn(len(rows), 256)
        y = torch.tensor([r["tags"][0] for r in rows])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        gc.collect()
        prof.step()
print(f"loss {loss.item():.3f}")
