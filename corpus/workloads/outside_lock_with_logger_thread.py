# expect: host_outside_operators
# Metrics go to a list that a background "uploader" thread drains under a
# lock, holding it while it formats and sends: the loop's record() waits
# for the lock every step.
import threading
import time

import torch

from _corpus import profiled

lock = threading.Lock()
pending = []


def uploader():
    while True:
        with lock:
            batch = list(pending)
            pending.clear()
            time.sleep(0.008)  # formatting and sending, lock held
        time.sleep(0.001)


def record(name, value):
    with lock:
        pending.append((name, value))


threading.Thread(target=uploader, daemon=True).start()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
with profiled() as prof:
    for step in range(40):
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record("loss", loss.item())
        prof.step()
print(f"loss {loss.item():.3f}")
