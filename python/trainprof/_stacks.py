# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Python stack sampling while a profile records (``python_stack_sampling_ms``).

The sampler is a thread of the extension (python/src/stack_sampler.cc): every
few milliseconds, while host activity records, it reads every other Python
thread's stack and records it with the time it stands for. The analysis
gives each sample the part of that time its thread spent outside operators
and ranges, and so names the functions that spent a step's host time there
(docs/OUTPUTS.md, "Python outside operators"). Each profile that records
host activity holds the sampler from start to stop; it stops with the last,
and at interpreter exit in any case (a thread that takes the GIL must be
gone before the interpreter is).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading

from . import _trainprof

_log = logging.getLogger("trainprof")
_held = 0
_unavailable_said = False
_exit_registered = False
# While sampling, a thread that runs pure Python lets another in (the
# sampler, asking the main thread for its stack) within this many seconds
# of its asking, instead of the interpreter's default 5 ms: the stack it
# records is then where it was when asked (docs/PERFORMANCE.md, its cost).
SWITCH_INTERVAL_S = 0.001
_switch_interval_before: float = 0.0


def acquire(interval_ms: int) -> bool:
    """Starts (or keeps) the sampler at ``interval_ms`` or shorter; False
    when it is off (0) or cannot run here (said once)."""
    global _held, _unavailable_said, _exit_registered
    if interval_ms <= 0:
        return False
    try:
        why = _trainprof.acquire_stack_sampler(interval_ms, threading.main_thread().native_id or 0)
    except Exception as e:  # never into the training
        why = f"the Python stack sampler failed to start ({e})"
    if why:
        if not _unavailable_said:
            _unavailable_said = True
            _log.warning("%s: host time outside operators is measured, not attributed to functions", why)
        return False
    if not _exit_registered:
        _exit_registered = True
        atexit.register(_release_all)
    if _held == 0:
        global _switch_interval_before
        _switch_interval_before = sys.getswitchinterval()
        if _switch_interval_before > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
    _held += 1
    return True


def release() -> None:
    """Gives one acquire() back: the sampler stops with the last."""
    global _held
    if _held > 0:
        _held -= 1
        if _held == 0 and sys.getswitchinterval() == SWITCH_INTERVAL_S < _switch_interval_before:
            sys.setswitchinterval(_switch_interval_before)  # unless the program changed it meanwhile
        try:
            _trainprof.release_stack_sampler()
        except Exception:
            _log.exception("trainprof: stopping the Python stack sampler failed; training goes on")


def _release_all() -> None:
    while _held > 0:
        release()
