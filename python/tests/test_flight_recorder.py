"""The flight recorder from Python: a PyTorch training loop recorded all the
time into memory, written out by itself when one step is slow."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Trainer, op_statistic, run_dirs
from test_zero_code import run, step_rows, write_script

import trainprof


def paced_step(trainer: Trainer, i: int, seconds: float) -> float:
    """A training step padded to `seconds`: the clock, not the machine's
    load, decides how long the steps are, so only the planted one is slow.
    Returns the thread's CPU time in the padding (on a loaded machine the
    rest of it was the thread waiting for a CPU, which is no function's)."""
    end = time.monotonic() + seconds
    trainer.train_step(i)
    cpu = time.thread_time()
    while time.monotonic() < end:
        pass
    return time.thread_time() - cpu


def test_a_slow_step_in_a_training_loop_is_dumped_by_itself(trainer: Trainer, tmp_path: Path) -> None:
    trainer.run(2)
    # A factor of 8 rather than the default 3: a 2-core machine busy with
    # other work stretches a 50 ms step now and then to 150 ms.
    # Every operator: the dump names the functions outside them (the
    # default's sampled dump is the next test's).
    with trainprof.flight_recorder(tmp_path / "flight", ring_mb=16, slow_step_factor=8,
                                   sample_operators=1) as recorder:
        assert recorder.recording
        padded = {}
        for i in range(60):
            padded[i] = paced_step(trainer, i, 1.5 if i == 40 else 0.05)
            recorder.step()
        recorder.wait_for_dumps()
        dumps = recorder.dumps()
        assert [d.trigger for d in dumps] == ["slow_step"]
        assert dumps[0].reason.startswith("step 40 took "), dumps[0].reason
        (run,) = run_dirs(tmp_path / "flight")
        assert Path(dumps[0].run_dir) == run

        info = json.loads((run / "profiler_info.json").read_text())["flight_recorder"]
        assert info["step"] == 40 and info["ratio"] > 8
        # The run is a normal analysed run: the training's operators, its steps, the summary.
        # Steps 0-40 at least: the dump is written while training goes on.
        ops = op_statistic(run)
        assert int(ops["aten::conv2d"]["Count"]) >= 41 and "aten::addmm" in ops
        summary = trainprof.summary(str(run))
        assert summary.splitlines()[1].startswith("  flight recorder: step 40 took "), summary
        # Python's stacks were sampled all along: the slow step's time outside
        # operators is named, in the pure-Python loop that padded it.
        with open(run / "PROFILER_OUTPUT" / "python_outside_operators.csv", newline="") as f:
            step40 = [r for r in csv.DictReader(f) if r["Step"] == "40"]
        assert step40 and step40[0]["Function"] == "paced_step", step40
        assert float(step40[0]["Time(us)"]) > 0.7 * padded[40] * 1e6, (step40, padded[40])

        requested = recorder.dump("asked in the test")
        assert requested is not None and Path(requested) != run
        assert [d.trigger for d in recorder.dumps()] == ["slow_step", "request"]
    assert not recorder.recording
    assert recorder.dump() is None  # stopped: said, not raised


def test_flight_recorder_settings_are_checked_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="slow_step_factor"):
        trainprof.flight_recorder(tmp_path, slow_step_factor=-1)
    with pytest.raises(ValueError, match="ring_mb"):
        trainprof.flight_recorder(tmp_path, ring_mb=0)


def test_a_metrics_file_node_exporter_would_not_read_is_said(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    for name, said in (("health.txt", True), ("health.prom", False)):
        caplog.clear()
        recorder = trainprof.flight_recorder(tmp_path / "flight", ring_mb=1, analyse=False,
                                             metrics_file=tmp_path / name)
        recorder.stop()
        assert any("reads only *.prom files" in r.getMessage() for r in caplog.records) == said, name


def test_an_exception_leaving_the_block_or_a_signal_gives_a_dump(trainer: Trainer, tmp_path: Path) -> None:
    trainer.run(1)
    touched = tmp_path / "dump_now"
    with pytest.raises(RuntimeError, match="the loss is nan"):
        with trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, analyse=False, dump_file=touched) as recorder:
            for i in range(3):
                trainer.train_step(i)
                recorder.step()
            os.kill(os.getpid(), signal.SIGUSR1)
            touched.touch()
            # The recorder looks every 100 ms, and serves requests at most once a second.
            for _ in range(1000):
                if len(recorder.dumps()) == 2:
                    break
                time.sleep(0.01)
            raise RuntimeError("the loss is nan")
    triggers = [(d.trigger, d.reason) for d in recorder.dumps()]
    assert sorted(triggers[:2]) == [("file", f"'{touched}' appeared"), ("signal", "SIGUSR1 received")]
    assert triggers[2] == ("exception", "exception: RuntimeError: the loss is nan during step 3")
    assert len(run_dirs(tmp_path / "flight")) == 3
    assert not touched.exists()


