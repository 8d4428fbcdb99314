# expect: data_wait
# Two DataLoader workers that cannot keep up: each sample is read from a
# slow store (2 ms) and normalised, 64 a batch, while the model needs a few
# ms a batch. The workers help, but not enough.
import time

import torch
from torch.utils.data import DataLoader, Dataset

from _corpus import fashion_mnist, profiled


class SlowStore(Dataset):
    def __init__(self, n):
        self.x, self.y = fashion_mnist(n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        time.sleep(0.002)
        img = self.x[i].view(-1)
        return (img - img.mean()) / (img.std() + 1e-6), self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(SlowStore(64 * 30), batch_size=64, num_workers=2)
    with profiled() as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    print(f"loss {loss.item():.3f}")
