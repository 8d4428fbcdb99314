# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Dynamic profiling: start and stop collection of a running job by editing
a JSON file (``mindspore.profiler.DynamicProfilerMonitor``).

The C++ core watches the file and decides which steps are recorded
(include/trainprof/dynamic.h, ``_trainprof.DynamicSchedule``); this module
runs a ``trainprof.profile`` for each collection, so that everything a
profile records from Python (aten operators, Python stacks, nn.Module
paths, DataLoader stages) is there too.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Union

from . import _torch, _trainprof
from ._validate import check_path
from .profiler import profile

_log = logging.getLogger("trainprof")

CONFIG_FILE_NAME = "profiler_config.json"


class DynamicProfilerMonitor:
    """Records the steps that ``{cfg_path}/profiler_config.json`` asks for,
    read while the job trains: MindSpore's ``DynamicProfilerMonitor``.

    ::

        monitor = trainprof.DynamicProfilerMonitor("./dyn_cfg", "./dyn_data")
        for batch in loader:
            train_step(batch)
            monitor.step()

    The file is created when absent, with ``"start_step": -1`` (nothing is
    recorded). Save it as ``{"start_step": 1000, "stop_step": 1010,
    "analyse_mode": 0}`` while the job runs and steps 1000 to 1010 (counted
    from 1: step k ends at the k-th ``step()``) are recorded into one run
    directory under ``output_path``, ``rank{R}_start{S}_stop{E}_{time}_trainprof``,
    then analysed (``analyse_mode`` 0: at the end of step 1010, training
    waiting; 1: in a child process; -1: not). The other fields are the
    profile's settings: ``profiler_level`` (-1, 0, 1, 2), ``with_stack``,
    ``record_shapes``, ``profile_memory``, ``with_modules``, ``with_flops``,
    ``data_process``, ``activities`` (``["CPU"]``), ``data_simplification``
    (default true), ``mstx_domain_include`` / ``mstx_domain_exclude``;
    ``aicore_metrics``, ``profile_framework``, ``parallel_strategy`` and
    ``mstx`` are accepted and have no effect. Ranks of a job may share one
    file: each records the same steps into its own run.

    A config takes effect at its ``start_step``, or at the next step when
    that has passed (as many steps are then recorded, with a warning); one
    saved during a collection waits for its end, except ``"start_step": -1``,
    which ends it at the next ``step()``. A file with bad JSON or a bad value
    is reported (naming the field) and the config before it stays.

    Without code changes: ``TRAINPROF_DYNAMIC_CONFIG=./dyn_cfg python train.py``
    (output under ``TRAINPROF_DYNAMIC_OUTPUT``, default ``./data``; steps are the
    optimizer's ``step()`` calls).

    Args:
        cfg_path: the directory of ``profiler_config.json`` (created, 0700,
            when absent; a symlink is refused).
        output_path: where run directories go (default ``./data``).
        poll_interval: seconds between two looks at the file by a background
            thread (default 2); ``step()`` itself costs a few nanoseconds
            when nothing changed.

    Raises:
        TypeError, ValueError: a bad argument (named), or a ``cfg_path`` that
            cannot be made a directory.
    """

    def __init__(self, cfg_path: Union[str, "os.PathLike[str]"], output_path: Union[str, "os.PathLike[str]"] = "./data",
                 poll_interval: Union[int, float] = 2) -> None:
        self._schedule: Optional[_trainprof.DynamicSchedule] = None
        self._profile: Optional[profile] = None
        self._runs: list[str] = []
        cfg = check_path("cfg_path", cfg_path)
        out = check_path("output_path", output_path)  # made absolute by the core, now
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)):
            raise TypeError(f"poll_interval must be a number of seconds, got {type(poll_interval).__name__}")
        if not 0 < poll_interval <= 3600:
            raise ValueError(f"poll_interval must be in (0, 3600] seconds, got {poll_interval}")
        self._schedule = _trainprof.DynamicSchedule(cfg, out, float(poll_interval))
        if self._schedule.collecting():
            self._start(at_step_boundary=False)

    def step(self) -> None:
        """Ends a training step: starts or stops a collection as the file
        says. Never raises."""
        if self._schedule is None:
            return
        try:
            stop, start = self._schedule.step()
            if self._profile is not None and not stop:
                self._profile.step()  # a step inside the collection
            if stop:
                self._stop(at_step_boundary=True)
            if start:
                self._start(at_step_boundary=True)
        except Exception:
            _log.exception("DynamicProfilerMonitor.step() failed; training goes on")

    # MindSpore's DynamicProfilerMonitor is a training callback: a loop that
    # calls its callbacks' hooks steps it at the end of each step.
    def on_train_step_begin(self, run_context: object = None) -> None:
        """MindSpore's callback hook: nothing to do at a step's beginning."""

    def on_train_step_end(self, run_context: object = None) -> None:
        """MindSpore's callback hook: ``step()``."""
        self.step()

    def _start(self, at_step_boundary: bool) -> None:
        assert self._schedule is not None
        collection = self._schedule.collection()
        if collection is None:
            return
        first, last, _, options = collection
        _torch.load_if_torch_imported()  # the collector must be registered before the core records
        prof = profile._from_core_options(options)  # start_profile is False: numbered first
        if prof._cpp is not None:
            prof._cpp.set_step_num(first)
        prof._start(at_step_boundary)
        self._profile = prof
        _log.info("DynamicProfilerMonitor: recording steps %d-%d", first, last)

    def _stop(self, at_step_boundary: bool = False) -> None:
        prof, self._profile = self._profile, None
        if prof is None:
            return
        prof._stop(at_step_boundary)  # the trace handler analyses, as analyse_mode says
        if prof.last_run_dir is not None:
            self._runs.append(prof.last_run_dir)

    def close(self) -> None:
        """Stops a collection in progress (its run is closed and analysed as
        configured, with the steps recorded so far)."""
        try:
            self._stop()
        except Exception:
            _log.exception("DynamicProfilerMonitor.close() failed")

    def __del__(self) -> None:
        self.close()

    @property
    def step_num(self) -> int:
        """Steps completed (``step()`` calls so far)."""
        return self._schedule.step_num() if self._schedule is not None else 0

    @property
    def collecting(self) -> bool:
        """Whether the current step is being recorded."""
        return self._profile is not None

    @property
    def runs(self) -> list[str]:
        """The run directories closed so far, oldest first."""
        return list(self._runs)

    @property
    def configs_read(self) -> int:
        """Versions of the file read and accepted so far (to wait for an edit
        to be seen)."""
        return self._schedule.configs_read() if self._schedule is not None else 0
