# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``trainprof.record_function``: a named range of host time."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional, TypeVar

from . import _trainprof
from ._validate import utf8_text

_log = logging.getLogger("trainprof")

F = TypeVar("F", bound=Callable[..., Any])

_begin = _trainprof.begin_range
_end = _trainprof.end_range
# Interned names by text: a name used again costs a dict lookup, not a
# round trip to the core's string table (bounded: names built per call,
# such as f"batch {i}", stop being cached past it).
_NAMES: dict[str, _trainprof.RangeName] = {}
_MAX_CACHED_NAMES = 4096


def _intern(name: Any) -> _trainprof.RangeName:
    """The core's interned name for ``name`` (a non-str is logged and used as str(name))."""
    if not isinstance(name, str):
        _log.error("record_function: name must be a str, got %s; using str(name)", type(name).__name__)
        name = str(name)
    interned = _NAMES.get(name)
    if interned is None:
        interned = _trainprof.RangeName(utf8_text(name).replace("\0", " "))
        if len(_NAMES) < _MAX_CACHED_NAMES:
            _NAMES[name] = interned
    return interned


class record_function:
    """Times a block or a function as a range named ``name`` in the timeline
    (category ``user_annotation``) and in the statistics.

    As torch.profiler.record_function, as a context manager::

        with trainprof.record_function("forward"):
            out = model(x)

    or a decorator::

        @trainprof.record_function("data_step")
        def data_step(): ...

    It is a trainprof range, not a LibTorch RecordFunction: while no profile
    records it costs a call and a flag check; while one records, two clock
    reads and one event store. ``args`` is accepted for compatibility and not
    recorded. It never raises: a name that is not a str is logged and used as
    ``str(name)``; one that is not valid UTF-8 (a file name from
    ``os.fsdecode``, a lone surrogate) is recorded with U+FFFD in place of each
    character UTF-8 cannot carry.
    """

    __slots__ = ("_name", "_starts")

    def __init__(self, name: str, args: Optional[str] = None) -> None:
        interned = _NAMES.get(name) if type(name) is str else None
        self._name = interned if interned is not None else _intern(name)
        self._starts: list[int] = []  # one per open use, so that uses may nest

    def __enter__(self) -> "record_function":
        self._starts.append(_begin())
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        starts = self._starts
        start = starts.pop() if starts else 0
        if start:  # 0: nothing was recording at __enter__
            _end(self._name, start)

    def __call__(self, func: F) -> F:
        """Decorates ``func``: each call is a range (calls may recurse or run
        on several threads at once)."""
        name = self._name
        begin, end = _begin, _end

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = begin()
            try:
                return func(*args, **kwargs)
            finally:
                if start:
                    end(name, start)

        return timed  # type: ignore[return-value]
