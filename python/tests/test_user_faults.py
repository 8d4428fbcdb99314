"""What a real training script does to its profiler, tried as users do: a
torch.profiler beside trainprof, file names that are not UTF-8, os.chdir()
while training, stop() inside on_trace_ready. Nothing may raise into the
script, and no cycle may be lost."""

from __future__ import annotations

import csv
import json
import os
import threading
from pathlib import Path

import pytest
from conftest import Trainer, names, op_statistic, run_dirs, torch, trace_events

import trainprof
from trainprof import ProfilerActivity, schedule, tensorboard_trace_handler

SHADOWED = "LibTorch's own profiler was recording on some threads"


def memory_rows(run: Path) -> list[dict]:
    with open(run / "PROFILER_OUTPUT" / "memory_record.csv", newline="") as f:
        return list(csv.DictReader(f))


def torch_aten_events(prof: "torch.profiler.profile") -> list[str]:
    return [e.name for e in prof.events() if e.name.startswith("aten::")]


# ---- torch.profiler and trainprof in one process ----


def test_torch_profiler_starts_inside_a_memory_profile_on_the_same_thread(
        trainer: Trainer, capfd: pytest.CaptureFixture) -> None:
    with trainprof.profile(profile_memory=True, on_trace_ready=tensorboard_trace_handler("tp")):
        trainer.run(1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as tprof:
            trainer.run(1)
        trainer.run(1)
    assert torch_aten_events(tprof), "torch.profiler recorded nothing"
    assert any(e.cpu_memory_usage != 0 for e in tprof.events()), "torch.profiler got no memory reports"
    (run,) = run_dirs(Path("tp"))
    assert int(op_statistic(run)["aten::convolution"]["Count"]) == 3  # both profilers saw every step
    assert len(memory_rows(run)) > 0  # before and after torch's profiler: trainprof's
    err = capfd.readouterr().err
    assert err.count(SHADOWED) == 1, err  # trainprof steps aside for memory, and says so once


def test_memory_profile_starts_inside_torch_profiler(trainer: Trainer) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tprof:
        with trainprof.profile(profile_memory=True, on_trace_ready=tensorboard_trace_handler("tp")):
            trainer.run(2)
    assert torch_aten_events(tprof)
    (run,) = run_dirs(Path("tp"))
    assert int(op_statistic(run)["aten::convolution"]["Count"]) == 2


def test_torch_profiler_on_the_main_thread_after_memory_profiles_in_another_thread(trainer: Trainer) -> None:
    """The main thread trains while another thread starts and stops a
    trainprof memory profile, ten times; then the main thread starts
    torch.profiler, with no allocation in between."""
    for cycle in range(10):
        started, trained = threading.Event(), threading.Event()
        holder: dict = {}

        def control() -> None:
            holder["prof"] = trainprof.profile(profile_memory=True, on_trace_ready=tensorboard_trace_handler("tp"),
                                               start_profile=True)
            started.set()
            trained.wait(60)
            holder["prof"].stop()

        thread = threading.Thread(target=control)
        thread.start()
        assert started.wait(60)
        trainer.run(1)  # the main thread's operators take the memory reporter
        trained.set()
        thread.join(60)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tprof:
            trainer.run(1)
        assert torch_aten_events(tprof), f"cycle {cycle}"
    assert len(run_dirs(Path("tp"))) == 10


# ---- text that is not UTF-8 ----

NOT_UTF8_FILE = os.fsdecode(b"img_\xff.png")  # what os.listdir gives for such a name
LONE_SURROGATE = "half \ud800 pair"


def test_names_that_are_not_utf8_are_recorded_with_replacement_characters(trainer: Trainer) -> None:
    prof = trainprof.profile(on_trace_ready=tensorboard_trace_handler("tp"), start_profile=True)
    with trainprof.record_function(NOT_UTF8_FILE):
        trainer.run(1)

    @trainprof.record_function(LONE_SURROGATE)
    def decorated() -> None:
        trainer.run(1)

    decorated()
    trainprof.mstx.mark(NOT_UTF8_FILE, domain=LONE_SURROGATE)
    trainprof.mstx.range_end(trainprof.mstx.range_start(LONE_SURROGATE))
    prof.add_metadata(NOT_UTF8_FILE, LONE_SURROGATE)
    prof.add_metadata_json(LONE_SURROGATE, json.dumps({"file": NOT_UTF8_FILE}, ensure_ascii=False))
    prof.stop()
    (run,) = run_dirs(Path("tp"))
    events = trace_events(run)
    ranges = names(events, "user_annotation")
    assert "img_\ufffd.png" in ranges and "half \ufffd pair" in ranges
    all_names = {e.get("name") for e in events}
    assert "img_\ufffd.png" in all_names and "half \ufffd pair" in all_names  # the marker and the mstx range
    with open(run / "profiler_metadata.json", encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["img_\ufffd.png"] == "half \ufffd pair"
    assert metadata["half \ufffd pair"] == {"file": "img_\ufffd.png"}


def test_analyse_and_summary_take_any_path_the_os_accepts(tmp_path: Path, trainer: Trainer) -> None:
    root = tmp_path / os.fsdecode(b"runs_\xff")
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(root, analyse_flag=False)):
        trainer.run(1)
    report = trainprof.analyse(root)
    assert report.ok, report.error
    (run,) = report.runs
    assert run.ok, run.error
    assert Path(run.run_dir).parent == root  # the bytes of the name come back as os.fsdecode gives them
    assert (Path(run.run_dir) / "PROFILER_OUTPUT" / "op_statistic.csv").is_file()
    text = trainprof.summary(root)
    assert "runs_\\xff" in text and "aten::convolution" in text
    assert trainprof.analyse(os.fsencode(root)).ok  # bytes too


# ---- os.chdir() while training ----


def test_a_chdir_while_training_loses_no_cycle(tmp_path: Path, trainer: Trainer) -> None:
    start = Path.cwd()
    (tmp_path / "elsewhere").mkdir()
    with trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
                           on_trace_ready=tensorboard_trace_handler("./prof")) as prof:
        for step in range(4):
            if step == 1:
                os.chdir(tmp_path / "elsewhere")
            trainer.run(1)
            prof.step()
    runs = run_dirs(start / "prof")
    assert len(runs) == 2
    for run in runs:
        assert (run / "PROFILER_OUTPUT" / "op_statistic.csv").is_file(), run
    assert not (tmp_path / "elsewhere" / "prof").exists()


