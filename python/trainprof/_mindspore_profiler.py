# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``trainprof.Profiler``: MindSpore's Profiler class, as its users write it.

``from mindspore import Profiler`` becomes ``from trainprof import Profiler``
and the profiling code stays as it is: ``Profiler(output_path=...)`` records
from the moment it is made, ``start()`` / ``stop()`` from callbacks at chosen
steps, ``analyse()`` at the end, ``Profiler.offline_analyse(path)`` after a
crash, ``with Profiler(schedule=...) as prof: ... prof.step()``.

Where MindSpore logs rather than raises (starting twice, stopping when
stopped, ``step()`` without a schedule or while stopped), this class logs the
same, at the same level, and training goes on. Settings of the wrong type or
value raise TypeError / ValueError when the Profiler is made, as
``trainprof.profile``'s do.

Without a schedule, a step is one optimizer ``step()`` (MindSpore's steps are
its graph's iterations; a PyTorch loop's are its optimizer's), numbered from
1 as MindSpore's ``cur_step_num``: step k ends at the k-th. So
step_trace_time.csv and ``step_list`` work without a call per step, and
``step_list=[2, 3, 4]`` means the training's steps 2 to 4. With a schedule,
steps are the ``step()`` calls from 0, as in MindSpore.
"""

from __future__ import annotations

import enum
import inspect
import logging
import os
import weakref
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import _trainprof, _zero_code
from ._distributed import one_of_several_ranks
from ._validate import check_bool, check_path, check_step_list
from .profiler import (
    ExportType,
    HostSystem,
    ProfilerAction,
    ProfilerActivity,
    ProfilerLevel,
    _check_activities,
    _check_export_type,
    _check_host_sys,
    _check_level,
    _check_schedule,
    _HOST_SYSTEM,
    _LEVELS,
    _npu_is_the_gpu,
    _TraceHandler,
    profile,
    schedule as _schedule_class,
    tensorboard_trace_handler,
)

_log = logging.getLogger("trainprof")


class AicoreMetrics(enum.Enum):
    """MindSpore's AI Core counter groups (Ascend hardware). Taken so that
    MindSpore code runs; there is no AI Core here, so a value other than
    ``AiCoreNone`` is said once and has no effect."""

    AiCoreNone = -1
    ArithmeticUtilization = 0
    PipeUtilization = 1
    Memory = 2
    MemoryL0 = 3
    ResourceConflictRatio = 4
    MemoryUB = 5
    L2Cache = 6
    MemoryAccess = 7


# MindSpore's Ascend-only settings: what each would collect, and what to use here.
_ASCEND_ONLY = {
    "aicore_metrics": "Ascend AI Core counters; GPU kernels are timed through CUPTI with ProfilerActivity.GPU "
                      "(hardware counters are not collected)",
    "l2_cache": "the Ascend L2 cache hit rate; no cache counters are collected here",
    "hbm_ddr": "Ascend on-chip memory bandwidth; profile_memory=True records allocations and frees",
    "pcie": "Ascend PCIe bandwidth; with ProfilerActivity.GPU each host-device copy has its bytes and "
            "bandwidth (kernel_details.csv)",
    "parallel_strategy": "MindSpore's parallel strategy; collectives are recorded with profile_communication "
                         "(on by default under torch.distributed)",
}

_said: set[str] = set()


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        _log.warning("%s", message)


def _trace_ready_caller(on_trace_ready: Any, owner: "Profiler") -> Any:
    """``on_trace_ready`` as the core calls it. MindSpore calls its callback
    with no argument, torch.profiler with the profiler: a callable that
    takes one positional argument gets the Profiler, else none."""
    if on_trace_ready is None or not callable(on_trace_ready) or isinstance(on_trace_ready, _TraceHandler):
        return on_trace_ready  # None, a tensorboard_trace_handler, or a wrong type for the check to name
    owner_ref = weakref.ref(owner)  # the core holds the callback, and the Profiler the core
    try:
        inspect.signature(on_trace_ready).bind(owner)
        takes_profiler = True
    except TypeError:
        takes_profiler = False
    except ValueError:  # no signature (a builtin): torch's convention
        takes_profiler = True

    def call(_prof: Any) -> None:
        profiler = owner_ref()
        if profiler is not None:
            on_trace_ready(profiler) if takes_profiler else on_trace_ready()

    return call


def tensor_board_trace_handler() -> None:
    """MindSpore's online analysis handler, given as is (not called) as a
    Profiler's ``on_trace_ready``: each cycle of the schedule is analysed
    as it closes, under the Profiler's ``output_path``
    (``tensorboard_trace_handler(output_path)``). Called directly it does
    nothing but say so."""
    _log.error("tensor_board_trace_handler: give it to Profiler(on_trace_ready=tensor_board_trace_handler) "
               "without calling it; called, it does nothing")


class Profiler:
    """Records training: MindSpore's ``Profiler`` class.

    Recording starts when it is made (``start_profile=True``) or at
    ``start()``; ``analyse()`` stops it and analyses what it recorded into
    ``{output_path}/{host}_{pid}_{time}_trainprof/PROFILER_OUTPUT/`` (the
    timeline, op_statistic.csv, step_trace_time.csv, ...; MindSpore's
    ``*_ascend_ms/ASCEND_PROFILER_OUTPUT``).

    Args (keywords, as MindSpore names them):
        start_profile: start recording now (default True).
        output_path: where the run directories go (default ``"./data"``),
            resolved against the current directory when made.
        profiler_level: how much of the framework is recorded
            (``ProfilerLevel.Level0``, the default: operators; ``Level1``
            adds input shapes; ``LevelNone``: steps and ranges only).
        activities: ``[ProfilerActivity.CPU, ProfilerActivity.NPU]`` by
            default: the host, and the device (here the GPU, when torch sees
            one; ``ProfilerActivity.GPU`` names it).
        schedule: a ``trainprof.schedule``: which ``step()`` calls are
            recorded; each cycle is a run handed to ``on_trace_ready``.
        on_trace_ready: called when a cycle closes: a
            ``tensorboard_trace_handler(dir)`` (the cycle is analysed there)
            or any callable, with the Profiler when it takes one argument
            (torch's convention), else with none (MindSpore's);
            ``tensor_board_trace_handler`` (MindSpore's, not called)
            analyses each cycle under ``output_path``.
        profile_memory: record every allocation and free.
        with_stack: the Python call stack of each operator.
        record_shapes: each operator's input shapes and types.
        data_process: the data pipeline's stages (DataLoader) in dataset.csv.
        data_simplification: remove a run's raw data once it is analysed,
            so that it cannot be analysed again. Default: True, as
            MindSpore, except in a process that is one of several ranks,
            whose runs ``trainprof cluster`` analyses again (clocks aligned,
            collectives matched across ranks).
        sync_enable: on a GPU, each outermost operator's host time includes
            its device time (default True, as MindSpore on GPU); no effect
            without the GPU recorded.
        host_sys: host system usage to sample (``HostSystem`` list).
        mstx: accepted: ``trainprof.mstx`` markers are recorded whenever
            the Profiler records.
        export_type: ``[ExportType.Text]`` (default), ``[ExportType.Db]``
            (trainprof.db, SQLite) or both.
        profile_communication: record torch.distributed's calls (MPI's are
            recorded whenever libtrainprof_mpi is loaded); default: on in a
            process that is one of several ranks (as MindSpore records
            communication at Level0).
        aicore_metrics, l2_cache, hbm_ddr, pcie, parallel_strategy:
            Ascend-only in MindSpore: accepted; a value other than the
            default says once, in one line, that it has no effect here and
            what to use instead.
        Any other keyword is said once and ignored, as MindSpore does.

    Raises:
        TypeError, ValueError: a setting of the wrong type or value (named).
    """

    def __init__(self, *, start_profile: bool = True, output_path: Union[str, "os.PathLike[str]"] = "./data",
                 profiler_level: ProfilerLevel = ProfilerLevel.Level0,
                 activities: Optional[Iterable[ProfilerActivity]] = None,
                 schedule: Optional[_schedule_class] = None, on_trace_ready: Optional[Callable[..., Any]] = None,
                 profile_memory: bool = False, with_stack: bool = False, record_shapes: bool = False,
                 data_process: bool = False, data_simplification: Optional[bool] = None, sync_enable: bool = True,
                 host_sys: Optional[Sequence[Union[HostSystem, str]]] = None, mstx: bool = False,
                 export_type: Optional[Sequence[Union[ExportType, str]]] = None,
                 profile_communication: Optional[bool] = None,
                 aicore_metrics: AicoreMetrics = AicoreMetrics.AiCoreNone, l2_cache: bool = False,
                 hbm_ddr: bool = False, pcie: bool = False, parallel_strategy: bool = False,
                 **kwargs: Any) -> None:
        self._has_started = False
        self._prof: Optional[profile] = None
        for name in sorted(kwargs):
            _say_once(f"Profiler.{name}", f"Profiler: {name!r} is not a parameter of Profiler; ignored")
        options = _trainprof.ProfilerOptions()
        options.output_path = os.path.abspath(check_path("output_path", output_path))
        options.profiler_level = _LEVELS[_check_level(profiler_level)]
        device_by_default = activities is None
        options.activities = _check_activities([ProfilerActivity.CPU] if device_by_default else activities)
        if device_by_default and _npu_is_the_gpu(said=False):
            options.activities = _check_activities([ProfilerActivity.CPU, ProfilerActivity.GPU])
        options.schedule = _check_schedule(schedule)
        options.profile_memory = check_bool("profile_memory", profile_memory)
        options.with_stack = check_bool("with_stack", with_stack)
        options.record_shapes = check_bool("record_shapes", record_shapes)
        options.data_process = check_bool("data_process", data_process)
        # MindSpore's default removes the raw data once analysed; the ranks
        # of a job keep it, which `trainprof cluster` analyses again.
        several_ranks = one_of_several_ranks()
        options.data_simplification = not several_ranks if data_simplification is None else check_bool(
            "data_simplification", data_simplification)
        gpu = _trainprof.Activity.GPU in options.activities
        options.sync_enable = check_bool("sync_enable", sync_enable) and gpu
        options.host_sys = {_HOST_SYSTEM[part] for part in _check_host_sys(host_sys)}
        check_bool("mstx", mstx)
        kinds = _check_export_type(export_type)
        options.export_text = ExportType.Text in kinds
        options.export_db = ExportType.Db in kinds
        # MindSpore records communication at Level0; torch.distributed's
        # calls need it asked for (docs/GUIDE.md), so a rank of several asks.
        options.profile_communication = several_ranks if profile_communication is None else check_bool(
            "profile_communication", profile_communication)
        self._say_ascend_only(aicore_metrics, l2_cache, hbm_ddr, pcie, parallel_strategy)
        options.start_profile = check_bool("start_profile", start_profile)
        if on_trace_ready is tensor_board_trace_handler:
            on_trace_ready = tensorboard_trace_handler(options.output_path)
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"on_trace_ready must be callable, got {type(on_trace_ready).__name__}")
        self._has_schedule = schedule is not None
        self._stepped = False  # step() called since the schedule began (MindSpore's stop() rule)
        self._optimizer_steps = 0  # training steps ended so far, recorded or not
        self._prof = profile._from_options(options, _trace_ready_caller(on_trace_ready, self))
        self._has_started = self._prof._cpp is not None and self._prof._cpp.started()
        if not self._has_schedule:
            # Step k is the k-th optimizer step, counted from 1 as MindSpore's
            # cur_step_num and DynamicProfilerMonitor's steps.
            if self._prof._cpp is not None:
                self._prof._cpp.set_step_num(1)
            _zero_code.follow_optimizer_steps(self)

    @staticmethod
    def _say_ascend_only(aicore_metrics: Any, l2_cache: Any, hbm_ddr: Any, pcie: Any, parallel_strategy: Any) -> None:
        if not isinstance(aicore_metrics, AicoreMetrics):
            raise TypeError(f"aicore_metrics must be a trainprof.AicoreMetrics, got {aicore_metrics!r}")
        given = {"aicore_metrics": aicore_metrics is not AicoreMetrics.AiCoreNone,
                 "l2_cache": check_bool("l2_cache", l2_cache), "hbm_ddr": check_bool("hbm_ddr", hbm_ddr),
                 "pcie": check_bool("pcie", pcie),
                 "parallel_strategy": check_bool("parallel_strategy", parallel_strategy)}
        for name, on in given.items():
            if on:
                _say_once(f"Profiler.{name}", f"Profiler: {name} is Ascend-only and has no effect here "
                          f"({_ASCEND_ONLY[name]})")

    # ---- control: never raises ----

    def start(self) -> None:
        """Starts recording. Already started: a warning, nothing else (as
        MindSpore). Started between two training steps, the first step
        recorded is a whole step."""
        if self._has_started:
            _log.warning("Profiler.start(): the profiler has already started; start() again has no effect")
            return
        if self._prof is None:
            return
        self._has_started = True
        self._stepped = False
        cpp = self._prof._cpp
        if not self._has_schedule and cpp is not None:
            cpp.set_step_num(self._optimizer_steps + 1)  # the training step beginning now
        # Called between training steps (a callback's step_begin, after a
        # step of the loop): what follows is a whole step, not start-up.
        self._prof._start(at_step_boundary=not self._has_schedule)

    def stop(self) -> None:
        """Stops recording; the run is closed (and handed to
        ``on_trace_ready``). Not started: an error is logged. With a
        schedule, before any ``step()``: a warning, and recording goes on
        (MindSpore's rule: a schedule's steps are ``step()`` calls)."""
        if self._has_schedule and self._has_started and not self._stepped:
            _log.warning("Profiler.stop(): the profiler has a schedule and step() was not called; "
                         "call step() at the end of each training step to record by the schedule")
            return
        if not self._has_started:
            _log.error("Profiler.stop(): the profiler has not started; stop() has no effect")
            return
        self._finish()

    def _finish(self) -> None:
        """Stops the core when it records (a schedule's last cycle may have stopped it)."""
        self._has_started = False
        if self._prof is not None:
            self._prof.__exit__(None, None, None)

    def step(self) -> None:
        """Ends a training step under a schedule. Without a schedule, or
        while stopped, an error is logged and nothing happens (as MindSpore)."""
        if not self._has_schedule:
            _log.error("Profiler.step(): there is no schedule, so step() has no effect "
                       "(steps are the optimizer's step() calls)")
            return
        if not self._has_started:
            _log.error("Profiler.step(): the profiler is stopped; step() has no effect")
            return
        self._stepped = True
        if self._prof is not None:
            self._prof.step()

    def _on_optimizer_step(self) -> None:
        """One training step ended (without a schedule): recorded as a step
        while started, counted either way."""
        self._optimizer_steps += 1
        if self._has_started and self._prof is not None and self._prof._cpp is not None \
                and self._prof._cpp.started():
            self._prof.step()

    def __enter__(self) -> "Profiler":
        if not self._has_started:
            self.start()
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if self._has_started:
            self.stop()
            if self._has_started:  # a schedule never stepped: the block is over all the same
                self._finish()

    def __del__(self) -> None:
        try:
            if getattr(self, "_has_started", False):
                self._finish()
                _log.warning("Profiler was still recording when it was deleted; it is stopped now")
        except Exception:
            pass

    # ---- analysis ----

    def analyse(self, offline_path: Optional[Union[str, "os.PathLike[str]"]] = None, pretty: bool = False,
                step_list: Optional[Sequence[int]] = None, mode: str = "sync") -> Optional[Any]:
        """Stops recording and analyses the runs recorded since the last
        ``analyse()`` into each run's ``PROFILER_OUTPUT/``.

        Args:
            offline_path: analyse the runs at or below this directory
                instead (``offline_analyse``'s work, in this process).
            pretty: indent the JSON outputs.
            step_list: only these steps (consecutive ints; default all).
            mode: ``"sync"`` analyses now; ``"async"`` in a child process,
                so that training goes on (its failures are logged).

        With a schedule, cycles are analysed by ``on_trace_ready``
        (``tensorboard_trace_handler``): a warning, nothing analysed here.
        A wrong argument is logged as an error and nothing is analysed: the
        runs stay on disk for ``Profiler.offline_analyse``.

        Returns:
            The report (``ok``, ``runs``), or None when nothing was analysed.
        """
        try:
            pretty = check_bool("pretty", pretty)
            steps = check_step_list("step_list", step_list)
            if mode not in ("sync", "async"):
                raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        except (TypeError, ValueError) as e:
            _log.error("Profiler.analyse(): %s; nothing analysed (the runs stay for Profiler.offline_analyse)", e)
            return None
        if offline_path is not None:
            return Profiler.offline_analyse(offline_path, pretty, step_list)
        if self._has_started:
            self._finish()
        if self._has_schedule:
            _log.warning("Profiler.analyse(): the profiler has a schedule: its cycles are analysed by "
                         "on_trace_ready (tensorboard_trace_handler)")
            return None
        cpp = self._prof._cpp if self._prof is not None else None
        if cpp is None:
            return None
        analyse_mode = _trainprof.AnalyseMode.Async if mode == "async" else _trainprof.AnalyseMode.Sync
        report = cpp.analyse(analyse_mode, pretty, False, steps)
        _log_report("Profiler.analyse()", report)
        return report

    @classmethod
    def offline_analyse(cls, path: Union[str, "os.PathLike[str]"], pretty: bool = False,
                        step_list: Optional[Sequence[int]] = None,
                        data_simplification: bool = False) -> Optional[Any]:
        """Analyses, after recording, every run at or below ``path`` (a run
        directory, an ``output_path``, or a directory of ranks'
        ``output_path``s), a worker process per run, at most cores / 2 at
        once. Runs of a process that crashed are analysed as far as their
        data reached the disk.

        Args:
            path: the directory to analyse.
            pretty: indent the JSON outputs.
            step_list: only these steps (consecutive ints; default all).
            data_simplification: remove each run's raw data once analysed.

        A path that holds no run, or a wrong argument, is logged as an
        error (as MindSpore) and None is returned.

        Returns:
            The report (``ok``, ``runs``), or None when nothing was analysed.
        """
        from .analysis import analyse

        try:
            report = analyse(path, None, pretty, step_list, data_simplification)
        except (TypeError, ValueError) as e:
            _log.error("Profiler.offline_analyse(): %s", e)
            return None
        _log_report("Profiler.offline_analyse()", report)
        return report

    # ---- metadata ----

    def add_metadata(self, key: str, value: str) -> None:
        """Adds ``key: value`` (strings) to profiler_metadata.json of the runs
        closed from now on."""
        if self._prof is not None:
            self._prof.add_metadata(key, value)

    def add_metadata_json(self, key: str, value: str) -> None:
        """As add_metadata, with ``value`` a JSON text stored as JSON."""
        if self._prof is not None:
            self._prof.add_metadata_json(key, value)

    # ---- state ----

    @property
    def step_num(self) -> int:
        """The current step's number: ``step()`` calls with a schedule,
        training steps ended so far without."""
        if self._has_schedule:
            return self._prof.step_num if self._prof is not None else 0
        return self._optimizer_steps

    @property
    def current_action(self) -> ProfilerAction:
        """The schedule's action for the current step (NONE while stopped)."""
        return self._prof.current_action if self._prof is not None else ProfilerAction.NONE


def _log_report(caller: str, report: Any) -> None:
    """Where the outputs went (failures are said by the analysis itself)."""
    for run in report.runs:
        if run.ok:
            _log.info("%s: %s analysed into %s", caller, run.run_dir, os.path.join(run.run_dir, "PROFILER_OUTPUT"))
