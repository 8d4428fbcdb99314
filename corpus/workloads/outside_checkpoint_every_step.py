# expect: host_outside_operators
# ci: fast
# The loop writes a checkpoint (model and optimizer state) to disk after
# every step, and syncs it, instead of every few hundred steps.
import os
import tempfile

import torch

from _corpus import profiled


def save_checkpoint(path, model, optimizer, step):
    with open(path, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, f)
        f.flush()
        os.fsync(f.fileno())


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
path = os.path.join(tempfile.mkdtemp(), "last.pt")
with profiled() as prof:
    for step in range(30):
        x = torch.randn(64, 512)
        loss = (model(x) - x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        save_checkpoint(path, model, optimizer, step)
        prof.step()
print(f"loss {loss.item():.3f}")
