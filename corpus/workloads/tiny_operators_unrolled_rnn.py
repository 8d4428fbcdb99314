# expect: tiny_operators
# ci: fast
# A recurrent cell written by hand and unrolled over 80 time steps with a
# hidden state of 16: a dozen small operators per time step, forward and
# backward, thousands per training step.
import torch

from _corpus import profiled


class Cell(torch.nn.Module):
    def __init__(self, inputs, hidden):
        super().__init__()
        self.x2h = torch.nn.Linear(inputs, 2 * hidden)
        self.h2h = torch.nn.Linear(hidden, 2 * hidden)

    def forward(self, x, h):
        gate, candidate = (self.x2h(x) + self.h2h(h)).chunk(2, dim=1)
        gate = torch.sigmoid(gate)
        return gate * h + (1 - gate) * torch.tanh(candidate)


torch.manual_seed(0)
cell, head = Cell(8, 16), torch.nn.Linear(16, 1)
optimizer = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=1e-3, foreach=True)
with profiled() as prof:
    for step in range(30):
        seq = torch.randn(80, 4, 8)
        h = torch.zeros(4, 16)
        for x in seq:
            h = cell(x, h)
        loss = (head(h).squeeze(1) - seq[:, :, 0].mean(0)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
