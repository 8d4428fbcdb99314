#!/usr/bin/env python3
"""key_averages().table() and events() on a cycle of many recorded operator
calls: trainprof against torch.profiler, in one run.

    .venv/bin/python bench/key_averages_speed.py [--calls 1000000] [--repeats 3] [--json OUT.json]

The workload is ``--calls`` calls of ``x.add_(y)`` on one-element tensors
(one recorded operator call each, aten::add_: a scalar argument would add
four more, its conversion to a tensor), recorded once by each profiler
(CPU activity only). Then, per profiler, ``--repeats`` times: the wall time
of ``prof.key_averages().table(sort_by="self_cpu_time_total")`` (median and
spread reported). torch.profiler builds its events in Python at the end of
the ``with`` block; that time is reported apart ("torch stop"), and is not in
its key_averages figure, nor is the memory its events hold (resident memory
after its stop less before its start). For trainprof's ``events()``: the time to open the
list and to walk every event, and the memory it holds: the peak resident
memory that ``call_events`` adds, measured in a fresh process that does only
that (VmHWM after minus VmRSS before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import torch

import trainprof


def workload(calls: int) -> None:
    x, y = torch.zeros(1), torch.ones(1)
    for _ in range(calls):
        x.add_(y)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def repeat(fn: Callable[[], Any], times: int) -> list[float]:
    return [timed(fn)[0] for _ in range(times)]


def summary(seconds: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds)}


def memory_of_call_events(run_dir: str) -> dict[str, float]:
    """In a fresh process: the resident memory call_events adds at its peak,
    and what the result holds once built."""
    probe = f"""
import re, json
from trainprof import _trainprof
def status(field):
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024
before = status("VmRSS")
events = _trainprof.call_events({run_dir!r})
print(json.dumps({{"calls": len(events), "peak_added_bytes": status("VmHWM") - before,
                  "held_bytes": status("VmRSS") - before}}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_trainprof(calls: int, repeats: int, root: str) -> dict[str, Any]:
    workload(1000)  # warm
    with trainprof.profile(activities=[trainprof.ProfilerActivity.CPU]) as prof:
        workload(calls)
    averages = prof.key_averages()
    add = next(e for e in averages if e.key == "aten::add_")
    assert add.count == calls, f"trainprof recorded {add.count} aten::add_ calls of {calls}"
    table = repeat(lambda: prof.key_averages().table(sort_by="self_cpu_time_total"), repeats)
    open_s, events = timed(prof.events)
    walk_s, adds = timed(lambda: sum(e.name == "aten::add_" for e in events))
    assert adds == calls, f"events() listed {adds} aten::add_ calls of {calls}"
    walked = len(events)  # and what ran around the loop (the workload's tensors, ...)
    return {"key_averages_table": summary(table), "events_open_s": open_s, "events_walk_s": walk_s,
            "events": walked, "events_memory": memory_of_call_events(prof.last_run_dir)}


def resident_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def bench_torch(calls: int, repeats: int) -> dict[str, Any]:
    workload(1000)
    tp = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    before = resident_bytes()
    tp.start()
    workload(calls)
    stop_s, _ = timed(tp.stop)  # builds torch's events in Python
    held = resident_bytes() - before
    add = next(e for e in tp.key_averages() if e.key == "aten::add_")
    assert add.count == calls, f"torch.profiler recorded {add.count} aten::add_ calls of {calls}"
    table = repeat(lambda: tp.key_averages().table(sort_by="self_cpu_time_total"), repeats)
    return {"key_averages_table": summary(table), "stop_s": stop_s, "events_held_bytes": held}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        os.chdir(root)  # trainprof's runs land under the working directory
        ours = bench_trainprof(args.calls, args.repeats, root)
        theirs = bench_torch(args.calls, args.repeats)
    ratio = theirs["key_averages_table"]["median_s"] / ours["key_averages_table"]["median_s"]
    result = {"calls": args.calls, "repeats": args.repeats, "torch": torch.__version__, "trainprof": ours,
              "torch_profiler": theirs, "key_averages_table_speedup": ratio}
    print(f"{args.calls} aten::add_ calls, {args.repeats} repeats, torch {torch.__version__}")
    for name, r in (("trainprof", ours), ("torch.profiler", theirs)):
        t = r["key_averages_table"]
        print(f"  {name:15s} key_averages().table(): median {t['median_s']:.3f} s "
              f"(min {t['min_s']:.3f}, max {t['max_s']:.3f})")
    print(f"  torch.profiler's stop (its events built in Python): {theirs['stop_s']:.2f} s; its events hold "
          f"{theirs['events_held_bytes'] / 2**20:.0f} MiB ({theirs['events_held_bytes'] / args.calls:.0f} bytes a call)")
    print(f"  trainprof is {ratio:.1f}x faster at key_averages().table()")
    memory = ours["events_memory"]
    print(f"  trainprof events(): {ours['events']} events; opened in {ours['events_open_s']:.2f} s, walked in "
          f"{ours['events_walk_s']:.2f} s ({ours['events_walk_s'] / ours['events'] * 1e6:.2f} us an event); "
          f"call_events holds {memory['held_bytes'] / 2**20:.0f} MiB "
          f"({memory['held_bytes'] / memory['calls']:.0f} bytes a call), peak added "
          f"{memory['peak_added_bytes'] / 2**20:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
