"""Recording real training: context manager, start/stop/step, schedules,
on_trace_ready, metadata; aten operators in the analysed outputs."""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import Trainer, names, op_statistic, run_dirs, torch, trace_events

import trainprof
from trainprof import ProfilerAction, ProfilerActivity, schedule, tensorboard_trace_handler


def test_torch_collector_is_loaded() -> None:
    assert trainprof.torch_collector_status() is None


def test_context_manager_with_schedule_writes_one_analysed_run_per_cycle(tmp_path: Path, trainer: Trainer) -> None:
    out = tmp_path / "prof"
    with trainprof.profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                           on_trace_ready=tensorboard_trace_handler(out), record_shapes=True) as prof:
        trainer.run(10, prof.step)
    runs = run_dirs(out)
    assert len(runs) == 2
    for run in runs:
        events = trace_events(run)
        cpu_ops = names(events, "cpu_op")
        assert "aten::conv2d" in cpu_ops and "aten::addmm" in cpu_ops
        assert any(n.endswith("Backward0") for n in cpu_ops)  # autograd nodes
        steps = [n for n in names(events, "user_annotation") if n.startswith("ProfilerStep#")]
        assert len(steps) == 2  # the active steps of this cycle only
        conv = next(e for e in events if e.get("name") == "aten::conv2d")
        assert conv["args"]["Input Dims"][0] == [32, 1, 28, 28]  # record_shapes
        stats = op_statistic(run)
        assert int(stats["aten::conv2d"]["Count"]) == 2  # once per recorded step
        assert (run / "PROFILER_OUTPUT" / "step_trace_time.csv").exists()
    assert [n for n in names(trace_events(runs[0]), "user_annotation") if n.startswith("ProfilerStep#")] == [
        "ProfilerStep#2", "ProfilerStep#3"]
    assert prof.last_run_dir == str(runs[-1])


def test_start_step_stop_object(tmp_path: Path, trainer: Trainer) -> None:
    prof = trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                             on_trace_ready=tensorboard_trace_handler(tmp_path / "p", worker_name="rank0"),
                             start_profile=False)
    assert prof.current_action is ProfilerAction.NONE
    prof.start()
    assert prof.current_action is ProfilerAction.WARMUP
    trainer.run(3, prof.step)
    assert prof.step_num == 3
    prof.stop()
    (run,) = run_dirs(tmp_path / "p")
    assert run.name.startswith("rank0_")
    assert "aten::conv2d" in op_statistic(run)


def test_without_schedule_start_to_stop_is_one_run_in_data(trainer: Trainer) -> None:
    prof = trainprof.profile()  # start_profile=True: recording from here
    prof.start()  # torch's idiom: accepted silently
    trainer.run(2)
    prof.stop()
    (run,) = run_dirs(Path("data"))
    assert (run / "raw").is_dir()
    assert not (run / "PROFILER_OUTPUT").exists()  # no on_trace_ready: analysed later
    report = trainprof.analyse("data")
    assert report.ok and len(report.runs) == 1
    assert "aten::conv2d" in op_statistic(run)


def test_misuse_is_logged_never_raised(trainer: Trainer, capfd: pytest.CaptureFixture) -> None:
    prof = trainprof.profile(start_profile=False)
    prof.stop()
    prof.step()
    prof.start()
    prof.start()
    trainer.run(1)
    prof.stop()
    err = capfd.readouterr().err
    assert "stop() called while the profiler is not started" in err
    assert "step() called while the profiler is stopped" in err
    assert "start() called while the profiler is already started" in err


def test_on_trace_ready_gets_the_profile_and_its_errors_do_not_stop_training(
        trainer: Trainer, caplog: pytest.LogCaptureFixture) -> None:
    seen = []

    def ready(prof: trainprof.profile) -> None:
        seen.append(prof.last_run_dir)
        raise RuntimeError("callback bug")

    with caplog.at_level(logging.ERROR, logger="trainprof"):
        with trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=2), on_trace_ready=ready) as prof:
            trainer.run(5, prof.step)
    assert len(seen) == 2 and all(Path(d).is_dir() for d in seen)
    assert "on_trace_ready raised" in caplog.text