def stuck_in_collective(seconds: float) -> None:
    """A training thread that stops making progress (an allreduce whose peer never comes)."""
    time.sleep(seconds)


def test_a_hang_is_dumped_with_every_threads_python_stack(trainer: Trainer, tmp_path: Path) -> None:
    trainer.run(1)
    with trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, analyse=False, hang_timeout_s=0.5) as recorder:
        for i in range(3):
            trainer.train_step(i)
            recorder.step()
        stuck_in_collective(2.0)
        recorder.wait_for_dumps()
        dumps = recorder.dumps()
    assert [d.trigger for d in dumps] == ["hang"]
    assert "step 3 has not finished" in dumps[0].reason
    stacks = (Path(dumps[0].run_dir) / "hang_stacks.txt").read_text()
    # faulthandler's format: the stuck thread's frames, innermost first, this test among them.
    assert "stuck_in_collective" in stacks and "test_a_hang_is_dumped_with_every_threads_python_stack" in stacks
    # And the native stacks: the main thread is in the C library's sleep (where a collective would be in its library's).
    native = (Path(dumps[0].run_dir) / "native_stacks.txt").read_text()
    main_thread = native[native.index(f"thread {os.getpid()} "):]
    main_thread = main_thread[:main_thread.find("\nthread ") if "\nthread " in main_thread else None]
    assert "clock_nanosleep" in main_thread, native


def flight_info(run_dir: Path) -> dict:
    return json.loads((run_dir / "profiler_info.json").read_text())["flight_recorder"]


def test_trainprof_run_flight_recorder_dumps_the_exception_that_ends_a_script(tmp_path: Path) -> None:
    """No line changed: ``trainprof run --flight-recorder`` records the script
    all the time, writes nothing while it goes well, and writes its last
    steps, analysed, when it fails."""
    script = write_script(tmp_path)
    out = tmp_path / "fine"
    # 9 steps: the slow-step trigger waits for 10, whatever the machine's load.
    result = run(["-m", "trainprof", "run", "--flight-recorder", "--options", json.dumps({"output_path": str(out)}),
                  str(script), "--steps", "9"])
    assert result.returncode == 0, result.stderr
    assert "[trainprof] flight recorder: 9 steps, 0 dumps" in result.stderr
    assert not out.exists()  # not even the directory

    out = tmp_path / "failed"
    options = {"output_path": str(out), "flight_recorder": {"slow_step_factor": 0}}  # only the exception dumps
    result = run(["-m", "trainprof", "run", "--flight-recorder", "--options", json.dumps(options),
                  str(script), "--steps", "12", "--fail"])
    assert result.returncode == 1
    assert "ValueError: the script failed" in result.stderr  # the script's traceback, as before
    assert "[trainprof] flight recorder: 12 steps, 1 dump" in result.stderr
    [dump] = run_dirs(out)
    fired = flight_info(dump)
    assert fired["trigger"] == "exception"
    assert fired["reason"] == "uncaught exception: ValueError: the script failed during step 12"
    # The optimizer's steps, analysed; step 0 is the start-up (imports, set-up, the first batch).
    rows = step_rows(dump)
    assert [int(r["Step"]) for r in rows] == list(range(1, 12))
    # By default (no torch.distributed call recorded) about 1 operator call in
    # 100 is recorded: counts are the recorded ones x 100, the summary says so,
    # and a step's host time is all Computing (its idle time cannot be told
    # from operators not recorded).
    ops = op_statistic(dump)
    assert ops and all(int(r["Count"]) % 100 == 0 for r in ops.values()), ops
    assert "operators sampled: about 1 call in 100 recorded" in trainprof.summary(str(dump))
    assert all(float(r["Free"]) == 0 and float(r["Computing"]) > 0 for r in rows), rows


