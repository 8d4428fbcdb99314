# expect: host_outside_operators
# After each step the loop computes its running statistics in pure Python:
# the per-sample losses as a list, sorted for percentiles, and a JSON line
# formatted for the log.
import json
import math

import torch

from _corpus import fashion_mnist, profiled


def summarise(losses, history):
    history.extend(losses)
    recent = sorted(history[-20000:])
    stats = {q: recent[int(q * (len(recent) - 1))] for q in (0.5, 0.9, 0.99)}
    stats["std"] = math.sqrt(sum((v - stats[0.5]) ** 2 for v in recent) / len(recent))
    return json.dumps({str(k): round(v, 4) for k, v in stats.items()})


torch.manual_seed(0)
images, labels = fashion_mnist(256 * 30)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
history, log = [], []
with profiled() as prof:
    for x, y in zip(images.split(256), labels.split(256)):
        per_sample = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
        loss = per_sample.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.append(summarise(per_sample.tolist(), history))
        prof.step()
print(log[-1])