def test_the_default_output_path_is_resolved_when_the_profile_is_made(tmp_path: Path, trainer: Trainer) -> None:
    start = Path.cwd()
    prof = trainprof.profile(start_profile=True)
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    os.chdir(tmp_path / "elsewhere")
    trainer.run(1)
    prof.stop()
    assert prof.last_run_dir is not None and Path(prof.last_run_dir).parent == start / "data"


# ---- stop() inside on_trace_ready ----


def test_steps_after_a_stop_in_on_trace_ready_are_said_once(trainer: Trainer,
                                                            capfd: pytest.CaptureFixture) -> None:
    prof = trainprof.profile(schedule=schedule(wait=0, warmup=1, active=1),
                             on_trace_ready=lambda p: p.stop(), start_profile=True)
    for _ in range(6):
        trainer.run(1)
        prof.step()
    err = capfd.readouterr().err
    assert err.count("step() called while the profiler is stopped") == 1, err
    prof.start()
    prof.stop()
    prof.step()  # said again after a new start()
    assert capfd.readouterr().err.count("step() called while the profiler is stopped") == 1


# ---- the command line ----


def trainprof_command(*args: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True, text=True, timeout=120,
                          errors="backslashreplace")


def test_every_command_names_a_missing_path_the_same_way(tmp_path: Path) -> None:
    missing = str(tmp_path / "no such dir")
    said = set()
    for command in ("analyse", "summary", "report"):
        result = trainprof_command(command, missing)
        assert result.returncode != 0, command
        said.add(result.stderr.strip().splitlines()[0])
    assert said == {f"trainprof: '{missing}' does not exist"}
    for call in (trainprof.analyse, trainprof.summary):
        with pytest.raises(ValueError, match="does not exist"):
            call(missing)


def test_the_summarys_command_hints_paste_into_a_shell(tmp_path: Path, trainer: Trainer) -> None:
    import shlex
    root = tmp_path / "it's a $dir"
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(root)):
        trainer.run(1)
    (run,) = run_dirs(root)
    line = next(l for l in trainprof.summary(root).splitlines() if "trainprof report" in l)
    command = line.split(": ", 1)[1]
    assert shlex.split(command) == ["trainprof", "report", str(run)]
