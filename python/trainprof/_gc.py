# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Python's garbage collections as ranges: ``gc.collect (generation N)``.

While a profile records host activity, each collection the interpreter makes
(automatic or ``gc.collect()``) is timed through ``gc.callbacks`` and
recorded as a range on the thread that triggered it, followed by a mark in
domain ``gc`` with the objects it collected. The advisor's ``gc_pauses``
rule reads the ranges (docs/ADVICE.md). Outside a recording the callback
costs a call and a flag check per collection.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from . import _trainprof
from ._ranges import _begin, _end

_NAMES = [_trainprof.RangeName(f"gc.collect (generation {g})") for g in range(3)]
_local = threading.local()


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    try:
        if phase == "start":
            _local.start = _begin()
            return
        start = getattr(_local, "start", 0)
        _local.start = 0
        if not start:  # nothing was recording when it began
            return
        generation = info.get("generation", 2)
        _end(_NAMES[generation if generation in (0, 1, 2) else 2], start)
        _trainprof.mark(
            f"collected {info.get('collected', 0)} objects, "
            f"{info.get('uncollectable', 0)} uncollectable (generation {generation})",
            "gc",
        )
    except Exception:  # a collection never fails because of the profiler
        pass


def install() -> None:
    """Starts timing collections (once, however many profiles start)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def remove() -> None:
    """Stops timing collections."""
    while _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)
