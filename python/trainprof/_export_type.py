# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""The analysis's output formats, and the check of an ``export_type`` argument:
shared by the profiler classes and ``trainprof.analyse``, which imports no
profiler module."""

from __future__ import annotations

import enum
from typing import Optional, Sequence, Union


class ExportType(enum.Enum):
    """Output formats of the analysis (mindspore.profiler's names): ``Text``
    (trace_view.json and the CSV tables) and ``Db`` (PROFILER_OUTPUT/trainprof.db,
    a SQLite database: docs/DB_SCHEMA.md)."""

    Text = "text"
    Db = "db"


def _check_export_type(export_type: Optional[Sequence[Union[ExportType, str]]]) -> list[ExportType]:
    if export_type is None:
        return [ExportType.Text]
    if not isinstance(export_type, (list, tuple)):
        raise TypeError(f"export_type must be a list of ExportType, got {type(export_type).__name__}")
    kinds: list[ExportType] = []
    for item in export_type:
        try:
            kind = item if isinstance(item, ExportType) else ExportType(item)
        except ValueError:
            raise ValueError(f"export_type: unknown format {item!r} (known: 'text', 'db')") from None
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        raise ValueError("export_type must name at least one format ('text', 'db')")
    return kinds
