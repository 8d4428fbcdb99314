# expect: clean
# Gradient accumulation over four micro-batches per optimizer step, the loss
# read back and printed every ten steps.
import torch

from _corpus import fashion_mnist, profiled

torch.manual_seed(0)
images, labels = fashion_mnist(32 * 4 * 25)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
    torch.nn.Linear(16 * 12 * 12, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
micro = list(zip(images.split(32), labels.split(32)))
with profiled() as prof:
    for step in range(25):
        optimizer.zero_grad()
        for x, y in micro[step * 4:(step + 1) * 4]:
            loss = torch.nn.functional.cross_entropy(model(x), y) / 4
            loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item() * 4:.3f}")
        prof.step()
