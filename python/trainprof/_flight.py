# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``trainprof.flight_recorder``: always recording into memory, writing a run
directory only when a step is slow or a dump is asked for (the C++
``FlightRecorder``)."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import tempfile
import time
from typing import Any, Iterable, Optional, Union

from . import _distributed, _memory, _numbers, _stacks, _torch, _trainprof
from ._validate import check_bool, check_int, check_option, check_path, option_range

_log = logging.getLogger("trainprof")


def _check_number(name: str, value: Any, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise ValueError(f"{name} must be a number >= {minimum}, got {value!r}")
    return float(value)


class flight_recorder:
    """Records all the time, as ``profile`` would, into a ring of ``ring_mb``
    MiB in memory (the oldest events go first), and writes a normal run
    directory under ``dir_name`` only when something happens:

    - a slow step: ``step()`` ends a step longer than ``slow_step_factor``
      times the median of the last ``slow_step_window`` steps (after
      ``slow_step_min_steps`` steps; at most one such dump per
      ``cooldown_s`` seconds, unless a step's ratio to the median is at
      least twice the one dumped: a larger incident is never held back).
      3x over 50 steps: steady training varies its step time by tens of
      percent, a step three times the median is an event; 50 steps hold a
      median through a few odd steps. Consecutive slow steps are one dump
      ("steps 100-104 slow, ..."), written when a normal step ends them or
      after 10 of them. The reason says whose time they were: the training
      thread's wait for a CPU (another process held it), data,
      communication, the job's own computing, or blocked;
    - a hang: no step ended for ``hang_timeout_s`` seconds (600; None: off),
      once per hang, armed by the first step; the dump holds every thread's
      Python stack at that time (hang_stacks.txt, written by faulthandler's
      watchdog thread, which needs no GIL: a thread stuck holding it is
      shown too), and every thread's native stack (native_stacks.txt: each
      thread is sent a signal in turn and writes its backtrace, functions of
      shared libraries by name: a collective of a communication library
      shows; ``hang_native_stacks=False``: not taken). This uses
      ``faulthandler.dump_traceback_later``, which is
      one per process: a program that uses it itself should pass
      ``hang_timeout_s=None``;
    - a request from outside: the signal ``dump_signal`` (SIGUSR1 by
      default: ``kill -USR1 PID``; None: none), or the file ``dump_file``
      appearing (``touch`` it; it is removed once the dump is written);
    - an exception leaving the ``with`` block, or ending the program
      (``sys.excepthook``; a KeyboardInterrupt is not dumped);
    - an allocation that fails (torch's out-of-memory error, CPU or CUDA):
      the ring is written on the failing thread before the error goes on
      (at most once per ``cooldown_s``), its analysis writes
      oom_report.txt; with ``profile_memory`` what was alive is named by
      class (parameters, gradients and optimizer state are tagged every
      optimizer step, so the ring holds their tags);
    - a crash (SIGSEGV, SIGABRT, ...) or a signal that ends the process
      (SIGTERM): the ring is written before the process ends (not analysed:
      ``trainprof analyse`` it later);
    - ``dump(reason)``.

    Wrong numbers are incidents (``check_loss=True``): the loss, the tensor
    ``backward()`` is called on, is reported each step (a CUDA loss through
    a copy that never makes the device wait, read a step later); the first
    NaN or infinite loss dumps the ring (trigger ``non_finite_loss``, once;
    in a job of several ranks one incident of all ranks whose report names
    the first rank whose loss went wrong). ``loss_spike_factor=k`` (0: off)
    also dumps a finite loss above k times the median of the window's
    (``loss_spike``, once per ``cooldown_s``). ``check_gradients=True``
    reports the norm of all gradients before each optimizer step (one
    reduction over them: its cost is in docs/PERFORMANCE.md), and a
    non-finite norm dumps (``non_finite_gradients``, once). Both go into
    step_health.csv (``Loss``, ``Gradient Norm``).

    Per-step health, always (no trace needed): each step's time, the loop's
    wait for data (``data_process=True``: the DataLoader's ``wait``), time
    in communication calls, the process's CPU time and the training
    thread's time on a CPU and waiting for one, for the last
    ``health_steps`` steps, in every dump as ``step_health.csv``. As metrics
    for Prometheus (text format; labels rank and pid): ``metrics_file``
    (written every ``metrics_interval_s`` seconds, atomically, mode 0644:
    a ``*.prom`` file in node_exporter's ``--collector.textfile.directory``)
    and/or ``metrics_port`` (served at ``http://metrics_address:PORT/metrics``
    by a thread of the recorder; 0: a free port, see ``metrics_url``;
    ``metrics_address`` 127.0.0.1 by default: only this machine reaches it).

    All ranks dump the same steps (``all_ranks=True``, in a job of several
    ranks: ``WORLD_SIZE`` or MPI's launcher): a rank's dump is announced
    under ``dir_name``, which every rank must see (one machine or a shared
    file system), and every rank's recorder dumps too, into one directory
    ``flight_incident_{stamp}_{trigger}_{step}/`` (a slow step once each
    rank has finished it). The last rank to finish runs the cluster
    analysis there: the straggler, and for a hang the collective some
    ranks entered and others never did, with the missing ranks' stacks
    (torch.distributed's collectives are followed with
    ``profile_communication=True``). A rank that never dumps is waited for
    ``incident_wait_s`` seconds by the rank that announced.

    Python stacks are sampled every ``python_stack_sampling_ms`` (10; 0:
    off), as under ``profile``: a dump names the functions that spent its
    steps' host time outside operators (python_outside_operators.csv, the
    summary), a slow step's among them.

    Operators cost the most to record: ``sample_operators=N`` records about
    one operator call in N (LibTorch's sampling), and the dumps' operator
    statistics are scaled by N and said to be sampled. By default (None)
    the recorder records 1 call in 100, about 1 % of a step or under, and
    every call when it records torch.distributed's calls
    (``profile_communication=True``: a stuck collective and the cluster
    pass need each one) or memory (``profile_memory=True``: allocations are
    placed by the operator around them); 1 records every call.

    Each dump is analysed (``analyse=True``) and its profiler_info.json and
    summary say what triggered it. Dumps are written on a thread of the
    recorder: ``step()`` only measures and compares. Use as a context
    manager, or call ``stop()``.

    Raises:
        TypeError, ValueError: a setting of the wrong type or value (named).
    """

    def __init__(self, dir_name: Union[str, "os.PathLike[str]"] = "./flight_recorder", *, ring_mb: int = 64,
                 slow_step_factor: float = 3.0, slow_step_window: int = 50, slow_step_min_steps: int = 10,
                 cooldown_s: float = 300.0, analyse: bool = True, activities: Optional[Iterable[Any]] = None,
                 record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
                 with_flops: bool = False, dump_signal: Optional[int] = signal.SIGUSR1,
                 dump_file: Union[str, "os.PathLike[str]", None] = None,
                 hang_timeout_s: Optional[float] = 600.0, data_process: bool = False, health_steps: int = 1000,
                 metrics_file: Union[str, "os.PathLike[str]", None] = None, metrics_interval_s: float = 5.0,
                 metrics_port: Optional[int] = None, metrics_address: str = "127.0.0.1",
                 hang_native_stacks: bool = True, profile_communication: bool = False, all_ranks: bool = True,
                 incident_wait_s: float = 60.0, sample_operators: Optional[int] = None,
                 python_stack_sampling_ms: int = 10, check_loss: bool = True, check_gradients: bool = False,
                 loss_spike_factor: float = 0.0) -> None:
        from .profiler import _check_activities  # profiler imports the package's other modules

        options = _trainprof.ProfilerOptions()
        options.output_path = check_path("dir_name", dir_name)
        options.activities = _check_activities(activities)
        options.record_shapes = check_bool("record_shapes", record_shapes)
        options.profile_memory = check_bool("profile_memory", profile_memory)
        options.with_stack = check_bool("with_stack", with_stack)
        options.with_flops = check_bool("with_flops", with_flops)
        options.data_process = check_bool("data_process", data_process)
        options.profile_communication = check_bool("profile_communication", profile_communication)
        # 0: the recorder's own choice (ProfilerOptions.sample_operators).
        options.sample_operators = (0 if sample_operators is None
                                    else check_int("sample_operators", sample_operators, 1, option_range("sample_operators")[1]))
        options.python_stack_sampling_ms = check_option("python_stack_sampling_ms", python_stack_sampling_ms)
        self._start(options, ring_mb=ring_mb, slow_step_factor=slow_step_factor, slow_step_window=slow_step_window,
                    slow_step_min_steps=slow_step_min_steps, cooldown_s=cooldown_s, analyse=analyse,
                    dump_signal=dump_signal, dump_file=dump_file, hang_timeout_s=hang_timeout_s,
                    health_steps=health_steps, metrics_file=metrics_file, metrics_interval_s=metrics_interval_s,
                    metrics_port=metrics_port, metrics_address=metrics_address,
                    hang_native_stacks=hang_native_stacks, all_ranks=all_ranks, incident_wait_s=incident_wait_s,
                    check_loss=check_loss, check_gradients=check_gradients, loss_spike_factor=loss_spike_factor)

    @classmethod
    def _from_core_options(cls, options: _trainprof.ProfilerOptions, settings: dict[str, Any]) -> "flight_recorder":
        """A recorder of core ProfilerOptions (TRAINPROF_OPTIONS' ``flight_recorder``;
        ``settings``: this class's keyword arguments but dir_name and what options hold)."""
        recorder = cls.__new__(cls)
        recorder._start(options, **settings)
        return recorder

    def _start(self, options: _trainprof.ProfilerOptions, *, ring_mb: int = 64, slow_step_factor: float = 3.0,
               slow_step_window: int = 50, slow_step_min_steps: int = 10, cooldown_s: float = 300.0,
               analyse: bool = True, dump_signal: Optional[int] = signal.SIGUSR1,
               dump_file: Union[str, "os.PathLike[str]", None] = None,
               hang_timeout_s: Optional[float] = 600.0, health_steps: int = 1000,
               metrics_file: Union[str, "os.PathLike[str]", None] = None, metrics_interval_s: float = 5.0,
               metrics_port: Optional[int] = None, metrics_address: str = "127.0.0.1",
               hang_native_stacks: bool = True, all_ranks: bool = True, incident_wait_s: float = 60.0,
               check_loss: bool = True, check_gradients: bool = False, loss_spike_factor: float = 0.0) -> None:
        self._cpp: Optional[_trainprof.FlightRecorder] = None
        self._numbers: Optional[_numbers.NumberWatch] = None
        self._stacks: Optional[Any] = None  # the file faulthandler writes the stacks of a hang into
        self._torch_flag = False
        self._tagging_memory = False
        self._sampling = False
        self._previous_excepthook: Optional[Any] = None
        self._pid = os.getpid()
        hang_s = 0.0 if hang_timeout_s is None else _check_number("hang_timeout_s", hang_timeout_s, 0.0)
        self._hang_s = hang_s
        self._stacks_armed_at = 0.0
        args = (check_int("ring_mb", ring_mb, 1), _check_number("slow_step_factor", slow_step_factor, 0.0),
                check_int("slow_step_window", slow_step_window, 1),
                check_int("slow_step_min_steps", slow_step_min_steps, 1),
                _check_number("cooldown_s", cooldown_s, 0.0), check_bool("analyse", analyse),
                0 if dump_signal is None else check_int("dump_signal", dump_signal, 1),
                None if dump_file is None else check_path("dump_file", dump_file), hang_s)
        if not isinstance(metrics_address, str):
            raise TypeError(f"metrics_address must be a str (an IPv4 address), got {metrics_address!r}")
        metrics = (check_int("health_steps", health_steps, 1),
                   None if metrics_file is None else check_path("metrics_file", metrics_file),
                   _check_number("metrics_interval_s", metrics_interval_s, 0.01),
                   -1 if metrics_port is None else check_int("metrics_port", metrics_port, 0), metrics_address,
                   check_bool("hang_native_stacks", hang_native_stacks), check_bool("all_ranks", all_ranks),
                   _check_number("incident_wait_s", incident_wait_s, 0.0), check_bool("check_loss", check_loss),
                   check_bool("check_gradients", check_gradients),
                   _check_number("loss_spike_factor", loss_spike_factor, 0.0))
        if metrics_file is not None and not os.fsdecode(metrics_file).endswith(".prom"):
            _log.warning("metrics_file %r does not end in .prom: node_exporter's textfile collector reads only "
                         "*.prom files", os.fsdecode(metrics_file))
        if metrics_port is not None and metrics_port > 65535:
            raise ValueError(f"metrics_port must be in [0, 65535], got {metrics_port!r}")
        # The rank, the groups' members and the clock's offset to rank 0 (in
        # the background), as a profile has them: the cluster pass of an
        # incident of all ranks needs them.
        _distributed.sync()
        if hang_s > 0:
            fd, path = tempfile.mkstemp(prefix="trainprof_hang_stacks_", suffix=".txt")
            os.close(fd)
            self._stacks = open(path, "ab")  # appends: the recorder empties it after each hang
        self._cpp = _trainprof.FlightRecorder(options, *args, None if self._stacks is None else self._stacks.name,
                                              *metrics)
        if self._cpp.recording() and _trainprof.Activity.CPU in options.activities:
            # As a profile does: torch.compile's code annotates itself only while torch sees a profiler.
            _torch.profile_started()
            self._torch_flag = True
        if self._cpp.recording() and options.profile_memory:
            # What allocations hold (parameters, gradients, optimizer state,
            # batches), as a profile tags them: the tags of every optimizer
            # step are in the ring, however far back it reaches.
            _torch.when_imported(_memory.install)
            _memory.started()
            self._tagging_memory = True
        if self._cpp.recording() and _trainprof.Activity.CPU in options.activities:
            self._sampling = _stacks.acquire(options.python_stack_sampling_ms)
        if self._cpp.recording() and (check_loss or check_gradients):
            # The loss (what backward() is called on) and the gradients' norm, read without a wait.
            self._numbers = _numbers.NumberWatch(self._cpp, check_gradients)
            _torch.when_imported(self._numbers.install)
        if self._cpp.recording():
            # An exception that ends the program outside a ``with`` block is dumped too.
            self._previous_excepthook = sys.excepthook
            sys.excepthook = self._on_uncaught_exception

    def _on_uncaught_exception(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        """sys.excepthook while recording: the exception that ends the program is dumped, then reported as before."""
        previous = self._previous_excepthook or sys.__excepthook__
        try:
            if self.recording and not issubclass(exc_type, KeyboardInterrupt):
                self._dump_exception(exc_type, exc, "uncaught exception")
        finally:
            previous(exc_type, exc, traceback)

    def _dump_exception(self, exc_type: Any, exc: Any, what: str) -> None:
        if self._cpp is not None:
            self._cpp.dump(f"{what}: {exc_type.__name__}: {exc} during step {self.step_num}", "exception")

    @property
    def recording(self) -> bool:
        """Whether it records (False after stop(), or when it could not start: the log says why)."""
        return self._cpp is not None and self._cpp.recording()

    @property
    def metrics_url(self) -> Optional[str]:
        """Where the metrics are served (``http://127.0.0.1:PORT/metrics``), or None."""
        return (self._cpp.metrics_url() or None) if self._cpp is not None else None

    def metrics_text(self) -> str:
        """The step health now, in Prometheus' text format (what the endpoint and the file hold)."""
        return self._cpp.metrics_text() if self._cpp is not None else ""

    @property
    def step_num(self) -> int:
        """The number of the step under way (steps ended so far)."""
        return self._cpp.step_num() if self._cpp is not None else 0

    def step(self) -> None:
        """Ends the current step (``ProfilerStep#N``) and checks it against the slow-step trigger."""
        if self._cpp is not None:
            _distributed.sync()  # torch.distributed initialized after the recorder started, new groups
            self._cpp.step()
            if self._torch_flag:
                _torch.profile_stepped()
            # A fork() child records nothing of its parent's recorder (the
            # C++ side says so); it must not arm faulthandler on the parent's file either.
            if self._stacks is not None and os.getpid() == self._pid:
                self._arm_hang_stacks()

    def _arm_hang_stacks(self) -> None:
        """faulthandler writes every thread's stack hang_timeout_s after its
        last arming. Each arming starts a thread, so it is re-armed only a
        tenth of the timeout after the last: the stacks come 90-100 % of the
        timeout after the last step, before the recorder's hang dump reads them."""
        now = time.monotonic()
        if now - self._stacks_armed_at < self._hang_s / 10:
            return
        self._stacks_armed_at = now
        if os.fstat(self._stacks.fileno()).st_size > 0:
            # Written for a step that ended after all: not a hang's.
            os.truncate(self._stacks.name, 0)
        faulthandler.dump_traceback_later(self._hang_s * 0.95, repeat=False, file=self._stacks)

    def dump(self, reason: str = "requested") -> Optional[str]:
        """Writes what the ring holds now as a run directory (analysed when
        ``analyse``) and returns it; None, with the reason logged, when it
        could not be written (recording goes on)."""
        if self._cpp is None:
            _log.error("flight_recorder.dump(): the recorder is stopped")
            return None
        d = self._cpp.dump(str(reason))
        return d.run_dir or None

    def dumps(self) -> list[_trainprof.FlightDump]:
        """Every dump so far, oldest first (``run_dir``, ``trigger``, ``reason``, ``error``)."""
        return self._cpp.dumps() if self._cpp is not None else []

    def wait_for_dumps(self) -> None:
        """Waits until the dumps triggered so far are written (and analysed)."""
        if self._cpp is not None:
            self._cpp.wait_for_dumps()

    def stop(self) -> None:
        """Stops recording (what the ring holds is discarded); waits for the dumps under way."""
        if self._numbers is not None:
            self._numbers.uninstall()  # the last values first: a NaN in the last step is dumped too
            self._numbers = None
        if self._cpp is not None:
            self._cpp.stop()
        if self._sampling:
            self._sampling = False
            _stacks.release()
        if self._previous_excepthook is not None:
            if sys.excepthook == self._on_uncaught_exception:
                sys.excepthook = self._previous_excepthook
            self._previous_excepthook = None
        if self._stacks is not None:
            if os.getpid() == self._pid:  # a fork() child leaves the parent's file and watchdog alone
                faulthandler.cancel_dump_traceback_later()
                os.unlink(self._stacks.name)
            self._stacks.close()
            self._stacks = None
        if self._torch_flag:
            self._torch_flag = False
            _torch.profile_stopped()
        if self._tagging_memory:
            self._tagging_memory = False
            _memory.stopped()

    def __enter__(self) -> "flight_recorder":
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        # The training failed: its last steps are what explains it.
        if exc_type is not None and self.recording:
            self._dump_exception(exc_type, exc, "exception")
        self.stop()
