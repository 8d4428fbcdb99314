# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Profiling an unmodified script: ``TRAINPROF_OPTIONS`` and ``python -m trainprof run``.

Both take the JSON of ``TRAINPROF_OPTIONS`` (include/trainprof/env.h: the
ProfilerOptions field names, ``start``, ``schedule`` and ``analyse``), parsed
by the C++ core, so the keys, checks and messages are the C++ path's. The
profile covers the whole process:

- steps are the optimizer's ``step()`` calls (each optimizer class's step,
  wrapped where torch wraps it for its profiling range and hooks, so that a
  step ends after the ``Optimizer.step#...`` range; torch's global step
  post-hook where that place is missing): the first optimizer that steps drives the schedule and the
  ``ProfilerStep#N`` ranges (a second optimizer, as in a GAN, would count
  each step twice); when it is garbage collected the next one that steps
  takes over;
- torch is not imported for it: the torch collector, the step hook and (with
  ``data_process``) the DataLoader stages are set up right after the script
  imports torch, so a script can set its environment first;
- at interpreter exit the profile is stopped: the open run is closed and
  flushed and, with ``"analyse": true``, analysed (``{run}/PROFILER_OUTPUT``).

``TRAINPROF_DYNAMIC_CONFIG`` (a directory) starts a ``DynamicProfilerMonitor``
instead (_dynamic.py): nothing is recorded until its ``profiler_config.json``
asks for steps; runs go to ``TRAINPROF_DYNAMIC_OUTPUT`` (default ``./data``);
the file is looked at every ``TRAINPROF_DYNAMIC_POLL_INTERVAL`` seconds
(default 2); steps are the optimizer's, as above.

A ``.pth`` file installed with the package (``trainprof_autostart.pth``)
imports trainprof at interpreter start when ``TRAINPROF_OPTIONS`` or
``TRAINPROF_DYNAMIC_CONFIG`` is set, so a
plain ``python train.py`` is profiled without a line changed; without it
(trainprof put on ``sys.path`` by hand) ``import trainprof`` starts it.
Processes of ``multiprocessing`` (DataLoader workers among them) are not
profiled on their own: their parent records what matters of them.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import shlex
import sys
import threading
import weakref
from typing import Any, Callable, Optional

from . import _torch, _trainprof
from .profiler import profile

_log = logging.getLogger("trainprof")

OPTIONS_VARIABLE = "TRAINPROF_OPTIONS"
# Dynamic profiling without code changes: the directory of
# profiler_config.json, where runs go, and how often the file is looked at.
DYNAMIC_VARIABLE = "TRAINPROF_DYNAMIC_CONFIG"
DYNAMIC_OUTPUT_VARIABLE = "TRAINPROF_DYNAMIC_OUTPUT"
DYNAMIC_POLL_VARIABLE = "TRAINPROF_DYNAMIC_POLL_INTERVAL"

_profile: Optional[profile] = None
_output_path = ""
_analysed = False
_driver: Optional[Any] = None  # weak reference to the optimizer whose steps count
_in_step = threading.local()  # inside a counted optimizer step (nested steps count once)
_monitor: Optional[Any] = None  # the DynamicProfilerMonitor of TRAINPROF_DYNAMIC_CONFIG
_flight: Optional[Any] = None  # the flight_recorder of TRAINPROF_OPTIONS' "flight_recorder"
_step_hook_installed = False
# trainprof.Profiler objects without a schedule: their steps are the optimizer's.
_step_followers: "weakref.WeakSet[Any]" = weakref.WeakSet()


def active() -> Optional[Any]:
    """The process-wide profile (or flight_recorder) started from options, or None."""
    return _profile if _profile is not None else _flight


def _is_multiprocessing_child() -> bool:
    """True in a process started by multiprocessing (spawn / forkserver): a
    DataLoader worker, a pool worker, a forkserver, a resource tracker."""
    argv = getattr(sys, "orig_argv", None) or getattr(sys, "argv", [])
    return any(a == "--multiprocessing-fork" or "from multiprocessing" in a for a in argv)


