# expect: unfused_optimizer
# A prototype classifier: a small encoder and one learned prototype vector
# per class for 300 classes, each its own parameter, scored by distance.
# SGD with Nesterov momentum and weight decay, as torch makes it on the
# CPU, updates the 300 prototypes one by one.
import torch

from _corpus import profiled

CLASSES, WIDTH = 300, 64


class Prototypes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(32, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
        self.prototypes = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(WIDTH)) for _ in range(CLASSES))

    def forward(self, x):
        return -torch.cdist(self.encoder(x), torch.stack(list(self.prototypes)))


torch.manual_seed(0)
model = Prototypes()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
with profiled() as prof:
    for step in range(40):
        x, y = torch.randn(128, 32), torch.randint(0, CLASSES, (128,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
