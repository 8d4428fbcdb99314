"""record_function, mstx markers and ranges, and offline analysis."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import Trainer, names, op_statistic, run_dirs, trace_events

import trainprof
from trainprof import mstx


def record(body, **profile_kwargs) -> Path:
    """Runs ``body`` under a profile, analyses the run and returns it."""
    with trainprof.profile(**profile_kwargs):
        body()
    (run,) = run_dirs(Path("data"))
    assert trainprof.analyse(run).ok
    return run


def test_record_function_as_context_manager_and_decorator(trainer: Trainer) -> None:
    @trainprof.record_function("train_step")
    def train_step(i: int) -> float:
        return trainer.train_step(i)

    def body() -> None:
        for i in range(3):
            with trainprof.record_function("forward_and_backward"):
                train_step(i)

    run = record(body)
    stats = op_statistic(run)
    assert int(stats["train_step"]["Count"]) == 3
    assert int(stats["forward_and_backward"]["Count"]) == 3
    events = trace_events(run)
    outer = next(e for e in events if e["name"] == "forward_and_backward")
    inner = next(e for e in events if e["name"] == "train_step")
    assert outer["cat"] == inner["cat"] == "user_annotation"
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    assert train_step.__name__ == "train_step"  # functools.wraps


def test_record_function_decorator_on_a_recursive_function() -> None:
    @trainprof.record_function("fib")
    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    run = record(lambda: fib(5))
    assert int(op_statistic(run)["fib"]["Count"]) == 15


def test_record_function_records_nothing_while_no_profile_records(trainer: Trainer) -> None:
    with trainprof.record_function("before"):
        trainer.train_step(0)
    run = record(lambda: None)
    assert "before" not in op_statistic(run)


def test_record_function_with_a_bad_name_does_not_raise(caplog: pytest.LogCaptureFixture) -> None:
    def body() -> None:
        with trainprof.record_function(42):  # type: ignore[arg-type]
            pass

    run = record(body)
    assert "42" in op_statistic(run)
    assert "name must be a str" in caplog.text


def test_mstx_mark_and_cross_thread_range() -> None:
    def body() -> None:
        mstx.mark("checkpoint", domain="io")
        range_id = mstx.range_start("allreduce", domain="comm")
        assert range_id != 0
        worker = threading.Thread(target=mstx.range_end, args=(range_id,))
        worker.start()
        worker.join()

    events = trace_events(record(body))
    mark = next(e for e in events if e["name"] == "checkpoint")
    assert mark["ph"] == "i" and mark["args"]["domain"] == "io"
    assert any(e["name"] == "allreduce" and e.get("dur", 0) >= 0 for e in events)


def test_mstx_domain_filter() -> None:
    config = trainprof._ExperimentalConfig(mstx=True, mstx_domain_exclude=["noisy"])

    def body() -> None:
        mstx.mark("kept", domain="default")
        mstx.mark("dropped", domain="noisy")
        assert mstx.range_start("dropped_range", domain="noisy") == 0

    recorded = {e["name"] for e in trace_events(record(body, experimental_config=config))}
    assert "kept" in recorded and "dropped" not in recorded and "dropped_range" not in recorded


def test_mstx_bad_arguments_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="trainprof"):
        mstx.mark(None)  # type: ignore[arg-type]
        assert mstx.range_start("", domain="x") == 0
        mstx.range_end("abc")  # type: ignore[arg-type]
        mstx.range_end(0)  # 0: a range that was not recorded, silently
    assert "mstx.mark: message must be" in caplog.text
    assert "mstx.range_start: message must be" in caplog.text
    assert "mstx.range_end: range_id must be" in caplog.text


def test_analyse_offline_with_step_list(tmp_path: Path, trainer: Trainer) -> None:
    out = tmp_path / "prof"
    handler = trainprof.tensorboard_trace_handler(out, analyse_flag=False)
    with trainprof.profile(schedule=trainprof.schedule(wait=0, warmup=1, active=4, repeat=1),
                           on_trace_ready=handler) as prof:
        trainer.run(6, prof.step)
    (run,) = run_dirs(out)
    assert not (run / "PROFILER_OUTPUT").exists()
    report = trainprof.analyse(out, max_process_number=1, pretty=True, step_list=[2, 3])
    assert report.ok and [r.run_dir for r in report.runs] == [str(run)]
    steps = [n for n in names(trace_events(run), "user_annotation") if n.startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert (run / "PROFILER_OUTPUT" / "trace_view.json").read_text().startswith("{\n")  # pretty


def test_analyse_reports_a_directory_without_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    report = trainprof.analyse(tmp_path)
    assert not report.ok and report.error
    assert "analyse(" in caplog.text


def test_trainprof_command_is_installed(trainer: Trainer) -> None:
    record(lambda: trainer.run(1))
    command = Path(sys.executable).parent / "trainprof"
    summary = subprocess.run([str(command), "summary", "data"], capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    assert "top by self time" in summary.stdout and "aten::" in summary.stdout
