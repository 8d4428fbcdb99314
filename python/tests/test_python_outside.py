"""Python outside operators (docs/OUTPUTS.md): the stack sampler names the
functions that spend a step's host time where no operator or range is, with
their shares of the step, and the advisor turns them into findings: a loop
fed by a plain Python generator waits for its input, a function of the
program's own is named with its file and line, a clean loop gets nothing."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_dirs, torch

import trainprof
from trainprof import tensorboard_trace_handler

STEPS = 20


def busy(ms: float) -> None:
    """Pure Python, holding the GIL: ``ms`` of this thread's CPU time,
    however loaded the machine (its waits for a CPU are no one's work)."""
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass


def nap(ms: float) -> None:
    time.sleep(ms / 1e3)


def locked(lock: threading.Lock) -> None:
    with lock:
        pass


def run_queue_wait_ms() -> float:
    """How long this thread has waited for a CPU (schedstat), ms: the
    analysis leaves that wait out of every function's time, so a loaded
    machine's preemptions are nobody's work."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def analysed_shares(run: Path) -> dict[str, float]:
    """Each function's outside time per step over the counted steps, ms."""
    with open(run / "PROFILER_OUTPUT" / "python_outside_operators.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    steps = {r["Step"] for r in rows}
    totals: Counter = Counter()
    for r in rows:
        totals[r["Function"]] += float(r["Time(us)"]) / 1e3
    return {name: ms / len(steps) for name, ms in totals.items()}


def planted_loop(out: Path) -> dict[str, float]:
    """STEPS steps of busy 64 ms, nap 48 ms, a lock another thread holds
    for 8 ms of every 30, and an operator: each function's measured time
    per step (its thread's waits for a CPU left out, as the analysis
    leaves them out) and the step's, ms. A sample is found where its
    thread was up to a switch interval after it was asked for (more on a
    loaded machine): long functions keep that a few points of their shares."""
    lock = threading.Lock()
    stop = threading.Event()

    def holder() -> None:
        while not stop.is_set():
            with lock:
                time.sleep(0.008)
            time.sleep(0.022)

    threading.Thread(target=holder, daemon=True).start()
    measured: Counter = Counter()
    x = torch.ones(64)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for step in range(STEPS + 1):
            begin = time.perf_counter()
            for function, call in (("busy", lambda: busy(64)), ("nap", lambda: nap(48)),
                                   ("locked", lambda: locked(lock))):
                waited, start = run_queue_wait_ms(), time.perf_counter()
                call()
                if step > 0:  # step 0 is the start-up
                    measured[function] += (time.perf_counter() - start) * 1e3 - (run_queue_wait_ms() - waited)
            x = x * 1.0001
            if step > 0:
                measured["step"] += (time.perf_counter() - begin) * 1e3
            prof.step()
    stop.set()
    return {name: ms / STEPS for name, ms in measured.items()}


@pytest.mark.parametrize("where", ["main thread", "another thread"])
def test_planted_functions_are_named_with_their_shares_of_the_step(tmp_path: Path, where: str) -> None:
    measured: dict[str, float] = {}
    if where == "main thread":
        measured = planted_loop(tmp_path)
    else:
        worker = threading.Thread(target=lambda: measured.update(planted_loop(tmp_path)))
        worker.start()
        worker.join()
    [run] = run_dirs(tmp_path)
    shares = analysed_shares(run)
    for function in ("busy", "nap", "locked"):
        found, truth = 100 * shares.get(function, 0) / measured["step"], 100 * measured[function] / measured["step"]
        assert abs(found - truth) <= 5, (function, found, truth, shares, measured)
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        outside = json.load(f)["analysis"]["python_outside_operators"]
    assert outside["functions"][0]["name"].startswith("busy (test_python_outside.py:")
    assert outside["samples_in_steps"] > 0


def test_sampling_off_records_no_samples(tmp_path: Path) -> None:
    config = trainprof._ExperimentalConfig(python_stack_sampling_ms=0)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(tmp_path)), experimental_config=config) as p:
        for _ in range(5):
            nap(10)
            p.step()
    [run] = run_dirs(tmp_path)
    assert not (run / "PROFILER_OUTPUT" / "python_outside_operators.csv").exists()
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        assert "python_outside_operators" not in json.load(f)["analysis"]
    with pytest.raises(ValueError, match="python_stack_sampling_ms"):
        trainprof._ExperimentalConfig(python_stack_sampling_ms=1001)


