"""export_type "db": PROFILER_OUTPUT/trainprof.db, a real SQLite database,
queried with Python's sqlite3 module; its answers equal the CSV tables'."""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import trainprof
from conftest import Trainer, op_statistic, run_dirs
from trainprof import ExportType, ProfilerActivity, schedule, tensorboard_trace_handler


def test_profile_with_both_export_types_writes_a_database_that_agrees(tmp_path: Path, trainer: Trainer) -> None:
    out = tmp_path / "prof"
    config = trainprof._ExperimentalConfig(export_type=[ExportType.Text, ExportType.Db])
    with trainprof.profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                           on_trace_ready=tensorboard_trace_handler(out), record_shapes=True, with_modules=True,
                           experimental_config=config) as prof:
        trainer.run(4, prof.step)
    (run,) = run_dirs(out)
    stats = op_statistic(run)
    db = sqlite3.connect(run / "PROFILER_OUTPUT" / "trainprof.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    for name in ("aten::conv2d", "aten::addmm", "ConvolutionBackward0"):
        calls, total_ns = db.execute(
            "SELECT COUNT(*), SUM(end_ns - start_ns) FROM slices JOIN strings ON strings.id = slices.name_id "
            "WHERE strings.value = ? AND kind = 1", (name,)).fetchone()
        assert calls == int(stats[name]["Count"]), name
        assert abs(total_ns / 1000 - float(stats[name]["Total Time(us)"])) < 0.002, name
    # What conv2d was called with, as operator_details.csv says.
    with open(run / "PROFILER_OUTPUT" / "operator_details.csv", newline="") as f:
        details = [row for row in csv.DictReader(f) if row["Name"] == "aten::conv2d"]
    assert details
    rows = db.execute(
        "SELECT DISTINCT i.input_shapes, i.module FROM slices JOIN strings ON strings.id = slices.name_id "
        "JOIN operator_inputs i ON i.inputs_id = slices.inputs_id WHERE strings.value = 'aten::conv2d'").fetchall()
    assert sorted(rows) == sorted((d["Input Shapes"], d["Module Hierarchy"] or None) for d in details)
    assert any("[32, 1, 28, 28]" in shapes or "[32,1,28,28]" in shapes for shapes, _ in rows)
    # The top operators of one step, the schema's first example query.
    top = db.execute(
        "SELECT strings.value, COUNT(*) FROM slices JOIN strings ON strings.id = slices.name_id "
        "WHERE step = 2 AND kind = 1 GROUP BY name_id ORDER BY SUM(end_ns - start_ns) DESC LIMIT 5").fetchall()
    assert len(top) == 5 and all(calls >= 1 for _, calls in top)


def test_offline_analyse_db_only_writes_no_csv(tmp_path: Path, trainer: Trainer) -> None:
    out = tmp_path / "prof"
    with trainprof.profile(activities=[ProfilerActivity.CPU],
                           on_trace_ready=tensorboard_trace_handler(out, analyse_flag=False)):
        trainer.run(2)
    (run,) = run_dirs(out)
    assert not (run / "PROFILER_OUTPUT").exists()
    report = trainprof.analyse(out, export_type=["db"])
    assert report.ok
    assert (run / "PROFILER_OUTPUT" / "trainprof.db").exists()
    assert not (run / "PROFILER_OUTPUT" / "op_statistic.csv").exists()
    assert not (run / "PROFILER_OUTPUT" / "trace_view.json").exists()
    db = sqlite3.connect(run / "PROFILER_OUTPUT" / "trainprof.db")
    assert db.execute("SELECT COUNT(*) FROM slices WHERE kind = 1").fetchone()[0] > 0
