# expect: clean
# Two DataLoader workers that keep up: each sample's augmentation (a random
# horizontal flip) is cheap next to the CNN's step, and the workers prefetch.
import torch
from torch.utils.data import DataLoader, Dataset

from _corpus import fashion_mnist, profiled


class Augmented(Dataset):
    def __init__(self, n):
        self.x, self.y = fashion_mnist(n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = self.x[i]
        return (img.flip(2) if i % 2 else img), self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Augmented(128 * 20), batch_size=128, shuffle=True, num_workers=2, persistent_workers=True)
    with profiled() as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    print(f"loss {loss.item():.3f}")
