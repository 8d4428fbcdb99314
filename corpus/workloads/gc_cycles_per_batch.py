# expect: gc_pauses
# ci: fast
# Each batch builds a tree of Python records with parent links (reference
# cycles) for its samples and keeps a history of them, so the heap grows
# step by step and the collector's full passes over it pause the loop.
import torch

from _corpus import profiled


class Node:
    def __init__(self, parent, value):
        self.parent, self.value, self.children = parent, value, []
        if parent is not None:
            parent.children.append(self)


def batch_tree(step, size):
    root = Node(None, step)
    for i in range(size):
        sample = Node(root, i)
        for j in range(8):
            Node(sample, j)
    return root


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
with profiled() as prof:
    for step in range(40):
        history.append(batch_tree(step, 2000))
        x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}, {len(history)} trees")