def test_the_samples_and_the_functions_are_in_the_database(tmp_path: Path) -> None:
    """trainprof.db holds every sample (its stack, span and time outside
    operators) and python_outside_operators.csv's rows, which agree."""
    import sqlite3
    config = trainprof._ExperimentalConfig(export_type=[trainprof.ExportType.Text, trainprof.ExportType.Db])
    x = torch.ones(64)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(tmp_path)), experimental_config=config) as p:
        for _ in range(6):
            nap(20)
            x = x * 1.0001
            p.step()
    [run] = run_dirs(tmp_path)
    db = sqlite3.connect(run / "PROFILER_OUTPUT" / "trainprof.db")
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        assert db.execute("SELECT COUNT(*) FROM stack_samples").fetchone()[0] == \
            json.load(f)["analysis"]["python_outside_operators"]["samples"]
    # The nap's samples: its frame innermost, most of their span outside operators.
    naps = db.execute("SELECT SUM(outside_ns), SUM(end_ns - start_ns) FROM stack_samples JOIN strings "
                      "ON strings.id = stack_id WHERE strings.value LIKE '%: nap;%' AND step IS NOT NULL").fetchone()
    assert naps[0] > 0.5 * naps[1], naps
    with open(run / "PROFILER_OUTPUT" / "python_outside_operators.csv", newline="") as f:
        rows = {(int(r["Step"]), r["Function"], int(r["Line"])): float(r["Time(us)"]) for r in csv.DictReader(f)}
    in_db = {(step, function, line): ns / 1e3 for step, function, line, ns in
             db.execute("SELECT step, function, line, time_ns FROM python_outside_operators")}
    assert in_db.keys() == rows.keys() and rows
    assert all(abs(in_db[k] - rows[k]) < 0.01 for k in rows)


# A training script nobody here wrote would look like this: the mode plants
# one problem outside every operator, or none.
SCRIPT = '''
import sys, threading, time, torch

def log_metrics(loss):  # pure Python per step: 6 ms of this thread's CPU, however loaded the machine
    end = time.thread_time() + 0.006
    n = 0
    while time.thread_time() < end:
        n += 1
    return n

def save_checkpoint():  # blocking I/O stood in for by a sleep
    time.sleep(0.006)

def batches():  # a plain generator: no DataLoader
    while True:
        time.sleep(0.008)
        yield torch.randn(32, 64), torch.randint(0, 10, (32,))

def main():
    mode = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batches() if mode == "generator" else iter(lambda: (torch.randn(32, 64), torch.randint(0, 10, (32,))), None)
    for step in range(40):
        x, y = next(data)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if mode == "metrics":
            log_metrics(loss)
        if mode == "checkpoint":
            save_checkpoint()

main()
'''


