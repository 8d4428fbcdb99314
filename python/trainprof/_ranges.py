"""``trainprof.record_function``: a named range of host time."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional, TypeVar

from . import _trainprof

_log = logging.getLogger("trainprof")

F = TypeVar("F", bound=Callable[..., Any])


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
    ``str(name)``.
    """

    def __init__(self, name: str, args: Optional[str] = None) -> None:
        if not isinstance(name, str):
            _log.error("record_function: name must be a str, got %s; using str(name)", type(name).__name__)
            name = str(name)
        self._name = _trainprof.RangeName(name.replace("\0", " "))
        self._starts: list[int] = []  # one per open use, so that uses may nest

    def __enter__(self) -> "record_function":
        self._starts.append(_trainprof.begin_range())
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        start = self._starts.pop() if self._starts else 0
        if start:  # 0: nothing was recording at __enter__
            _trainprof.end_range(self._name, start)

    def __call__(self, func: F) -> F:
        """Decorates ``func``: each call is a range (calls may recurse or run
        on several threads at once)."""
        name = self._name
        begin, end = _trainprof.begin_range, _trainprof.end_range

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = begin()
            try:
                return func(*args, **kwargs)
            finally:
                if start:
                    end(name, start)

        return timed  # type: ignore[return-value]
