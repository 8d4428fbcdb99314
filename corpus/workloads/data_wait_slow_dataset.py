# expect: data_wait
# ci: fast
# A Dataset that decodes each image in Python (a per-pixel jitter) and reads
# it from a slow store, loaded in the main process (num_workers=0): the loop
# waits for every batch longer than it computes.
import random
import time

import torch
from torch.utils.data import DataLoader, Dataset

from _corpus import fashion_mnist, profiled


class JitteredImages(Dataset):
    def __init__(self, n):
        self.x, self.y = fashion_mnist(n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        time.sleep(0.0004)  # the store's latency
        img = self.x[i].clone()
        noise = [random.gauss(0, 0.02) for _ in range(28 * 28)]
        img += torch.tensor(noise).view(1, 28, 28)
        return img, self.y[i]


torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(JitteredImages(64 * 30), batch_size=64, shuffle=True, num_workers=0)

with profiled() as prof:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
