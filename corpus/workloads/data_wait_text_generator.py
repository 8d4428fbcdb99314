# expect: data_wait
# A streaming text loop with no DataLoader: a generator tokenises sentences
# in Python (split, vocabulary lookups, padding) batch by batch, and the
# model (an embedding bag and a linear layer) is quick.
import random

import torch

from _corpus import profiled

WORDS = [f"w{i}" for i in range(5000)]


def sentences(seed):
    rng = random.Random(seed)
    while True:
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))), rng.randint(0, 3)


def batches(vocab, size=64, length=64):
    stream = sentences(0)
    while True:
        ids, labels = [], []
        for _ in range(size):
            text, label = next(stream)
            tokens = [vocab.setdefault(w.lower().strip(".,"), len(vocab)) for w in text.split()]
            ids.append((tokens + [0] * length)[:length])
            labels.append(label)
        yield torch.tensor(ids), torch.tensor(labels)


torch.manual_seed(0)
vocab = {"<pad>": 0}
model = torch.nn.Sequential(torch.nn.EmbeddingBag(6000, 64), torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = batches(vocab)
with profiled() as prof:
    for step in range(30):
        x, y = next(data)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}, vocabulary {len(vocab)}")
