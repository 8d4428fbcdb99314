#!/usr/bin/env python3
"""What memory categories, sites and out-of-memory notes cost profile_memory.

    .venv/bin/python bench/memory_categories.py [--rounds 7] [--samples 7] [--iters 20000]

Per allocation. Classes and sites are made by the analysis; the only thing
on an allocation's path that this work added is the watch in front of c10's
CPU allocator (a call and a try around the allocator, installed at the
first session for the process' lifetime). Each round is a fresh process
that times a loop of ``torch.empty(64)`` (one allocation and one free each)
on the training thread's CPU clock: before any session (no watch), inside a
profile_memory session (every allocation and free recorded), and after it
(the watch, nothing recorded). "watch" is after - before, "profile_memory"
inside - before, per allocation, the median over rounds: the watch's share
of profile_memory's cost is the target's ratio (at most 10 %).

Per optimizer step. The Python package tags parameters, gradients and
optimizer state around each ``optimizer.step()`` (torch's global hooks):
a pass over the parameters. Timed in the same session with the tagging on
and off in turn, on an Adam step of a 24-layer MLP (48 parameter tensors).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ROUND = r"""
import json, statistics, sys, tempfile, time, torch, trainprof
from trainprof import _memory
torch.set_num_threads(1)
iters, samples = int(sys.argv[1]), int(sys.argv[2])

def loop():
    t = time.thread_time_ns()
    for _ in range(iters):
        torch.empty(64)
    return (time.thread_time_ns() - t) / iters

def median(f):
    return statistics.median(f() for _ in range(samples))

for _ in range(3): loop()  # warm
before = median(loop)
layers = []
for _ in range(24): layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers)
opt = torch.optim.Adam(model.parameters())
x = torch.randn(8, 64)
def step():
    opt.zero_grad(); model(x).sum().backward()
    t = time.thread_time_ns(); opt.step(); return time.thread_time_ns() - t
out = tempfile.mkdtemp(prefix="trainprof_bench_")
handler = trainprof.tensorboard_trace_handler(out, analyse_flag=False)
with trainprof.profile(profile_memory=True, on_trace_ready=handler) as prof:
    inside = median(loop)
    on, off = [], []
    for i in range(4 * samples):
        tagging = i % 2 == 0
        _memory._active = 1 if tagging else 0
        (on if tagging else off).append(step())
    _memory._active = 1
after = median(loop)
print(json.dumps({"before": before, "inside": inside, "after": after,
                  "step_tagged": statistics.median(on), "step_untagged": statistics.median(off)}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20000)
    a = p.parse_args()
    rounds = []
    for r in range(a.rounds):
        out = subprocess.run([sys.executable, "-c", ROUND, str(a.iters), str(a.samples)], capture_output=True,
                             text=True, check=True)
        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{a.rounds}: {rounds[-1]}", file=sys.stderr)
    med = lambda key: statistics.median(x[key] for x in rounds)  # noqa: E731
    watch = statistics.median(x["after"] - x["before"] for x in rounds)
    memory = statistics.median(x["inside"] - x["before"] for x in rounds)
    tags = statistics.median(x["step_tagged"] - x["step_untagged"] for x in rounds)
    print(f"per allocation (torch.empty(64) and its free), median of {a.rounds} processes:")
    print(f"  no profiler, before any session:       {med('before'):8.1f} ns")
    print(f"  profile_memory recording:              {med('inside'):8.1f} ns  (+{memory:.1f} ns)")
    print(f"  after it (the allocator watch only):   {med('after'):8.1f} ns  (+{watch:.1f} ns)")
    print(f"  watch / profile_memory's cost:         {watch / memory:8.3f}  (target <= 0.10)")
    print("per Adam step of 48 parameter tensors:")
    print(f"  untagged {med('step_untagged') / 1e3:.1f} us, tagged {med('step_tagged') / 1e3:.1f} us "
          f"(+{tags / 1e3:.1f} us, {tags / med('step_untagged'):.3f} of the step)")


if __name__ == "__main__":
    main()
