# expect: unfused_optimizer
# ci: fast
# A mixture of 96 small experts kept as separate parameters and stacked in
# the forward, so the model is a handful of operators a step; Adam as torch
# makes it on the CPU updates the 192 expert tensors one by one.
import torch

from _corpus import profiled


class Experts(torch.nn.Module):
    def __init__(self, experts=96, width=32):
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(width, width) * 0.1)
                                              for _ in range(experts))
        self.biases = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(width)) for _ in range(experts))
        self.gate = torch.nn.Linear(width, experts)

    def forward(self, x):
        w = torch.stack(list(self.weights))  # (experts, width, width)
        b = torch.stack(list(self.biases))
        mix = torch.softmax(self.gate(x), dim=1)  # (batch, experts)
        out = torch.einsum("bi,eij->bej", x, w) + b
        return (mix.unsqueeze(2) * out).sum(1)


torch.manual_seed(0)
model = Experts()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
with profiled() as prof:
    for step in range(40):
        x = torch.randn(64, 32)
        loss = (model(x) - x.flip(1)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