def _what_runs() -> list[str]:
    """The interpreter's arguments from what it runs on: ``["-m", MODULE,
    ...]``, ``[SCRIPT, ...]``, ``["-c", CODE, ...]`` (its own options
    skipped); empty when unknown."""
    argv = list(getattr(sys, "orig_argv", None) or [])
    i = 1  # past the interpreter, over its options, to what it runs
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-"):
        i += 2 if argv[i] in ("-X", "-W") else 1
    return argv[i:]


def _is_run_command() -> bool:
    """True in ``python -m trainprof run ...`` and ``trainprof run ...``: the
    runner takes TRAINPROF_OPTIONS itself, by the rule it shares with
    ``--options`` (_run.py)."""
    runs = _what_runs()
    if runs[:1] == ["-m"]:
        return runs[1:3] == ["trainprof", "run"]
    return len(runs) >= 2 and os.path.basename(runs[0]) == "trainprof" and runs[1] == "run"


# Launchers written in Python: they train nothing, their ranks do.
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_LAUNCHER_SCRIPTS = ("torchrun",)


def _is_launcher() -> bool:
    """True in torchrun's (or torch.distributed.launch's) own process, which
    sees the environment its ranks get."""
    runs = _what_runs()
    if runs[:1] == ["-m"]:
        return len(runs) > 1 and runs[1] in _LAUNCHER_MODULES
    return len(runs) > 0 and os.path.basename(runs[0]) in _LAUNCHER_SCRIPTS


def start_from_environment() -> Optional[Any]:
    """Starts the process-wide profile when TRAINPROF_OPTIONS is set (once;
    not in multiprocessing children, nor in a launcher such as torchrun,
    nor under ``trainprof run``, which takes the variable itself). A bad
    value is reported on stderr and the process runs unprofiled."""
    text = os.environ.get(OPTIONS_VARIABLE, "")
    if not text or active() is not None or _is_multiprocessing_child() or _is_run_command() or _is_launcher():
        return active()
    try:
        return start_from_json(text)
    except (TypeError, ValueError) as e:
        sys.stderr.write(f"[trainprof] {e}; this process runs without profiling\n")
        return None


def start_from_json(text: str) -> Optional[Any]:
    """Starts the process-wide profile from TRAINPROF_OPTIONS-style JSON.

    Returns None when ``"start"`` is false.

    Raises:
        ValueError: bad JSON, a missing ``start``, an unknown key or a bad
            value (the message names the key).
        RuntimeError: a process-wide profile is already running.
    """
    global _profile, _output_path, _analysed
    if _profile is not None or _flight is not None:
        raise RuntimeError("a process-wide trainprof profile is already running")
    start, analyse, options, flight = _trainprof.parse_options_json(text)
    if not start:
        _log.info("%s has \"start\": false; not profiling", OPTIONS_VARIABLE)
        return None
    if flight is not None:
        return _start_flight_recorder(options, flight)
    options.start_profile = True
    if analyse:
        options.set_trace_handler(options.output_path, "", True, False)
    # Where the core puts the runs (it resolves the path now, before the
    # script may os.chdir()), for the message at exit.
    _output_path, _analysed = os.path.abspath(options.output_path), analyse
    _profile = profile._from_core_options(options)
    _install_step_hook()
    atexit.register(stop)
    return _profile


def _start_flight_recorder(options: _trainprof.ProfilerOptions, settings: dict[str, Any]) -> Optional[Any]:
    """TRAINPROF_OPTIONS' "flight_recorder": the process-wide flight recorder,
    stepped by the optimizer, stopped at exit (its dumps listed on stderr)."""
    global _flight, _output_path
    from ._flight import flight_recorder
    _output_path = os.path.abspath(options.output_path)
    _flight = flight_recorder._from_core_options(options, settings)
    _install_step_hook()
    atexit.register(stop)
    return _flight