def zero_code_advice(tmp_path: Path, mode: str) -> tuple[list[dict], str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"}
    result = subprocess.run([sys.executable, "-m", "trainprof", "run", str(script), mode], capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    [run] = run_dirs(tmp_path / "data")
    summary = subprocess.run([sys.executable, "-m", "trainprof", "summary", str(run)], capture_output=True,
                             text=True, timeout=120).stdout
    return trainprof.advise(run), summary


@pytest.mark.parametrize("mode,rule,title", [
    ("generator", "data_wait", "the training loop waits for its input (a Python iterator)"),
    ("metrics", "host_outside_operators", "host work outside operators: log_metrics (train.py:"),
    ("checkpoint", "host_outside_operators", "host work outside operators: save_checkpoint (train.py:12)"),
])
def test_work_outside_operators_is_the_first_finding(tmp_path: Path, mode: str, rule: str, title: str) -> None:
    findings, summary = zero_code_advice(tmp_path, mode)
    assert findings, summary
    assert findings[0]["rule"] == rule and findings[0]["title"].startswith(title), findings
    if mode == "generator":
        assert "batches (train.py:16)" in findings[0]["evidence"], findings[0]  # its sleep's line
    assert "Python outside operators: " in summary, summary


def test_a_clean_script_gets_no_finding(tmp_path: Path) -> None:
    findings, summary = zero_code_advice(tmp_path, "clean")
    assert findings == [], findings


def test_a_clean_script_on_a_busy_machine_gets_no_finding(tmp_path: Path) -> None:
    """Every core busy with another process: the training thread is
    preempted between operators, which opens gaps where no function of its
    own ran. The samples carry the thread's wait for a CPU, and the
    analysis leaves it out, so the loop's own lines are not named."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        findings, summary = zero_code_advice(tmp_path, "clean")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert findings == [], (findings, summary)


# Threads made outside Python that call into it (a C++ library's threads:
# torch's Gloo threads take the GIL to release a tensor) each get a thread
# state made without the GIL; ctypes' callbacks on new pthreads do the same.
THREADS_COME_AND_GO = '''
import ctypes, sys, time
import trainprof

libc = ctypes.CDLL(None)
libc.pthread_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
body = CALLBACK(lambda arg: None)
config = trainprof._ExperimentalConfig(python_stack_sampling_ms=1)
made = 0
with trainprof.profile(experimental_config=config, on_trace_ready=trainprof.tensorboard_trace_handler(sys.argv[1])) as p:
    end = time.monotonic() + 4
    while time.monotonic() < end:
        threads = [ctypes.c_ulong() for _ in range(16)]
        for t in threads:
            assert libc.pthread_create(ctypes.byref(t), None, body, None) == 0
        for t in threads:
            libc.pthread_join(t.value, None)
        made += len(threads)
        p.step()
print("threads made", made)
'''


def test_threads_that_come_and_go_while_sampling_do_not_crash(tmp_path: Path) -> None:
    """The sampler reads the threads' frames while native threads make and
    drop their Python thread states every few microseconds: the training
    process keeps running and its run is written."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS_COME_AND_GO)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) > 0, result.stdout
    assert len(run_dirs(tmp_path / "out")) == 1


def test_the_samples_are_a_flame_graph_in_the_perfetto_trace(tmp_path: Path) -> None:
    """trace_view.pftrace holds every sample as a PerfSample of its thread
    whose interned callstack is the sampled stack, root first, each frame a
    function of its file: what Perfetto draws as a flame graph."""
    import zlib
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

    def outer_function() -> None:
        nap(15)

    x = torch.ones(64)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as p:
        for _ in range(6):
            outer_function()
            x = x * 1.0001
            p.step()
    [run] = run_dirs(tmp_path)
    trace = pb.Trace()
    trace.ParseFromString((run / "PROFILER_OUTPUT" / "trace_view.pftrace").read_bytes())
    packets = []
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            batch = pb.Trace()
            batch.ParseFromString(zlib.decompress(packet.compressed_packets))
            packets += batch.packet
        else:
            packets.append(packet)
    functions, paths, mappings, frames, callstacks = {}, {}, {}, {}, {}
    samples = []
    thread_tids = {p.track_descriptor.thread.tid for p in packets if p.track_descriptor.HasField("thread")}
    for packet in packets:
        interned = packet.interned_data
        functions.update({s.iid: s.str.decode() for s in interned.function_names})
        paths.update({s.iid: s.str.decode() for s in interned.mapping_paths})
        mappings.update({m.iid: paths[m.path_string_ids[0]] for m in interned.mappings})
        frames.update({f.iid: (functions[f.function_name_id], mappings[f.mapping_id]) for f in interned.frames})
        callstacks.update({c.iid: [frames[i] for i in c.frame_ids] for c in interned.callstacks})
        if packet.HasField("perf_sample"):
            assert packet.trusted_packet_sequence_id == 1
            samples.append((packet.perf_sample.tid, callstacks[packet.perf_sample.callstack_iid]))
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        assert len(samples) == json.load(f)["analysis"]["python_outside_operators"]["samples"]
    assert {tid for tid, _ in samples} <= thread_tids
    here = [[name for name, path in stack if path.endswith("test_python_outside.py")] for _, stack in samples]
    napping = [names for names in here if names[-2:] == ["outer_function", "nap"]]
    assert len(napping) >= len(samples) / 2, here
    assert napping[0][0] == "test_the_samples_are_a_flame_graph_in_the_perfetto_trace"