def test_a_crash_of_a_script_under_trainprof_options_leaves_its_last_steps(tmp_path: Path) -> None:
    """TRAINPROF_OPTIONS' "flight_recorder" and a segmentation fault in native
    code: the process still dies of SIGSEGV, and its last steps are on disk."""
    script = write_script(tmp_path)
    out = tmp_path / "flight"
    options = {"start": True, "output_path": str(out), "flight_recorder": {"ring_mb": 16, "slow_step_factor": 0}}
    result = run([str(script), "--steps", "12", "--segv"], env_options=json.dumps(options))
    assert result.returncode == -signal.SIGSEGV, result.stderr
    [dump] = run_dirs(out)
    fired = flight_info(dump)
    assert fired["trigger"] == "crash"
    assert fired["reason"] == "SIGSEGV (a crash) during step 12"
    # Written as the process died, analysed afterwards.
    analysed = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(dump)], capture_output=True,
                              text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    assert [int(r["Step"]) for r in step_rows(dump)] == list(range(1, 12))
    summary = subprocess.run([sys.executable, "-m", "trainprof", "summary", str(dump)], capture_output=True,
                             text=True, timeout=120)
    assert "flight recorder: SIGSEGV (a crash) during step 12" in summary.stdout


def test_a_fork_child_stepping_leaves_the_parents_recorder_alone(tmp_path: Path) -> None:
    """A child of fork() (a worker made by hand) that steps and stops the
    recorder it inherited: no dump, no watchdog of its own on the parent's
    hang-stacks file, which stays the parent's."""
    with trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, analyse=False, hang_timeout_s=30) as recorder:
        recorder.step()
        stacks_file = recorder._stacks.name
        pid = os.fork()
        if pid == 0:  # the child: whatever happens, it leaves through os._exit
            code = 0
            try:
                for _ in range(3):
                    recorder.step()
                code = 3 if recorder.dump("from the child") is not None else 0
                recorder.stop()
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert os.path.exists(stacks_file)  # the child did not remove the parent's file
        assert recorder.recording
        recorder.step()
        assert recorder.dump("from the parent") is not None
    assert len(run_dirs(tmp_path / "flight")) == 1