def start_monitor_from_environment() -> Optional[Any]:
    """Starts the process-wide DynamicProfilerMonitor when
    TRAINPROF_DYNAMIC_CONFIG names a config directory (once; not in
    multiprocessing children); its steps are the optimizer's. A bad value is
    reported on stderr and the process runs without it."""
    global _monitor
    cfg = os.environ.get(DYNAMIC_VARIABLE, "")
    if not cfg or _monitor is not None or _is_multiprocessing_child() or _is_launcher():
        return _monitor
    if _profile is not None:
        sys.stderr.write(f"[trainprof] {OPTIONS_VARIABLE} profiles the whole process: "
                         f"{DYNAMIC_VARIABLE} is not used\n")
        return None
    from ._dynamic import DynamicProfilerMonitor
    try:
        poll = float(os.environ.get(DYNAMIC_POLL_VARIABLE) or 2)
        _monitor = DynamicProfilerMonitor(cfg, os.environ.get(DYNAMIC_OUTPUT_VARIABLE) or "./data", poll)
    except (TypeError, ValueError) as e:
        sys.stderr.write(f"[trainprof] {DYNAMIC_VARIABLE}: {e}; this process runs without dynamic profiling\n")
        return None
    _install_step_hook()
    atexit.register(_close_monitor)
    return _monitor


def _close_monitor() -> None:
    """At exit: a collection in progress is closed (and analysed as configured)."""
    global _monitor
    monitor, _monitor = _monitor, None
    if monitor is not None:
        monitor.close()
        for run in monitor.runs:
            sys.stderr.write(f"[trainprof] dynamic profiling recorded {run}\n")


def follow_optimizer_steps(follower: Any) -> None:
    """``follower._on_optimizer_step()`` is called at the end of each training
    step (the driving optimizer's ``step()``, as for the process-wide
    profile) while ``follower`` lives."""
    _step_followers.add(follower)
    _install_step_hook()


def _install_step_hook() -> None:
    """Steps from optimizer.step(), set up once, after ``import torch``."""
    global _step_hook_installed
    if not _step_hook_installed:
        _step_hook_installed = True
        _torch.when_imported(_on_torch_imported)


def _on_torch_imported() -> None:
    """After ``import torch``: operators recorded, steps from optimizer.step()."""
    _torch.warn_if_unavailable()
    from torch.optim import Optimizer
    patch_step = getattr(Optimizer, "_patch_step_function", None)
    if patch_step is None:
        # torch's global step post-hook runs inside the step's
        # "Optimizer.step#..." range: that range then straddles two steps.
        from torch.optim.optimizer import register_optimizer_step_post_hook
        register_optimizer_step_post_hook(_on_optimizer_step)
        return

    # Where torch wraps each optimizer class's step() (its profiling range and
    # hooks), once per class, the step ends after that wrapper returns.
    @functools.wraps(patch_step)
    def patch_step_function(self: Any) -> None:
        patch_step(self)
        cls = type(self)
        if not getattr(cls.step, "_trainprof_counts_steps", False):
            cls.step = _counting(cls.step)

    Optimizer._patch_step_function = patch_step_function
    # Optimizers made before this ran (a trainprof.Profiler made after the
    # optimizer): their classes' steps are wrapped by torch already.
    for cls in _subclasses(Optimizer):
        step = cls.__dict__.get("step")
        if getattr(step, "hooked", False) and not getattr(step, "_trainprof_counts_steps", False):
            cls.step = _counting(step)


def _subclasses(cls: type) -> list[type]:
    found, todo = [], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        if sub not in found:
            found.append(sub)
            todo.extend(sub.__subclasses__())
    return found


