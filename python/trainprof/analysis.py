# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``trainprof.analyse``: raw runs to the timeline and the tables (offline)."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sqlite3
from typing import Any, Optional, Sequence, Union

from . import _trainprof
from ._validate import check_bool, check_int, check_step_list
from ._export_type import ExportType, _check_export_type

_log = logging.getLogger("trainprof")


def _default_process_number() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


def analyse(profiler_path: Union[str, "os.PathLike[str]"], max_process_number: Optional[int] = None,
            pretty: bool = False, step_list: Optional[Sequence[int]] = None,
            data_simplification: bool = False,
            export_type: Optional[Sequence[Union[str, "ExportType"]]] = None) -> _trainprof.AnalyseReport:
    """Analyses every run directory at or below ``profiler_path``, as
    mindspore.profiler.analyse (and ``trainprof analyse PATH``).

    Each run is analysed in its own worker process, at most
    ``max_process_number`` at once, so that one failing run does not stop the
    others. Outputs go to ``{run}/PROFILER_OUTPUT/``: trace_view.json,
    op_statistic.csv, operator_details.csv, step_trace_time.csv, ...

    Args:
        profiler_path: one run directory or any directory above runs.
        max_process_number: worker processes (default: cores / 2, at least 1).
        pretty: indent the JSON outputs.
        step_list: only these consecutive step numbers (default: all steps).
        data_simplification: remove each run's raw data once it is analysed.
        export_type: ``["text"]`` (default: trace_view.json and the CSV
            tables), ``["db"]`` (PROFILER_OUTPUT/trainprof.db, SQLite) or both.

    Returns:
        The report: ``ok``, ``error`` (nothing analysed) and ``runs`` (each
        with ``run_dir``, ``ok``, ``error``, ``warnings``, ``events``).
        Failures are also logged.

    Any path the OS accepts may be given, its name UTF-8 or not (as
    ``os.fsdecode`` gives it, or bytes).

    Raises:
        TypeError, ValueError: a wrong argument (named), or a
            ``profiler_path`` that does not exist (the message of
            ``trainprof analyse``; one that holds no run is the report's
            ``error``).
    """
    path = _existing_path(profiler_path)
    workers = _default_process_number() if max_process_number is None else check_int(
        "max_process_number", max_process_number, 1)
    kinds = _check_export_type(export_type)
    report = _trainprof.analyse(path, workers, check_bool("pretty", pretty), check_step_list("step_list", step_list),
                                check_bool("data_simplification", data_simplification),
                                ExportType.Text in kinds, ExportType.Db in kinds)
    if report.error:
        _log.error("analyse(%r): %s", path, report.error)
    for run in report.runs:
        if not run.ok:
            _log.error("analysis of %s failed: %s", run.run_dir, run.error)
    return report


def summary(profiler_path: Union[str, "os.PathLike[str]"]) -> str:
    """What ``trainprof summary PATH`` prints: for each analysed run at or
    below ``profiler_path``, the top operators and ranges by self time, the
    time of each step (computing, free, peak memory), the data pipeline's
    stages and where the output files are.

    Bytes of a path that are not UTF-8 show as ``\\xNN`` in the text.

    Raises:
        TypeError: ``profiler_path`` is not a str, bytes or os.PathLike.
        ValueError: no run directory at or below it (the message of
            ``trainprof summary``).
    """
    path = _existing_path(profiler_path)
    runs = _trainprof.find_run_directories(path)
    if not runs:
        raise ValueError(f"profiler_path: {_trainprof.no_run_directory_error(path)}")
    return "".join(_trainprof.summarize_run(run) for run in runs)


def advise(profiler_path: Union[str, "os.PathLike[str]"]) -> list[dict[str, Any]]:
    """What ``trainprof advise PATH`` finds: what to change, the largest
    saving first. Each finding is a dict with ``rule``, ``title``,
    ``evidence``, ``change``, ``step_ms`` (the median step), ``saving_ms``
    (per step; -1 when not estimated), ``saving_basis`` ("re-timed: ..." or
    "at most: ..."), ``cause`` (a straggler's: "compute", "data loading",
    "communication", "host work outside operators" or "unknown"; "" for
    other rules), ``ranks`` and ``run``; the rules are in docs/ADVICE.md.
    Runs not analysed yet are analysed first; several ranks' runs also get
    the cluster's findings (the straggler, slow links).

    Raises:
        TypeError: ``profiler_path`` is not a str, bytes or os.PathLike.
        ValueError: no run directory at or below it, or none analysable.
    """
    path = _existing_path(profiler_path)
    findings, error, warnings, _ = _trainprof.advise(path)
    for w in warnings:
        _log.warning("advise(%r): %s", path, w)
    if error:
        raise ValueError(f"profiler_path: {error}")
    result: list[dict[str, Any]] = json.loads(findings)
    return result


