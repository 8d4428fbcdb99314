# expect: clean
# ci: fast
# A small CNN on Fashion-MNIST, batches from an in-memory TensorDataset,
# SGD with momentum as torch makes it: nothing in it to fix.
import torch
from torch.utils.data import DataLoader, TensorDataset

from _corpus import fashion_mnist, profiled

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(TensorDataset(*fashion_mnist(64 * 30)), batch_size=64, shuffle=True)
with profiled() as prof:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
