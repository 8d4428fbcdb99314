"""What the memory holds at each step's peak and what grows from step to step
(profile_memory; memory_breakdown.csv and memory_leaks.csv, docs/OUTPUTS.md),
on PyTorch training loops whose answers are known exactly."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from conftest import run_dirs, torch

import trainprof
from trainprof import tensorboard_trace_handler

STEPS = 6


def profile_loop(out: Path, step: Callable[[int], None], **options: object) -> Path:
    """Two warm-up steps, then STEPS steps recorded with profile_memory and
    analysed: the run's output directory. The start-up ends at once, so
    that each recorded iteration is a step (1..STEPS)."""
    step(-2)
    step(-1)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(out)), profile_memory=True,
                           **options) as prof:
        prof.step()
        for i in range(STEPS):
            step(i)
            prof.step()
    [run] = run_dirs(out)
    return run / "PROFILER_OUTPUT"


def breakdown(output: Path) -> dict[int, dict[str, float]]:
    """memory_breakdown.csv's classes per step (CPU), in bytes (from MB, 6 decimals)."""
    steps: dict[int, dict[str, float]] = {}
    with open(output / "memory_breakdown.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Kind"] == "class" and row["Device Type"] == "CPU":
                steps.setdefault(int(row["Step"]), {})[row["Name"]] = float(row["Size(MB)"]) * 2**20
    return steps


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def test_parameters_gradients_and_adam_state_are_exact_at_the_peak(tmp_path: Path) -> None:
    torch.manual_seed(0)
    # Large weights, a batch of one: the optimizer's step is the peak, when
    # every gradient is alive next to the parameters and Adam's moments.
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    optimizer = torch.optim.Adam(model.parameters(), foreach=False)
    x = torch.randn(1, 512)

    def step(i: int) -> None:
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    output = profile_loop(tmp_path, step)
    params = list(model.parameters())
    parameter_bytes = storage_bytes(params)
    state_bytes = storage_bytes([t for s in optimizer.state.values() for t in s.values()
                                 if isinstance(t, torch.Tensor)])
    assert state_bytes >= 2 * parameter_bytes  # exp_avg and exp_avg_sq, and the step counts
    steps = breakdown(output)
    assert len(steps) >= STEPS - 1
    for number, classes in steps.items():
        assert abs(classes["parameter"] - parameter_bytes) < 1, (number, classes)
        assert abs(classes["gradient"] - parameter_bytes) < 1, (number, classes)
        assert abs(classes["optimizer state"] - state_bytes) < 1, (number, classes)
    with open(output / "profiler_info.json") as f:
        memory = json.load(f)["analysis"]["memory"]
    [cpu] = [p for p in memory["breakdown"] if p["device"] == "CPU"]
    assert cpu["classes"]["parameter"] == parameter_bytes
    assert memory["leaks"] == []
    # The same memory as torch's allocator snapshot, read by torch's own tools.
    import pickle

    from torch.cuda import _memory_viz
    with open(output / "memory_snapshot.pickle", "rb") as f:
        snapshot = pickle.load(f)
    [trace] = snapshot["device_traces"]  # the CPU, no CUDA device
    categories = {e["category"] for e in trace if e["action"] == "alloc"}
    assert {"gradient", "temporary"} <= categories, categories
    allocs = sum(e["action"] == "alloc" for e in trace)
    earlier = "(allocated before the run or not reported)"
    alive = [block for seg in snapshot["segments"] for block in seg["blocks"] if block["state"] == "active_allocated"]
    assert allocs == sum(e["action"] == "free_completed" for e in trace) + sum(
        1 for block in alive if block["frames"][0]["name"] != earlier)
    # Blocks from before the run alive at the end: the parameters and Adam's state, exactly.
    assert sum(block["size"] for block in alive if block["frames"][0]["name"] == earlier) == \
        parameter_bytes + state_bytes
    # What torch's viewer needs to replay the trace: every address an event
    # names lies in a segment, a segment's blocks tile it, categories are on
    # the allocations, and the trace ends with the snapshot's moment, whose
    # category is the viewer's "unknown" for blocks from before the trace.
    spans = [(seg["address"], seg["address"] + seg["total_size"]) for seg in snapshot["segments"]]
    assert all(any(lo <= e["addr"] < hi for lo, hi in spans) for e in trace if e["action"] != "snapshot")
    assert all(sum(block["size"] for block in seg["blocks"]) == seg["total_size"] for seg in snapshot["segments"])
    assert not any("category" in e for e in trace if e["action"].startswith("free"))
    assert trace[-1]["action"] == "snapshot" and trace[-1]["category"] == "unknown"
    assert f"total_allocated: " in _memory_viz.segsum(snapshot)
    assert _memory_viz.trace(snapshot).count(" = MEM[") + _memory_viz.trace(snapshot).count("= seg_") == allocs
    assert "aten::" in _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    cli = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(output / "memory_snapshot.pickle")],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and f"{len(trace)} entries" in cli.stdout, cli.stderr


