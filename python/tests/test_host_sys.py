"""Host system usage: ``_ExperimentalConfig(host_sys=...)`` samples the host
while a real training loop runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import Trainer, run_dirs

import trainprof
from trainprof import HostSystem, _ExperimentalConfig, tensorboard_trace_handler


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_host_sys_writes_the_tables_of_the_parts_asked(tmp_path: Path, trainer: Trainer) -> None:
    out = tmp_path / "prof"
    config = _ExperimentalConfig(host_sys=[HostSystem.CPU, "mem"], host_sys_interval_ms=10)
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler(out), experimental_config=config) as prof:
        for i in range(30):
            trainer.train_step(i)
            prof.step()
    run = run_dirs(out)[0]
    output = run / "PROFILER_OUTPUT"
    cpu = rows(output / "host_cpu_usage.csv")
    assert len(cpu) >= 2
    assert all(0 <= float(r["Host CPU (%)"]) <= 100 for r in cpu)
    assert all(float(r["Process CPU (%)"]) >= 0 for r in cpu)
    mem = rows(output / "host_mem_usage.csv")
    assert all(float(r["Host memory used (MiB)"]) <= float(r["Host memory total (MiB)"]) for r in mem)
    assert all(float(r["Process RSS (MiB)"]) > 50 for r in mem)  # torch alone is more
    assert not (output / "host_disk_usage.csv").exists() and not (output / "host_network_usage.csv").exists()
    info = json.loads((output / "profiler_info.json").read_text())
    assert info["analysis"]["host"]["cpu_samples"] == len(cpu)
    assert sorted(info["options"]["host_sys"]) == ["cpu", "mem"]
    assert "host:" in trainprof.summary(str(run))


def test_bad_host_sys_names_the_parameter() -> None:
    with pytest.raises(ValueError, match="host_sys"):
        _ExperimentalConfig(host_sys=["gpu"])
    with pytest.raises(TypeError, match="host_sys"):
        _ExperimentalConfig(host_sys="cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host_sys_interval_ms"):
        _ExperimentalConfig(host_sys=["cpu"], host_sys_interval_ms=0)