def _counting(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` (an optimizer class's), ending a training step when it returns."""

    @functools.wraps(step)  # keeps torch's `hooked` mark: torch does not wrap it again
    def counting_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_in_step, "active", False):  # a subclass' step calling super().step()
            return step(self, *args, **kwargs)
        _in_step.active = True
        try:
            out = step(self, *args, **kwargs)
        finally:
            _in_step.active = False
        _on_optimizer_step(self, args, kwargs)
        return out

    counting_step._trainprof_counts_steps = True  # type: ignore[attr-defined]
    return counting_step


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """torch's optimizer step post-hook: one training step ends (never raises)."""
    global _driver
    try:
        driver = _driver() if _driver is not None else None
        if driver is None:
            _driver = weakref.ref(optimizer)
        elif driver is not optimizer:
            return
        if _profile is not None:
            _profile.step()
        if _flight is not None:
            _flight.step()
        if _monitor is not None:
            _monitor.step()
        for follower in list(_step_followers):
            follower._on_optimizer_step()
    except Exception:
        _log.exception("trainprof: the step was not counted; training goes on")


def stop() -> None:
    """Stops the process-wide profile (at exit): its open run is closed,
    flushed and, with ``"analyse": true``, analysed; says where on stderr."""
    global _profile
    _stop_flight_recorder()
    prof, _profile = _profile, None
    if prof is None:
        return
    try:
        if prof._cpp is not None and prof._cpp.started():
            prof.stop()
        runs = prof.step_num
        where = _output_path
        if prof.last_run_dir is None:
            sys.stderr.write(f"[trainprof] no run was recorded ({runs} optimizer steps)\n")
        elif _analysed:
            sys.stderr.write(f"[trainprof] {runs} steps; runs analysed under {where} "
                             f"(trainprof summary {shlex.quote(where)})\n")
            _say_start_up(prof.last_run_dir)
        else:
            sys.stderr.write(f"[trainprof] {runs} steps; runs under {where} "
                             f"(trainprof analyse {shlex.quote(where)})\n")
    except Exception:
        _log.exception("trainprof: stopping the profile at exit failed")


def _say_start_up(run_dir: str) -> None:
    """How long the script ran before its first step: the start-up, which
    the step statistics leave out (its collections and operators too)."""
    try:
        with open(os.path.join(run_dir, "PROFILER_OUTPUT", "profiler_info.json")) as f:
            start_up = json.load(f)["analysis"]["start_up"]
        sys.stderr.write(f"[trainprof] start-up: {start_up['ms'] / 1e3:.3f} s before the first optimizer step "
                         f"(imports, set-up, the first batch; {start_up['gc_collections']} garbage collections), "
                         "not counted in the step statistics\n")
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no start-up (a run that never stepped) or no analysis


def on_uncaught_exception(e: BaseException) -> None:
    """The script of ``trainprof run`` ended with ``e`` (sys.excepthook does
    not see it: the runner prints it): the flight recorder dumps its last steps."""
    recorder = _flight
    if recorder is not None and recorder.recording:
        try:
            recorder._dump_exception(type(e), e, "uncaught exception")
        except Exception:
            _log.exception("trainprof: the flight recorder's dump of the exception failed")


def _stop_flight_recorder() -> None:
    """At exit: the process-wide flight recorder stops (the dumps it triggered are written) and says what it dumped."""
    global _flight
    recorder, _flight = _flight, None
    if recorder is None:
        return
    try:
        steps = recorder.step_num
        recorder.stop()
        dumps = [d for d in recorder.dumps() if d.run_dir]
        sys.stderr.write(f"[trainprof] flight recorder: {steps} steps, {len(dumps)} "
                         f"dump{'' if len(dumps) == 1 else 's'} under {_output_path}\n")
        for d in dumps:
            sys.stderr.write(f"[trainprof]   {d.trigger}: {d.reason}: {d.run_dir}\n")
    except Exception:
        _log.exception("trainprof: stopping the flight recorder at exit failed")
