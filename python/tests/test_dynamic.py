"""Dynamic profiling: ``trainprof.DynamicProfilerMonitor`` and
``TRAINPROF_DYNAMIC_CONFIG``, with the config edited while training runs."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Trainer, op_statistic, run_dirs

import trainprof


def save_config(cfg: Path, **fields: object) -> None:
    """Saves profiler_config.json as an editor that writes a new file and
    renames it over the old one."""
    tmp = cfg / ".edit.tmp"
    tmp.write_text(json.dumps(fields))
    os.replace(tmp, cfg / "profiler_config.json")


def wait_until_read(monitor: trainprof.DynamicProfilerMonitor, before: int) -> None:
    """Waits for the watcher to take the edit (a synchronisation: fails after 30 s)."""
    deadline = time.monotonic() + 30
    while monitor.configs_read == before and time.monotonic() < deadline:
        time.sleep(0.002)
    assert monitor.configs_read > before, "the edited config was never read"


def steps_of(run_dir: Path) -> list[int]:
    with open(run_dir / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return [int(row["Step"]) for row in csv.DictReader(f)]


def test_an_edit_during_training_records_exactly_its_steps(tmp_path: Path, trainer: Trainer) -> None:
    cfg, out = tmp_path / "cfg", tmp_path / "out"
    monitor = trainprof.DynamicProfilerMonitor(cfg, out, poll_interval=0.01)
    defaults = json.loads((cfg / "profiler_config.json").read_text())
    assert defaults["start_step"] == -1 and defaults["stop_step"] == -1  # nothing until edited
    collecting = []
    for i in range(20):
        trainer.train_step(i)
        monitor.step()
        collecting.append(monitor.collecting)
        if i + 1 == 4:
            before = monitor.configs_read
            save_config(cfg, start_step=8, stop_step=11, analyse_mode=0, record_shapes=True,
                        data_simplification=False)
            wait_until_read(monitor, before)
    assert [i + 1 for i, c in enumerate(collecting) if c] == [7, 8, 9, 10]  # after step 7 ends: step 8 recorded
    assert len(monitor.runs) == 1
    run = Path(monitor.runs[0])
    assert run.name.startswith("rank0_start8_stop11_")
    assert run_dirs(out) == [run]
    assert steps_of(run) == [8, 9, 10, 11]
    assert {"aten::conv2d", "aten::addmm"} <= set(op_statistic(run))
    assert (run / "raw").is_dir()  # data_simplification false: kept


def test_bad_arguments_name_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cfg_path"):
        trainprof.DynamicProfilerMonitor(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_interval"):
        trainprof.DynamicProfilerMonitor(tmp_path / "cfg", poll_interval=0)
    with pytest.raises(TypeError, match="poll_interval"):
        trainprof.DynamicProfilerMonitor(tmp_path / "cfg", poll_interval="1")  # type: ignore[arg-type]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="cfg_path"):
        trainprof.DynamicProfilerMonitor(tmp_path / "file" / "cfg")


def test_a_bad_config_keeps_the_one_before(tmp_path: Path, trainer: Trainer,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    cfg, out = tmp_path / "cfg", tmp_path / "out"
    cfg.mkdir()
    save_config(cfg, start_step=3, stop_step=4)
    monitor = trainprof.DynamicProfilerMonitor(cfg, out, poll_interval=0.01)
    before = monitor.configs_read
    save_config(cfg, start_step=3, stop_step="4")
    said, deadline = "", time.monotonic() + 30
    while '"stop_step" must be an integer' not in said and time.monotonic() < deadline:
        time.sleep(0.01)
        said += capfd.readouterr().err
    assert '"stop_step" must be an integer' in said  # reported, naming the field
    assert monitor.configs_read == before
    for i in range(6):
        trainer.train_step(i)
        monitor.step()
    assert len(monitor.runs) == 1 and Path(monitor.runs[0]).name.startswith("rank0_start3_stop4_")


DYNAMIC_SCRIPT = '''
import torch

model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(8):
    loss = model(torch.rand(4, 8)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained")
'''


def test_trainprof_dynamic_config_profiles_an_unmodified_script(tmp_path: Path) -> None:
    """TRAINPROF_DYNAMIC_CONFIG: the .pth file starts a monitor whose steps
    are the optimizer's; the config asks for steps 3 to 5."""
    cfg, out = tmp_path / "cfg", tmp_path / "out"
    cfg.mkdir()
    save_config(cfg, start_step=3, stop_step=5, analyse_mode=0)
    script = tmp_path / "train.py"
    script.write_text(DYNAMIC_SCRIPT)
    env = dict(os.environ, TRAINPROF_DYNAMIC_CONFIG=str(cfg), TRAINPROF_DYNAMIC_OUTPUT=str(out))
    env.pop("TRAINPROF_OPTIONS", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    runs = run_dirs(out)
    assert len(runs) == 1 and runs[0].name.startswith("rank0_start3_stop5_")
    assert steps_of(runs[0]) == [3, 4, 5]
    assert "aten::addmm" in op_statistic(runs[0])
