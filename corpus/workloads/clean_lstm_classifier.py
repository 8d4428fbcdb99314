# expect: clean
# ci: fast
# An LSTM reading Fashion-MNIST images row by row (28 steps of 28
# features), trained by RMSprop as torch makes it on the CPU.
import torch

from _corpus import fashion_mnist, profiled


class RowReader(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(28, 128, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        out, _ = self.lstm(x.squeeze(1))
        return self.head(out[:, -1])


torch.manual_seed(0)
images, labels = fashion_mnist(128 * 25)
model = RowReader()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
with profiled() as prof:
    for x, y in zip(images.split(128), labels.split(128)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
