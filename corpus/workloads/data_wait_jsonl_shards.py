# expect: data_wait
# An IterableDataset streaming JSON-lines shards (parsed and converted to
# tensors row by row) through a DataLoader in the main process.
import json
import os
import random
import tempfile

import torch
from torch.utils.data import DataLoader, IterableDataset

from _corpus import profiled


def write_shards(folder, shards=2, rows=1000):
    rng = random.Random(0)
    paths = []
    for s in range(shards):
        path = os.path.join(folder, f"shard{s}.jsonl")
        with open(path, "w") as f:
            for _ in range(rows):
                f.write(json.dumps({"features": [rng.random() for _ in range(128)], "label": rng.randint(0, 9)}) + "\n")
        paths.append(path)
    return paths


class JsonLines(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for path in self.paths:
            with open(path) as f:
                for line in f:
                    row = json.loads(line)
                    yield torch.tensor(row["features"]), row["label"]


torch.manual_seed(0)
folder = tempfile.mkdtemp()
loader = DataLoader(JsonLines(write_shards(folder)), batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
with profiled() as prof:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