def test_activations_are_the_largest_class_of_an_activation_heavy_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(1024, 128)  # 512 KB per layer output kept for backward; 64 KB of weights per layer

    def step(i: int) -> None:
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    output = profile_loop(tmp_path, step)
    steps = breakdown(output)
    for number, classes in steps.items():
        if number == STEPS - 1:
            continue
        assert max(classes, key=classes.__getitem__) == "activation", (number, classes)
        assert classes["activation"] >= 6 * 512 * 1024, (number, classes)
    # The timeline has a counter track per class.
    with open(output / "trace_view.json") as f:
        events = json.load(f)["traceEvents"]
    activation = [e["args"]["value"] for e in events if e.get("ph") == "C" and e["name"] == "Memory: activation (CPU)"]
    assert activation and max(activation) >= 6 * 0.5, max(activation, default=0)


def test_a_list_that_keeps_a_tensor_per_step_is_reported_as_a_leak_with_its_line(tmp_path: Path) -> None:
    kept: list[torch.Tensor] = []
    model = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)

    def step(i: int) -> None:
        model(x).sum().backward()
        kept.append(torch.ones(256, 1024))  # LEAK: 1 MiB per step, never freed
        model.zero_grad()

    output = profile_loop(tmp_path, step, with_stack=True)
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# LEAK" in text)
    with open(output / "memory_leaks.csv", newline="") as f:
        leaks = list(csv.DictReader(f))
    assert leaks, "no leak reported"
    [leak] = [row for row in leaks if f"test_memory.py({line})" in row["Site"]]
    assert abs(float(leak["Growth per Step(MB)"]) - 1.0) < 1e-6, leak
    assert int(leak["Steps"]) == STEPS
    assert leak is leaks[0], "the fastest growth comes first"
    summary = subprocess.run([sys.executable, "-m", "trainprof", "summary", str(output.parent)],
                             capture_output=True, text=True, check=True).stdout
    [growing] = [s for s in summary.splitlines() if "memory growing" in s]
    assert "1.000 MB per step" in growing and f"test_memory.py({line})" in growing, summary


OOM_JOB = """
import os, resource, signal, sys, torch, trainprof
out, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
optimizer = torch.optim.Adam(model.parameters())
x = torch.randn(64, 256)
if mode == "flight":  # nothing on disk until the failure dumps the ring
    recorder = trainprof.flight_recorder(out, ring_mb=16, profile_memory=True, hang_timeout_s=None,
                                         dump_signal=None)
else:
    recorder = trainprof.profile(on_trace_ready=trainprof.tensorboard_trace_handler(out),
                                 profile_memory=mode == "memory")
with recorder as prof:
    for step in range(3):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        prof.step()
    kept = torch.ones(1024, 1024)  # 4 MiB alive at the failure
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2**29, resource.RLIM_INFINITY))
    try:
        torch.empty(2**31, dtype=torch.float32)  # 8 GiB: more than the limit lets through
    except RuntimeError as e:  # the training's own handler: the error is torch's, unchanged
        print("caught:", str(e).splitlines()[0], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # nothing more runs: what is on disk is all there is
"""


def run_oom_job(tmp_path: Path, mode: str) -> Path:
    """OOM_JOB in a child process (``mode`` "memory": profile_memory;
    "flight": a flight recorder with profile_memory), killed right after it
    caught the error, then analysed: its run directory."""
    script = tmp_path / "oom.py"
    script.write_text(OOM_JOB)
    out = tmp_path / "out"
    child = subprocess.run([sys.executable, str(script), str(out), mode], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == -9, child.stderr
    assert "caught: " in child.stdout and "DefaultCPUAllocator" in child.stdout, child.stdout
    assert "out of memory: an allocation of 8589934592 bytes failed" in child.stderr
    [run] = run_dirs(out)
    analysed = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run)], capture_output=True,
                              text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    return run