def open_cluster_database(path: Union[str, "os.PathLike[str]"]) -> sqlite3.Connection:
    """Opens a cluster's trainprof.db read-only, as ``trainprof sql`` does:
    a cluster pass spread over MPI processes splits the communication table
    of a large job over part files beside it (``trainprof.db.part1``, ...;
    trainprof.db's ``database_parts`` table names them); they are attached
    and joined into one temporary view ``communication``, so that queries
    read as on one file (each file's indexes still serve them).

    Args:
        path: the database, or a directory holding it or holding
            ``cluster_analysis_output/trainprof.db``.

    Returns:
        A ``sqlite3.Connection`` (close it when done).

    Raises:
        TypeError: ``path`` is not a str or os.PathLike.
        ValueError: not a cluster database, or a part missing, damaged or
            left by another cluster pass (named; run ``trainprof cluster``
            again).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    file = os.fspath(path)
    if os.path.isdir(file):
        here = os.path.join(file, "trainprof.db")
        file = here if os.path.isfile(here) else os.path.join(file, "cluster_analysis_output", "trainprof.db")
    if not os.path.isfile(file):
        raise ValueError(f"path: no cluster trainprof.db at {file}")

    def read_only(name: str) -> str:
        return pathlib.Path(name).resolve().as_uri() + "?mode=ro"

    db = sqlite3.connect(read_only(file), uri=True)
    try:
        if db.execute("SELECT name FROM sqlite_master WHERE name = 'database_parts'").fetchone() is None:
            return db  # one file (a run's, an earlier pass's): nothing to join
        try:
            parts = [row[0] for row in db.execute("SELECT file FROM database_parts ORDER BY part")]
            passes = [row[0] for row in db.execute("SELECT value FROM run_info WHERE key = 'database_pass'")]
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{file} is not a cluster trainprof.db: {e}") from None
        if parts and len(passes) != 1:
            raise ValueError(f"{file} names its parts but not its pass")
        view = "CREATE TEMP VIEW communication AS SELECT * FROM main.communication"
        for number, part in enumerate(parts, start=1):
            # Only the names a pass writes are opened, beside the database.
            if number >= _MAX_DATABASE_PARTS or part != f"trainprof.db.part{number}":
                raise ValueError(f"{file} names an unexpected part {part!r}")
            part_path = os.path.join(os.path.dirname(file), part)
            try:
                db.execute("ATTACH DATABASE ? AS ?", (read_only(part_path), f"part{number}"))
                found = [row[0] for row in db.execute(f"SELECT value FROM part{number}.part_info WHERE key = 'pass'")]
            except sqlite3.DatabaseError as e:
                raise ValueError(f"cannot read {part_path} (part of {file}): {e}") from None
            if found != passes:
                raise ValueError(f"{part_path} is a part of another cluster pass than {file}: "
                                 "run the cluster pass again")
            view += f" UNION ALL SELECT * FROM part{number}.communication"
        db.execute(view)
    except BaseException:
        db.close()
        raise
    return db


# trainprof.db and its parts: SQLite attaches at most 10 files by default.
_MAX_DATABASE_PARTS = 8


def _existing_path(profiler_path: Any) -> Union[str, bytes]:
    """``profiler_path`` as a str or bytes that exists; else TypeError, or
    ValueError with the CLI's message."""
    if not isinstance(profiler_path, (str, bytes, os.PathLike)):
        raise TypeError(f"profiler_path must be a str, bytes or os.PathLike, got {type(profiler_path).__name__}")
    path = os.fspath(profiler_path)
    if not os.path.exists(path):
        raise ValueError(f"profiler_path: {_trainprof.no_run_directory_error(path)}")
    return path
