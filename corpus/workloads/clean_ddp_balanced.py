# expect: clean
# ranks: 2
# DistributedDataParallel on two ranks with a DistributedSampler: the same
# work on each, a CNN whose step outweighs its gradient all-reduce.
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from _corpus import fashion_mnist, profiled

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = TensorDataset(*fashion_mnist(128 * 2 * 20))
loader = DataLoader(data, batch_size=128, sampler=DistributedSampler(data, seed=0))
with profiled() as prof:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"rank {dist.get_rank()} loss {loss.item():.3f}")
dist.destroy_process_group()