def test_handler_called_inside_a_callback_analyses_the_run(tmp_path: Path, trainer: Trainer) -> None:
    handler = tensorboard_trace_handler(tmp_path)

    def ready(prof: trainprof.profile) -> None:
        handler(prof)

    with trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=1), on_trace_ready=ready) as prof:
        trainer.run(3, prof.step)
    (run,) = run_dirs(Path("data"))
    assert "aten::conv2d" in op_statistic(run)


def test_metadata_lands_in_profiler_metadata_json(trainer: Trainer, caplog: pytest.LogCaptureFixture) -> None:
    with trainprof.profile() as prof:
        prof.add_metadata("model", "cnn")
        prof.add_metadata_json("config", '{"lr": 0.05, "layers": [1, 4]}')
        prof.add_metadata("model", "cnn-v2")  # overrides, with a warning
        prof.add_metadata("bad", 3)  # logged, skipped
        trainer.run(1)
    (run,) = run_dirs(Path("data"))
    metadata = json.loads((run / "profiler_metadata.json").read_text())
    assert metadata == {"model": "cnn-v2", "config": {"lr": 0.05, "layers": [1, 4]}}
    assert "value must be a str" in caplog.text


def test_profile_memory_and_flops(tmp_path: Path, trainer: Trainer) -> None:
    with trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=1), profile_memory=True,
                           with_flops=True, on_trace_ready=tensorboard_trace_handler(tmp_path)) as prof:
        trainer.run(3, prof.step)
    (run,) = run_dirs(tmp_path)
    with open(run / "PROFILER_OUTPUT" / "operator_memory.csv", newline="") as f:
        allocations = list(csv.DictReader(f))
    # torch 2.x's allocator reports reach the operator that allocated
    assert any(row["Name"].startswith("aten::") and float(row["Size(KB)"]) > 0 for row in allocations)
    assert int(op_statistic(run)["aten::addmm"]["Total FLOPs"]) == 2 * 32 * 676 * 10


def test_level_none_records_no_operators(trainer: Trainer) -> None:
    config = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.LevelNone)
    with trainprof.profile(experimental_config=config):
        with trainprof.record_function("step"):
            trainer.run(1)
    (run,) = run_dirs(Path("data"))
    trainprof.analyse(run)
    events = trace_events(run)
    assert names(events, "cpu_op") == []
    assert "step" in names(events, "user_annotation")


def test_operators_of_every_python_thread_are_recorded(trainer: Trainer) -> None:
    def side_work() -> None:
        with trainprof.record_function("side_thread"):
            torch.ones(8, 8).matmul(torch.ones(8, 8))

    with trainprof.profile():
        worker = threading.Thread(target=side_work)
        worker.start()
        trainer.run(1)
        worker.join()
    (run,) = run_dirs(Path("data"))
    trainprof.analyse(run)
    events = trace_events(run)
    side = next(e for e in events if e["name"] == "side_thread")
    conv = next(e for e in events if e["name"] == "aten::conv2d")
    assert side["tid"] != conv["tid"]
    assert any(e["name"] == "aten::matmul" and e["tid"] == side["tid"] for e in events)


def test_async_trace_handler_analyses_in_a_child_process(tmp_path: Path, trainer: Trainer) -> None:
    handler = tensorboard_trace_handler(tmp_path, async_mode=True)
    with trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=1), on_trace_ready=handler) as prof:
        trainer.run(3, prof.step)
    (run,) = run_dirs(tmp_path)
    stats = run / "PROFILER_OUTPUT" / "op_statistic.csv"
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while not stats.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "aten::conv2d" in op_statistic(run)


CTRL_C_DURING_TRAINING = """
import os, signal, torch, trainprof
model = torch.nn.Linear(8, 8)
try:
    with trainprof.profile(schedule=trainprof.schedule(wait=0, warmup=1, active=100),
                           on_trace_ready=trainprof.tensorboard_trace_handler("out")) as prof:
        for step in range(1000):
            model(torch.randn(4, 8)).sum().backward()
            if step == 5:
                os.kill(os.getpid(), signal.SIGINT)
            prof.step()
except KeyboardInterrupt:
    print("KeyboardInterrupt at step", prof.step_num)
"""


def test_ctrl_c_reaches_the_training_loop_and_the_run_is_analysed(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", CTRL_C_DURING_TRAINING], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "KeyboardInterrupt at step" in result.stdout
    (run,) = run_dirs(tmp_path / "out")
    assert "aten::addmm" in op_statistic(run)