def test_sampled_operators_are_scaled_and_said_to_be_sampled(trainer: Trainer, tmp_path: Path) -> None:
    """``sample_operators=5``: about one operator call in 5 is in the dump,
    op_statistic.csv counts them x 5, and the summary says so."""
    with trainprof.flight_recorder(tmp_path / "flight", ring_mb=16, slow_step_factor=0, hang_timeout_s=None,
                                   sample_operators=5) as recorder:
        for i in range(80):
            trainer.train_step(i)
            recorder.step()
        run = Path(recorder.dump("sampled"))
    # 80 conv2d calls: about 16 of them recorded (80 x 1/5; none: 0.8^80, 2e-8), each counted 5 times.
    trace = json.loads((run / "PROFILER_OUTPUT" / "trace_view.json").read_text())
    recorded = sum(1 for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::conv2d")
    assert 0 < recorded < 80
    assert int(op_statistic(run)["aten::conv2d"]["Count"]) == 5 * recorded
    summary = trainprof.summary(str(run))
    assert "  operators sampled: about 1 call in 5 recorded" in summary, summary
    with pytest.raises(ValueError, match="sample_operators"):
        trainprof.flight_recorder(tmp_path / "x", sample_operators=0)


def train_linear(recorder: trainprof.flight_recorder, steps: int, nan_at: int = -1) -> None:
    """A small loop under `recorder`, its loss made NaN at step `nan_at`: the
    loss is what backward() is called on, no line of the loop reports it."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
        if step == nan_at:
            loss = loss * float("nan")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recorder.step()
    recorder.wait_for_dumps()


def numbers_recorder(tmp_path: Path, **settings: Any) -> trainprof.flight_recorder:
    return trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, slow_step_factor=0, hang_timeout_s=None,
                                     dump_signal=None, check_gradients=True, **settings)


def test_a_nan_loss_is_dumped_at_the_step_it_went_wrong(tmp_path: Path) -> None:
    import torch

    original = torch.Tensor.backward
    with numbers_recorder(tmp_path) as recorder:
        train_linear(recorder, 25, nan_at=15)
        dumps = recorder.dumps()
    # The loss first (in backward()), then the gradients it made (before the optimizer's step).
    assert [(d.trigger, d.reason) for d in dumps] == [
        ("non_finite_loss", "the loss is nan at step 15"),
        ("non_finite_gradients", "the gradients' norm is nan at step 15")], dumps
    run = Path(dumps[0].run_dir)
    with open(run / "step_health.csv", newline="") as f:
        rows = {row["Step"]: row for row in csv.DictReader(f)}
    assert rows["15"]["Loss"] == "nan" and float(rows["14"]["Loss"]) > 0, rows["15"]
    assert float(rows["14"]["Gradient Norm"]) > 0, rows["14"]
    steps = {int(r["Step"]) for r in step_rows(run)}
    assert 15 in steps, steps  # the dump waited for the step to end: it holds it whole
    assert torch.Tensor.backward is original  # nothing of the check is left once it stops


def test_a_clean_loop_with_the_numbers_checked_never_dumps(tmp_path: Path) -> None:
    with numbers_recorder(tmp_path, loss_spike_factor=20) as recorder:
        train_linear(recorder, 40)
        assert recorder.dumps() == []
    assert not (tmp_path / "flight").exists() or not run_dirs(tmp_path / "flight")


def test_a_number_that_cannot_be_read_stops_the_check_once_and_training_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A gradient the norm cannot take (a backend without the operator): that
    check says so once and stops; the loss's check, the loop and the
    recording go on."""
    import torch

    def no_norm(tensors: Any) -> Any:
        raise RuntimeError("_foreach_norm is not implemented for this backend")

    original = torch.Tensor.backward
    monkeypatch.setattr(torch, "_foreach_norm", no_norm)
    with numbers_recorder(tmp_path) as recorder:
        train_linear(recorder, 12, nan_at=8)
        assert recorder.recording
        assert [(d.trigger, d.reason) for d in recorder.dumps()] == [
            ("non_finite_loss", "the loss is nan at step 8")]
    said = [r.getMessage() for r in caplog.records if "stops" in r.getMessage()]
    assert said == ["flight recorder: the check of the gradients' norm stops (_foreach_norm is not "
                    "implemented for this backend); recording goes on"], said
    assert torch.Tensor.backward is original


def test_a_clean_loop_recorded_with_sampled_operators_gets_no_finding(tmp_path: Path) -> None:
    """With 1 call in 100 recorded, the time between recorded operators is
    mostly operators not recorded: no function is said to work outside them."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with trainprof.flight_recorder(tmp_path / "flight", ring_mb=8, slow_step_factor=0, hang_timeout_s=None,
                                   dump_signal=None, sample_operators=100) as recorder:
        for _ in range(150):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            recorder.step()
        run = recorder.dump("end of the loop")
    assert run is not None
    assert trainprof.advise(run) == []
    summary = trainprof.summary(run)
    assert "Python outside operators: not attributed (operators are sampled, 1 call in 100 recorded" in summary
    assert not (Path(run) / "PROFILER_OUTPUT" / "python_outside_operators.csv").exists()


def test_sampled_operators_with_communication_asked_for_say_what_is_sampled(tmp_path: Path) -> None:
    """torch.distributed's calls reach trainprof through the operator callbacks:
    sampling them is said, not left for a cluster report to miss collectives."""
    script = tmp_path / "sampled.py"
    script.write_text(
        "import sys, torch, trainprof\n"
        "with trainprof.flight_recorder(sys.argv[1], sample_operators=100, profile_communication=True,\n"
        "                               hang_timeout_s=None, dump_signal=None) as r:\n"
        "    torch.ones(4).add_(1)\n"
        "    r.step()\n")
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "flight")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "sample_operators 100: torch.distributed's calls come through the operator callbacks and are " \
           "sampled with them" in result.stderr, result.stderr
