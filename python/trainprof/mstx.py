# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Markers and cross-thread ranges, as mindspore.profiler.mstx / torch_npu's mstx.

    trainprof.mstx.mark("checkpoint saved")
    range_id = trainprof.mstx.range_start("allreduce", domain="comm")
    ...                                   # may end on another thread
    trainprof.mstx.range_end(range_id)

Domains can be filtered with ``_ExperimentalConfig(mstx_domain_include=...)``
or ``mstx_domain_exclude``. Markers go on the host timeline; ``stream`` is
accepted for compatibility and not used (no device collector yet). These
functions never raise: a wrong argument is logged and the call does nothing;
a text that is not valid UTF-8 is recorded with U+FFFD in place of each
character UTF-8 cannot carry (lone surrogates, as ``os.fsdecode`` makes).
"""

from __future__ import annotations

import logging
from typing import Any

from . import _trainprof
from ._validate import utf8_text

_log = logging.getLogger("trainprof")

__all__ = ["mark", "range_start", "range_end"]


def _valid(function: str, **texts: Any) -> bool:
    for name, value in texts.items():
        if not isinstance(value, str) or not value or "\0" in value:
            _log.error("mstx.%s: %s must be a non-empty str without NUL, got %r; ignored", function, name, value)
            return False
    return True


def mark(message: str, stream: Any = None, domain: str = "default") -> None:
    """Records an instant marker ``message`` in ``domain``."""
    if _valid("mark", message=message, domain=domain):
        _trainprof.mark(utf8_text(message), utf8_text(domain))


def range_start(message: str, stream: Any = None, domain: str = "default") -> int:
    """Starts a range that ``range_end`` ends, on any thread. Returns its id,
    0 when it is not recorded (no profile records, or its domain is filtered
    out, or a wrong argument)."""
    if not _valid("range_start", message=message, domain=domain):
        return 0
    return _trainprof.range_start(utf8_text(message), utf8_text(domain))


def range_end(range_id: int, domain: str = "default") -> None:
    """Ends the range ``range_id`` (0 does nothing). ``domain`` is accepted
    for compatibility: the id alone names the range."""
    if isinstance(range_id, bool) or not isinstance(range_id, int) or not 0 <= range_id < 2**64:
        _log.error("mstx.range_end: range_id must be an id returned by range_start, got %r; ignored", range_id)
        return
    _trainprof.range_end(range_id)
