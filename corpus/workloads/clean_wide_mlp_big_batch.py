# expect: clean
# A wide MLP with a large batch: a few large matrix products a step,
# trained by Adam as torch makes it on the CPU.
import torch

from _corpus import fashion_mnist, profiled

torch.manual_seed(0)
images, labels = fashion_mnist(512 * 20)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
with profiled() as prof:
    for x, y in zip(images.split(512), labels.split(512)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