@pytest.mark.parametrize("mode", ["memory", "flight"])
def test_an_allocation_over_the_limit_leaves_a_report_of_what_was_alive(tmp_path: Path, mode: str) -> None:
    run = run_oom_job(tmp_path, mode)
    if mode == "flight":
        with open(run / "profiler_info.json") as f:
            fired = json.load(f)["flight_recorder"]
        assert fired["trigger"] == "out_of_memory"
        assert fired["reason"] == "an allocation of 8589934592 bytes on CPU failed in aten::empty during step 3"
    report = (run / "PROFILER_OUTPUT" / "oom_report.txt").read_text()
    assert report.startswith("Out of memory on CPU: an allocation of 8589934592 bytes (8192.000 MB) failed"), report
    assert "in aten::empty" in report.splitlines()[0]
    # What was alive: the kept tensor among the largest blocks, and the model's
    # parameters and Adam's state by class.
    assert "4.000 MB" in report and "aten::" in report
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        [oom] = json.load(f)["analysis"]["memory"]["out_of_memory"]
    assert oom["requested_bytes"] == 2**33
    assert oom["operator"] == "aten::empty"
    params = 256 * 256 * 4 + 256 * 4
    assert oom["classes"]["parameter"] == params
    assert oom["classes"]["optimizer state"] >= 2 * params
    assert any(b["bytes"] == 2**22 and b["age_ns"] >= 0 for b in oom["largest"])
    summary = subprocess.run([sys.executable, "-m", "trainprof", "summary", str(run)], capture_output=True,
                             text=True, check=True).stdout
    assert "OUT OF MEMORY on CPU: 8192.000 MB asked for" in summary, summary


def test_without_profile_memory_the_failed_allocation_is_still_named(tmp_path: Path) -> None:
    run = run_oom_job(tmp_path, "plain")
    report = (run / "PROFILER_OUTPUT" / "oom_report.txt").read_text()
    [first, second, *_] = report.splitlines()
    assert first.startswith("Out of memory on CPU: an allocation of 8589934592 bytes") and "in aten::empty" in first
    assert second == "No allocation was recorded (profile_memory was off): what was alive is not known."


@pytest.mark.device
@pytest.mark.parametrize("mode", ["profile", "flight"])
def test_a_cuda_allocation_over_the_device_leaves_a_report_of_what_was_alive(tmp_path: Path, mode: str) -> None:
    """CUDA's caching allocator reports its OutOfMemoryError to the profiler:
    the same report as on the CPU, the device named, parameters exact."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(64, 1024, device="cuda")
    out = tmp_path / "out"
    activities = [trainprof.ProfilerActivity.CPU, trainprof.ProfilerActivity.CUDA]
    if mode == "flight":
        recorder = trainprof.flight_recorder(out, ring_mb=16, activities=activities, profile_memory=True,
                                             hang_timeout_s=None, dump_signal=None)
    else:
        recorder = trainprof.profile(activities=activities, profile_memory=True,
                                     on_trace_ready=tensorboard_trace_handler(str(out)))
    caught = None
    with recorder as prof:
        for _ in range(3):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            prof.step()
        _, total = torch.cuda.mem_get_info()
        try:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as e:  # torch's own type, unchanged
            caught = e
        if mode == "flight":
            prof.wait_for_dumps()
    assert caught is not None
    [run] = run_dirs(out)
    if mode == "flight":
        subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run)], check=True, timeout=300)
    first = (run / "PROFILER_OUTPUT" / "oom_report.txt").read_text().splitlines()[0]
    assert first.startswith("Out of memory on CUDA:0: an allocation of "), first
    assert "in aten::empty" in first, first
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        [oom] = json.load(f)["analysis"]["memory"]["out_of_memory"]
    assert oom["requested_bytes"] >= 2 * total
    assert oom["classes"]["parameter"] == 1024 * 1024 * 4 + 1024 * 4
    assert oom["classes"]["optimizer state"] >= 2 * oom["classes"]["parameter"]


# A profile of memory started and stopped from a thread of its own, again
# and again, while the main thread trains: stops land inside the main
# thread's backward(), whose engine restores the debug info it saved when
# it began, trainprof's memory reporter with it.
THREAD_DRIVEN_CYCLES = '''
import threading, time, torch, trainprof
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
done = threading.Event()

def cycles():
    for i in range(12):
        p = trainprof.profile(profile_memory=True, on_trace_ready=None)
        p.start()
        time.sleep(0.003 * (1 + i % 4))
        p.stop()
        time.sleep(0.002)
    done.set()

thread = threading.Thread(target=cycles)
thread.start()
steps = 0
while not done.is_set():
    loss = model(torch.randn(64, 256)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
thread.join()
model(torch.randn(64, 256)).pow(2).mean().backward()
with torch.profiler.profile(profile_memory=True) as prof:
    model(torch.randn(8, 256)).sum().backward()
names = {e.key for e in prof.key_averages()}
assert "aten::addmm" in names, names
print("torch.profiler ran after", steps, "steps")
'''


def test_torch_profiler_starts_on_the_main_thread_after_thread_driven_memory_profiles(tmp_path: Path) -> None:
    """Whatever trainprof put on the main thread is gone once the profile
    stops, whichever thread stopped it and whenever."""
    script = tmp_path / "cycles.py"
    script.write_text(THREAD_DRIVEN_CYCLES)
    for attempt in range(3):  # where the stops land varies: three runs of twelve cycles
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                                cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "torch.profiler ran after" in result.stdout, result.stdout
