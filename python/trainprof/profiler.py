# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``trainprof.profile`` and its settings, with torch.profiler's and
mindspore.profiler's names and meanings, on trainprof's C++ core.

Changing ``from torch.profiler import profile, schedule, ...`` (or
``mindspore.profiler``) to ``from trainprof import ...`` is meant to be the
whole switch. Settings are checked when they are made: a wrong type raises
TypeError, a wrong value ValueError, each naming the parameter. Once a
profile exists, nothing it does raises into the training loop: misuse and
failures are logged (logger ``trainprof``, and ``[trainprof]`` lines on
stderr from the core).
"""

from __future__ import annotations

import enum
import logging
import os
import sys
import weakref
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import _data, _distributed, _exports, _gc, _gpu, _memory, _stacks, _torch
from . import _trainprof
from ._export_type import ExportType, _check_export_type
from ._modules import ModuleTracker
from ._validate import check_bool, check_int, check_option, check_path, check_str, check_str_list, utf8_text

_log = logging.getLogger("trainprof")


class ProfilerActivity(enum.Enum):
    """What to record.

    ``CPU``: host activity: steps, ``record_function`` ranges, mstx markers
    and, in a PyTorch process, every aten operator. ``GPU`` (``CUDA`` is the
    same, torch's name): GPU kernels, copies, sets, CUDA runtime and driver
    calls and synchronizations through CUPTI: kernel_details.csv, GPU rows in
    op_statistic.csv, device time per operator in operator_details.csv, the
    step breakdown from the device's busy and idle time, GPU tracks in the
    timeline. CUPTI is the one torch loaded, else an NVIDIA wheel's
    (``TRAINPROF_CUPTI_LIBRARY`` overrides). Without CUPTI or a GPU the
    profiler says why once (and the analysis repeats it) and records the host
    as usual.

    ``NPU`` is MindSpore's name for its device (Ascend): the device here is
    the GPU, so NPU records what GPU does when torch sees a CUDA GPU, and
    nothing more than the host otherwise (said once when given).
    """

    CPU = "CPU"
    GPU = "GPU"
    CUDA = "GPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    """How much the torch collector records (mindspore.profiler's names).

    ``LevelNone``: no operators (steps and user ranges still);
    ``Level0``: aten operators, autograd nodes and record_function scopes,
    shapes only with ``record_shapes``; ``Level1``: also every operator's
    input shapes and types; ``Level2``: also every other RecordFunction scope
    (TorchScript, static runtime, ...).
    """

    LevelNone = "LevelNone"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class ProfilerAction(enum.Enum):
    """What a schedule does at a step (torch.profiler's names)."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class HostSystem(enum.Enum):
    """Host system usage to sample (torch_npu's ``HostSystem``), for
    ``_ExperimentalConfig(host_sys=[...])``: CPU per core, of the host and of
    the process; memory in use and the process' RSS; disk and network bytes
    per second."""

    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"


_HOST_SYSTEM = {
    HostSystem.CPU: _trainprof.HostSystem.CPU,
    HostSystem.MEM: _trainprof.HostSystem.MEM,
    HostSystem.DISK: _trainprof.HostSystem.DISK,
    HostSystem.NETWORK: _trainprof.HostSystem.NETWORK,
}


def _check_host_sys(host_sys: Optional[Sequence[Union[HostSystem, str]]]) -> list[HostSystem]:
    if host_sys is None:
        return []
    if isinstance(host_sys, (str, HostSystem)) or not isinstance(host_sys, (list, tuple, set)):
        raise TypeError(f"host_sys must be a list of HostSystem or of 'cpu', 'mem', 'disk', 'network', "
                        f"got {host_sys!r}")
    parts = []
    for item in host_sys:
        try:
            parts.append(item if isinstance(item, HostSystem) else HostSystem(item))
        except ValueError:
            raise ValueError(f"host_sys: unknown part {item!r} (known: 'cpu', 'mem', 'disk', 'network')") from None
    return parts


_LEVELS = {
    ProfilerLevel.LevelNone: _trainprof.ProfilerLevel.None_,
    ProfilerLevel.Level0: _trainprof.ProfilerLevel.Level0,
    ProfilerLevel.Level1: _trainprof.ProfilerLevel.Level1,
    ProfilerLevel.Level2: _trainprof.ProfilerLevel.Level2,
}


class schedule:
    """Which steps are recorded: torch.profiler.schedule's semantics.

    After ``skip_first`` ignored steps, cycles of ``wait`` idle steps,
    ``warmup`` steps (prepared, not kept) and ``active`` recorded steps repeat
    ``repeat`` times (0: until training ends). Each cycle is written to its
    own run directory and ``on_trace_ready`` is called when it closes. Steps
    are counted by ``profile.step()``, each becoming a ``ProfilerStep#N``
    range.

    Args:
        wait: idle steps at the start of each cycle (>= 0).
        warmup: steps prepared but not kept (>= 0; 0 logs a warning: the
            first recorded step is then cold).
        active: recorded steps per cycle (>= 1).
        repeat: cycles (>= 0; 0 means unbounded).
        skip_first: steps ignored before the first cycle (>= 0).
        skip_first_wait: torch.profiler's; a value other than 0 is said once
            and ignored (the first cycle keeps its wait steps).

    Calling the object with a step number returns its ``ProfilerAction``.
    """

    def __init__(self, *, wait: int, warmup: int = 0, active: int, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0) -> None:
        if check_int("schedule.skip_first_wait", skip_first_wait, 0) != 0:
            _ignored("schedule.skip_first_wait", "the first cycle keeps its wait steps")
        self.wait = check_int("schedule.wait", wait, 0)
        self.warmup = check_int("schedule.warmup", warmup, 0)
        self.active = check_int("schedule.active", active, 1)
        self.repeat = check_int("schedule.repeat", repeat, 0)
        self.skip_first = check_int("schedule.skip_first", skip_first, 0)
        self._cpp = _trainprof.Schedule(self.wait, self.warmup, self.active, self.repeat, self.skip_first)
        self._cpp.validate()  # limits of the C++ core (int range) raise ValueError

    def __call__(self, step: int) -> ProfilerAction:
        """The action for 0-based step ``step``."""
        check_int("step", step, 0)
        return ProfilerAction[self._cpp.action(step).name]

    def __repr__(self) -> str:
        return (f"schedule(wait={self.wait}, warmup={self.warmup}, active={self.active}, "
                f"repeat={self.repeat}, skip_first={self.skip_first})")


class _TraceHandler:
    """What ``tensorboard_trace_handler`` returns: given as ``on_trace_ready``,
    the core writes each run under ``dir_name`` and (with ``analyse_flag``)
    analyses it as soon as it closes, without a call into Python."""

    def __init__(self, dir_name: str, worker_name: str, analyse_flag: bool, async_mode: bool) -> None:
        self.dir_name = dir_name
        self.worker_name = worker_name
        self.analyse_flag = analyse_flag
        self.async_mode = async_mode

    def __call__(self, prof: "profile") -> None:
        """Analyses the runs ``prof`` closed (for use inside another
        on_trace_ready callback); they are in ``prof``'s output directory."""
        if self.analyse_flag:
            prof._analyse_closed_runs(self.async_mode)

    def __repr__(self) -> str:
        return (f"tensorboard_trace_handler(dir_name={self.dir_name!r}, worker_name={self.worker_name!r}, "
                f"analyse_flag={self.analyse_flag}, async_mode={self.async_mode})")


def tensorboard_trace_handler(dir_name: Optional[Union[str, "os.PathLike[str]"]] = None,
                              worker_name: Optional[str] = None, analyse_flag: bool = True,
                              async_mode: bool = False, *, use_gzip: bool = False,
                              use_python_export: bool = False) -> _TraceHandler:
    """An ``on_trace_ready`` that writes each recorded cycle under ``dir_name``
    and analyses it there.

    Args:
        dir_name: the directory that receives the run directories
            ``{worker_name}_{timestamp}_trainprof`` (default ``./data``),
            resolved against the current directory when the handler is made.
        worker_name: first part of each run directory's name (default
            ``{host}_{pid}``); one file name: no ``/`` nor ``..``.
        analyse_flag: analyse each run when it closes (outputs in
            ``{run}/PROFILER_OUTPUT``); False leaves it for ``trainprof.analyse``.
        async_mode: analyse in a child process so that training goes on.
        use_gzip, use_python_export: torch.profiler's (keywords here: the
            third and fourth positions are MindSpore's); True is said once
            and ignored (the trace is linked uncompressed, as analysed).
    """
    if check_bool("use_gzip", use_gzip):
        _ignored("tensorboard_trace_handler.use_gzip", "the trace beside the runs is a link to the analysed one")
    if check_bool("use_python_export", use_python_export):
        _ignored("tensorboard_trace_handler.use_python_export", "the trace is written by the C++ analysis")
    if dir_name is None:
        dir_name = "./data"
    # Resolved now: a later os.chdir() of the script moves nothing.
    dir_text = os.path.abspath(check_path("dir_name", dir_name))
    worker = "" if worker_name is None else check_str("worker_name", worker_name)
    return _TraceHandler(dir_text, worker, check_bool("analyse_flag", analyse_flag),
                         check_bool("async_mode", async_mode))


class _ExperimentalConfig:
    """Extra settings, as mindspore.profiler._ExperimentalConfig.

    Args:
        profiler_level: how much the torch collector records (a ProfilerLevel
            or its name, ``"Level1"``).
        mstx: accepted for compatibility; trainprof records ``trainprof.mstx``
            markers whenever it records (each costs a few nanoseconds).
        mstx_domain_include: only these marker domains are recorded.
        mstx_domain_exclude: these marker domains are not recorded (give one
            of the two lists, not both).
        data_simplification: remove the raw data of a run once it is
            analysed (default False: the run can be analysed again; MindSpore's
            default is True).
        export_type: output formats, ``[ExportType.Text]`` (or ``["text"]``),
            ``["db"]`` (PROFILER_OUTPUT/trainprof.db, SQLite) or both.
        host_sys: host system usage to sample while recording, a list of
            ``HostSystem`` (or ``"cpu"``, ``"mem"``, ``"disk"``,
            ``"network"``): counters in the timeline,
            ``host_{cpu,mem,disk,network}_usage.csv``, and the summary names
            the steps in which the host CPU was saturated.
        host_sys_interval_ms: how often the host is sampled (default 50).
        sample_operators: about one operator call in this many is recorded
            (LibTorch's RecordFunction sampling; default 1: all; 0 is 1). The
            analysis scales operators' counts and times by it, and the
            summary says they are sampled: for always-on recording where
            recording every operator costs too much.
        python_stack_sampling_ms: every Python thread's stack is read this
            often while recording (default 10; 0: off), so that the analysis
            names the functions that spent host time outside operators
            (docs/OUTPUTS.md, "Python outside operators").
    """

    def __init__(self, profiler_level: ProfilerLevel = ProfilerLevel.Level0, mstx: bool = False,
                 mstx_domain_include: Optional[Sequence[str]] = None,
                 mstx_domain_exclude: Optional[Sequence[str]] = None, data_simplification: bool = False,
                 export_type: Optional[Sequence[Union[ExportType, str]]] = None,
                 host_sys: Optional[Sequence[Union[HostSystem, str]]] = None,
                 host_sys_interval_ms: int = 50, sample_operators: int = 1,
                 python_stack_sampling_ms: int = 10) -> None:
        self.profiler_level = _check_level(profiler_level)
        self.mstx = check_bool("mstx", mstx)
        self.mstx_domain_include = [utf8_text(d) for d in check_str_list("mstx_domain_include",
                                                                          mstx_domain_include or [])]
        self.mstx_domain_exclude = [utf8_text(d) for d in check_str_list("mstx_domain_exclude",
                                                                          mstx_domain_exclude or [])]
        if self.mstx_domain_include and self.mstx_domain_exclude:
            raise ValueError("give mstx_domain_include or mstx_domain_exclude, not both")
        self.data_simplification = check_bool("data_simplification", data_simplification)
        self.export_type = _check_export_type(export_type)
        self.host_sys = _check_host_sys(host_sys)
        self.host_sys_interval_ms = check_option("host_sys_interval_ms", host_sys_interval_ms)
        self.sample_operators = check_option("sample_operators", sample_operators)
        self.python_stack_sampling_ms = check_option("python_stack_sampling_ms", python_stack_sampling_ms)


def _check_level(value: Any) -> ProfilerLevel:
    """A ProfilerLevel, or its name ("Level0", as the Options table writes it)."""
    if isinstance(value, ProfilerLevel):
        return value
    if isinstance(value, str):
        try:
            return ProfilerLevel[value]
        except KeyError:
            raise ValueError(f"profiler_level: unknown level {value!r} (known: "
                             f"{', '.join(repr(m.name) for m in ProfilerLevel)})") from None
    raise TypeError(f"profiler_level must be a trainprof.ProfilerLevel or its name, got {value!r}")


def _check_activities(activities: Optional[Iterable[Any]]) -> set[_trainprof.Activity]:
    """The core's activities for ``activities`` (None: CPU). Members of
    torch.profiler.ProfilerActivity are taken by name as well."""
    if activities is None:
        return {_trainprof.Activity.CPU}
    if isinstance(activities, (str, bytes)) or not isinstance(activities, Iterable):
        raise TypeError(f"activities must be a list of ProfilerActivity, got {type(activities).__name__}")
    if isinstance(activities, dict):  # torch's per-activity configs (event names to collect)
        if any(activities.values()):
            _ignored("activities' per-activity configs", "every event of an activity is collected")
        activities = list(activities)
    result: set[_trainprof.Activity] = set()
    for item in activities:
        name = getattr(item, "name", None)
        if name == "CPU":
            result.add(_trainprof.Activity.CPU)
        elif name in ("GPU", "CUDA") or (name == "NPU" and _npu_is_the_gpu(said=True)):
            result.add(_trainprof.Activity.GPU)
            _gpu.point_core_at_wheel_cupti()
        elif name != "NPU":
            raise ValueError(f"activities: {item!r} is not a ProfilerActivity (CPU, GPU, CUDA or NPU)")
    if not result:
        if any(getattr(item, "name", None) == "NPU" for item in activities):
            return {_trainprof.Activity.CPU}  # [NPU] without a GPU: the host, as said
        raise ValueError("activities must not be empty")
    return result


def _npu_is_the_gpu(said: bool) -> bool:
    """Whether MindSpore's device activity, NPU, is the GPU here: torch is
    imported and sees a CUDA GPU (torch is not imported for it). With
    ``said``, the choice is logged once per process."""
    torch = sys.modules.get("torch")
    try:
        gpu = bool(torch is not None and torch.cuda.is_available())
    except Exception:
        gpu = False
    if said and "ProfilerActivity.NPU" not in _warned_ignored:
        _warned_ignored.add("ProfilerActivity.NPU")
        if gpu:
            _log.warning("ProfilerActivity.NPU: there is no Ascend NPU here; the GPU is recorded in its place "
                         "(as ProfilerActivity.GPU)")
        else:
            _log.warning("ProfilerActivity.NPU: there is no Ascend NPU here and torch sees no CUDA GPU; "
                         "the host is recorded (ProfilerActivity.CPU)")
    return gpu


class profile:
    """Records training: torch.profiler.profile's and mindspore.profiler.profile's API.

    As a context manager (``with profile(...) as prof:``) or an object with
    ``start()`` / ``step()`` / ``stop()``. With a ``schedule``, call ``step()``
    at the end of every training step. Each recorded cycle (or each
    start-stop span without a schedule) becomes one run directory, under the
    ``tensorboard_trace_handler``'s directory or ``./data``.

    Args (keyword-only, as torch.profiler's):
        activities: list of ProfilerActivity (default ``[ProfilerActivity.CPU]``).
        schedule: a ``trainprof.schedule``; None records from start to stop.
        on_trace_ready: called with this object each time a run closes:
            ``tensorboard_trace_handler(...)`` or any callable (what it
            raises is logged, not passed on).
        record_shapes: record each operator's input shapes and types.
        profile_memory: record every allocation and free LibTorch reports.
        with_stack: record each operator's Python call stack, as torch's
            profiler shows it ("file(line): function", innermost first), in
            the timeline's ``Call stack`` and operator_details.csv. Operators
            run without the GIL (autograd's backward) have none.
        with_flops: count the FLOPs of matrix products, convolutions, add, mul.
        with_modules: record each operator's nn.Module hierarchy
            (``TOP(Net)::fc1(Linear)``) in the timeline's ``Module Hierarchy``
            and operator_details.csv; forward operators only.
        data_process: record data pipeline stages: torch.utils.data.DataLoader's
            (dataset fetch, collate, pin_memory, the loop's wait; worker
            processes included) in dataset.csv and the timeline's Dataset tracks.
        start_profile: True: start recording now, as MindSpore's Profiler
            does (the torch idiom, ``with`` or ``start()``, then finds it
            started, which is fine). The default, False, is torch.profiler's:
            recording starts at ``start()`` / ``with``, so that set-up done
            between making the profile and entering it is not recorded.
        experimental_config: an ``_ExperimentalConfig``.
        sync_enable: MindSpore's (GPU only): each outermost operator ends
            when the GPU has finished what was queued so far, so its host
            time includes its device time. It serializes host and GPU, so it
            is off by default; ``ProfilerActivity.CUDA`` times every kernel
            without it. Needs CUDA initialized before the profile starts
            (said once, and ignored, otherwise).
        execution_trace_observer, acc_events, custom_trace_id_callback,
        post_processing_timeout_s: torch.profiler's, taken so that its code
            runs unchanged; a value other than the default is said once (a
            warning naming it and why) and ignored.

    Raises:
        TypeError, ValueError: a setting of the wrong type or value (named).
    """

    def __init__(self, *, activities: Optional[Iterable[ProfilerActivity]] = None,
                 schedule: Optional["schedule"] = None,
                 on_trace_ready: Optional[Callable[["profile"], Any]] = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, data_process: bool = False, start_profile: bool = False,
                 experimental_config: Optional[_ExperimentalConfig] = None, sync_enable: bool = False,
                 execution_trace_observer: Any = None, acc_events: bool = False,
                 custom_trace_id_callback: Optional[Callable[[], str]] = None,
                 post_processing_timeout_s: Optional[float] = None, **unexpected: Any) -> None:
        self._cpp: Optional[_trainprof.Profiler] = None
        if unexpected:
            raise TypeError(_unexpected_keywords("profile", unexpected, type(self).__init__))
        self._modules: Optional[ModuleTracker] = None
        self._torch_flag = False  # this profile holds torch's "a profiler is on" flag up
        options = _trainprof.ProfilerOptions()
        options.activities = _check_activities(activities)
        if _trainprof.Activity.GPU in options.activities and _torch.profiler_running():
            # CUPTI hands its buffers to one client: taking them would blind
            # the torch.profiler run the user has open.
            options.activities = (options.activities - {_trainprof.Activity.GPU}) or {_trainprof.Activity.CPU}
            _log.warning("activities: torch.profiler is recording in this process and CUPTI serves one profiler "
                         "at a time: this trainprof profile records no GPU activity (host activity as usual)")
        options.schedule = _check_schedule(schedule)
        options.record_shapes = check_bool("record_shapes", record_shapes)
        options.profile_memory = check_bool("profile_memory", profile_memory)
        options.with_stack = check_bool("with_stack", with_stack)
        options.with_flops = check_bool("with_flops", with_flops)
        options.data_process = check_bool("data_process", data_process)
        options.start_profile = check_bool("start_profile", start_profile)
        options.with_modules = check_bool("with_modules", with_modules)
        options.sync_enable = check_bool("sync_enable", sync_enable)
        _apply_experimental_config(options, experimental_config)
        for name, value in (("execution_trace_observer", execution_trace_observer), ("acc_events", acc_events),
                            ("custom_trace_id_callback", custom_trace_id_callback),
                            ("post_processing_timeout_s", post_processing_timeout_s)):
            if value is not None and value is not False:
                _ignored(name, _TORCH_ONLY_ARGUMENTS[name])
        self._set_on_trace_ready(options, on_trace_ready)
        if _trainprof.Activity.CPU in options.activities:
            _torch.warn_if_unavailable()  # before the core starts: the collector must be registered
        self._start_core(options)

    @classmethod
    def _from_core_options(cls, options: _trainprof.ProfilerOptions) -> "profile":
        """A profile of core options as they are (TRAINPROF_OPTIONS); torch is
        not imported for it (see _zero_code)."""
        prof = cls.__new__(cls)
        prof._cpp = None
        prof._modules = None
        prof._torch_flag = False
        prof._start_core(options)
        return prof

    @classmethod
    def _from_options(cls, options: _trainprof.ProfilerOptions, on_trace_ready: Any) -> "profile":
        """A profile of checked core options and an ``on_trace_ready`` (as
        __init__ takes it): trainprof.Profiler's, whose settings are MindSpore's."""
        prof = cls.__new__(cls)
        prof._cpp = None
        prof._modules = None
        prof._torch_flag = False
        prof._set_on_trace_ready(options, on_trace_ready)
        if _trainprof.Activity.CPU in options.activities:
            _torch.warn_if_unavailable()
        prof._start_core(options)
        return prof

    def _start_core(self, options: _trainprof.ProfilerOptions) -> None:
        self._auto_started = options.start_profile
        if options.data_process:
            _torch.when_imported(_data.install)  # DataLoader stages (before the core records)
        if options.with_modules:
            self._modules = ModuleTracker()
            if options.start_profile:
                self._modules.install()
        self._tagging_memory = False
        self._profile_memory = options.profile_memory
        if options.profile_memory:
            _torch.when_imported(_memory.install)  # what allocations hold, as tags
            if options.start_profile:
                self._tag_memory(True)
        _distributed.sync()  # start_profile opens a run now
        self._records_cpu = _trainprof.Activity.CPU in options.activities
        if self._records_cpu:
            _gc.install()  # collections as ranges, for the advisor's gc_pauses
        self._cpp = _trainprof.Profiler(options)  # ValueError for what only the core checks
        self._sampling_ms = options.python_stack_sampling_ms if self._records_cpu else 0
        self._sampling = False
        self._hold_torch_flag()
        self._hold_sampler()

    def _tag_memory(self, on: bool) -> None:
        """Memory tags (_memory) while this profile records, profile_memory."""
        if on and self._profile_memory and not self._tagging_memory:
            self._tagging_memory = True
            _memory.started()
        elif not on and self._tagging_memory:
            self._tagging_memory = False
            _memory.stopped()

    def _hold_torch_flag(self) -> None:
        """Torch sees a profiler on while this one records CPU activity, so
        that self-annotating code (torch.compile's graph ranges) makes its
        ranges; see _torch.profile_started."""
        if self._records_cpu and not self._torch_flag and self._cpp is not None and self._cpp.started():
            self._torch_flag = True
            _torch.profile_started()

    def _hold_sampler(self) -> None:
        """The Python stack sampler runs while this profile records (_stacks)."""
        if not self._sampling and self._sampling_ms > 0 and self._cpp is not None and self._cpp.started():
            self._sampling = _stacks.acquire(self._sampling_ms)

    def _release_sampler(self) -> None:
        if getattr(self, "_sampling", False):
            self._sampling = False
            _stacks.release()

    def _release_torch_flag(self) -> None:
        if self._torch_flag:
            self._torch_flag = False
            _torch.profile_stopped()

    def _set_on_trace_ready(self, options: _trainprof.ProfilerOptions, on_trace_ready: Any) -> None:
        if on_trace_ready is None:
            return
        if isinstance(on_trace_ready, _TraceHandler):
            h = on_trace_ready
            options.set_trace_handler(h.dir_name, h.worker_name, h.analyse_flag, h.async_mode)
            return
        if not callable(on_trace_ready):
            raise TypeError(f"on_trace_ready must be callable, got {type(on_trace_ready).__name__}")
        # A weak reference: the core holds the callback, and this object holds the core.
        this = weakref.ref(self)

        def trace_ready() -> None:
            prof = this()
            if prof is None:
                return
            try:
                on_trace_ready(prof)
            except Exception:
                _log.exception("on_trace_ready raised; training goes on")

        options.set_on_trace_ready(trace_ready)

    # ---- control: never raises ----

    def start(self) -> None:
        """Starts recording (a warning, no effect, when already started)."""
        self._start(at_step_boundary=False)

    def _start(self, at_step_boundary: bool) -> None:
        """start(); ``at_step_boundary``: where one step ends and the next
        begins (DynamicProfilerMonitor), so the first step is no start-up."""
        if self._cpp is None:
            return
        if self._auto_started and self._cpp.started() and self._cpp.step_num() == 0:
            self._auto_started = False  # torch's idiom after start_profile=True: not misuse
            return
        self._auto_started = False
        if self._modules is not None:
            self._modules.install()
        if self._records_cpu:
            _gc.install()
        self._tag_memory(True)
        self._call("start_at_step_boundary" if at_step_boundary else "start")
        self._hold_torch_flag()
        self._hold_sampler()

    def stop(self) -> None:
        """Stops recording; the open run is closed and ``on_trace_ready`` called.
        An error is logged, nothing else happens, when not started."""
        self._stop(at_step_boundary=False)

    def _stop(self, at_step_boundary: bool) -> None:
        self._auto_started = False
        self._call("stop_at_step_boundary" if at_step_boundary else "stop")
        self._release_torch_flag()
        self._release_sampler()
        self._tag_memory(False)
        _gc.remove()
        _distributed.measure_clock_offset()  # the drift since the first measurement
        if self._modules is not None:
            self._modules.remove()

    def step(self) -> None:
        """Ends a training step: drives the schedule (an error is logged when
        the profile is not started)."""
        self._call("step")
        if self._torch_flag:
            if self._cpp is not None and self._cpp.started():
                _torch.profile_stepped()
            else:
                self._release_torch_flag()  # the schedule's last cycle is over
                self._release_sampler()

    def _call(self, method: str) -> None:
        if self._cpp is None:
            return
        if not method.startswith("stop"):
            _distributed.sync()  # the rank and groups, before a run may open
        try:
            getattr(self._cpp, method)()
        except Exception:
            _log.exception("profile.%s() failed; training goes on", method)

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if self._cpp is not None and self._cpp.started():
            self.stop()
        else:
            _distributed.measure_clock_offset()  # as stop() does
            self._release_torch_flag()  # a profile the core stopped (a schedule's last cycle)
            self._release_sampler()

    def __del__(self) -> None:
        try:
            if self._cpp is not None and self._cpp.started():
                self._cpp.stop()
            if self._modules is not None:
                self._modules.remove()
            if getattr(self, "_torch_flag", False):
                self._release_torch_flag()
            self._release_sampler()
            if getattr(self, "_tagging_memory", False):
                self._tag_memory(False)
        except Exception:
            pass

    # ---- metadata: written to profiler_metadata.json of each run closed afterwards ----

    def add_metadata(self, key: str, value: str) -> None:
        """Adds ``key: value`` (strings) to profiler_metadata.json of the runs
        closed from now on; a key added again overrides (with a warning).
        Text that is not valid UTF-8 is stored with U+FFFD in place of each
        character UTF-8 cannot carry."""
        core = self._metadata_target("add_metadata", key, value)
        if core is not None:
            core.add_metadata(utf8_text(key), utf8_text(value))

    def add_metadata_json(self, key: str, value: str) -> None:
        """As add_metadata, with ``value`` a JSON text stored as JSON (an
        invalid one is refused with an error message)."""
        core = self._metadata_target("add_metadata_json", key, value)
        if core is not None:
            core.add_metadata_json(utf8_text(key), utf8_text(value))

    def _metadata_target(self, method: str, key: Any, value: Any) -> Optional[_trainprof.Profiler]:
        """The core profiler when ``key`` and ``value`` are strings, else None (logged)."""
        for name, v in (("key", key), ("value", value)):
            if not isinstance(v, str):
                _log.error("%s: %s must be a str, got %s; metadata skipped", method, name, type(v).__name__)
                return None
        return self._cpp

    # ---- state ----

    @property
    def step_num(self) -> int:
        """Number of ``step()`` calls so far."""
        return self._cpp.step_num() if self._cpp is not None else 0

    @property
    def current_action(self) -> ProfilerAction:
        """The schedule's action for the current step (NONE while stopped)."""
        if self._cpp is None:
            return ProfilerAction.NONE
        return ProfilerAction[self._cpp.current_action().name]

    @property
    def last_run_dir(self) -> Optional[str]:
        """The run directory closed last, None before the first."""
        run_dir = self._cpp.last_run().run_dir if self._cpp is not None else ""
        return run_dir or None

    # ---- torch.profiler's exports, of the cycle that closed last ----

    def export_chrome_trace(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the timeline of the cycle that closed last (Kineto's JSON
        schema, as torch.profiler's ``export_chrome_trace``; gzip-compressed
        when ``path`` ends in ``.gz``), analysing that cycle first when no
        trace handler has. Works after the ``with`` block or ``stop()``, and
        in ``on_trace_ready`` for the cycle that just closed. Returns ``path``.

        Raises:
            RuntimeError: no cycle has closed yet, or its analysis failed.
            OSError: ``path`` cannot be written.
        """
        self._wait_for_analyses()
        return _exports.export_chrome_trace(self.last_run_dir, path)

    def export_stacks(self, path: Union[str, "os.PathLike[str]"], metric: str = "self_cpu_time_total") -> str:
        """Writes the call stacks of the cycle that closed last in the
        collapsed format flamegraph.pl and speedscope read, as torch.profiler
        does: one line per distinct (operator, call stack), its frames
        outermost first and separated by ``;``, then the metric in µs.
        Needs ``with_stack=True``. ``metric``: ``"self_cpu_time_total"``, or
        ``"self_cuda_time_total"`` / ``"self_device_time_total"`` (GPU time).
        Returns ``path``.

        Raises:
            ValueError: an unknown ``metric`` (the valid ones are listed).
            RuntimeError: no cycle has closed yet, or its analysis failed.
        """
        self._wait_for_analyses()
        return _exports.export_stacks(self.last_run_dir, path, metric)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> Any:
        """torch.profiler's key averages of the cycle that closed last: an
        ``EventList`` of ``FunctionEventAvg`` (``key``, ``count``,
        ``self_cpu_time_total``, ``cpu_time_total``, ``cpu_time``, device times
        with torch's ``cuda_`` names, ``cpu_memory_usage`` and
        ``self_cpu_memory_usage`` (bytes, with ``profile_memory``),
        ``input_shapes``, ``stack``, ``flops``; µs), by self CPU time, with
        ``.table(sort_by=..., row_limit=...)`` printing torch's table.
        Computed by the C++ analysis from the run's raw data.
        ``group_by_input_shape`` needs ``record_shapes``, ``group_by_stack_n``
        ``with_stack``. ``group_by_overload_name`` changes nothing: overload
        names are not recorded (torch records them only with an experimental
        option), so every row's ``overload_name`` is "" as torch's is by default.

        Raises:
            RuntimeError: no cycle has closed yet, or its raw data cannot be read.
        """
        from . import _key_averages

        by_shape = check_bool("group_by_input_shape", group_by_input_shape)
        stack_n = check_int("group_by_stack_n", group_by_stack_n, 0)
        check_bool("group_by_overload_name", group_by_overload_name)
        run = self._closed_run("key_averages")
        return _key_averages.key_averages(run, by_shape, stack_n, stepped=self.step_num > 0,
                                          profile_memory=self._profile_memory)

    def events(self) -> Any:
        """torch.profiler's events of the cycle that closed last: one
        ``FunctionEvent`` per recorded call, in start order (``name``, ``id``,
        ``thread``, ``time_range``, ``cpu_time_total``, ``self_cpu_time_total``,
        ``input_shapes``, ``stack``, ``cpu_parent``, ``cpu_children``,
        ``cpu_memory_usage``, ``self_cpu_memory_usage``, ``flops``, device
        times and ``kernels`` with GPU activity). The calls stay in the C++
        analysis (96 bytes each) and each event is made as it is read, so a
        cycle of millions of calls can be walked; ``.key_averages()`` and
        ``.table()`` work on the list as torch's.

        Raises:
            RuntimeError: no cycle has closed yet, or its raw data cannot be read.
        """
        from . import _events

        run = self._closed_run("events")
        return _events.events(run, stepped=self.step_num > 0, profile_memory=self._profile_memory)

    def _closed_run(self, caller: str) -> str:
        """The run directory of the cycle that closed last, its analyses
        waited for; a clear error before any cycle closed."""
        self._wait_for_analyses()
        run = self.last_run_dir
        if run is None:
            raise RuntimeError(f"{caller}(): nothing recorded yet: no cycle of this profile has closed "
                               "(call it after the `with` block or stop(), or in on_trace_ready)")
        return run

    def _wait_for_analyses(self) -> None:
        """An export reads the analysed cycle: the trace handler's analyses in
        child processes (async_mode) are waited for, not raced."""
        if self._cpp is not None:
            self._cpp.wait_for_analysis()

    def _analyse_closed_runs(self, async_mode: bool) -> None:
        mode = _trainprof.AnalyseMode.Async if async_mode else _trainprof.AnalyseMode.Sync
        if self._cpp is not None:
            self._cpp.analyse(mode, False, True)  # the trace handler's layout (TensorBoard, HTA)


_warned_ignored: set[str] = set()

# Where what a keyword of another profiler does is found here.
_MOVED_KEYWORDS = {
    "output_path": "the output directory is tensorboard_trace_handler's: "
                   "on_trace_ready=tensorboard_trace_handler('./prof') (or MindSpore's class, "
                   "trainprof.Profiler(output_path=...))",
    "profiler_level": "it is _ExperimentalConfig's: experimental_config=_ExperimentalConfig(profiler_level=...) "
                      "(or trainprof.Profiler(profiler_level=...))",
    "export_type": "it is _ExperimentalConfig's: experimental_config=_ExperimentalConfig(export_type=[...])",
    "host_sys": "it is _ExperimentalConfig's: experimental_config=_ExperimentalConfig(host_sys=[...])",
    "data_simplification": "it is _ExperimentalConfig's: "
                           "experimental_config=_ExperimentalConfig(data_simplification=...)",
}


def _unexpected_keywords(name: str, unexpected: dict[str, Any], function: Callable[..., Any]) -> str:
    """The message for keywords ``function`` does not take: where each one
    lives here, or the parameters it is close to."""
    import difflib
    import inspect

    known = [p for p in inspect.signature(function).parameters if p not in ("self", "unexpected")]
    parts = []
    for key in sorted(unexpected):
        if key in _MOVED_KEYWORDS:
            parts.append(f"{key!r}: {_MOVED_KEYWORDS[key]}")
        else:
            close = difflib.get_close_matches(key, known, n=3)
            parts.append(f"{key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    return f"{name}() got unexpected keyword argument(s) " + "; ".join(parts)


def _ignored(name: str, why: str) -> None:
    """Says once per process that torch.profiler's ``name`` is taken and ignored, and why."""
    if name not in _warned_ignored:
        _warned_ignored.add(name)
        _log.warning("%s: not supported by trainprof (%s); ignored", name, why)


# torch.profiler.profile's arguments that trainprof takes and ignores: why.
_TORCH_ONLY_ARGUMENTS = {
    "execution_trace_observer": "PyTorch's execution traces (Chakra) are not recorded",
    "acc_events": "each cycle is analysed on its own; events are not accumulated across cycles",
    "custom_trace_id_callback": "runs are named by their directories, not by a trace id",
    "post_processing_timeout_s": "the analysis runs in its own process, bounded by the run's size",
}


def _torch_schedule_settings(value: Any) -> Optional[dict[str, int]]:
    """The settings of a ``torch.profiler.schedule(...)`` (a closure over
    them), or None when ``value`` is not one."""
    code = getattr(value, "__code__", None)
    if code is None or not getattr(value, "__module__", "").startswith("torch.profiler") or value.__closure__ is None:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in value.__closure__)))
    names = ("wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait")
    if not all(n in cells or n == "skip_first_wait" for n in names):
        return None
    return {n: cells[n] for n in names if n in cells}


def _check_schedule(value: Any) -> Optional[_trainprof.Schedule]:
    if value is None:
        return None
    if not isinstance(value, schedule):
        settings = _torch_schedule_settings(value)
        if settings is None:
            raise TypeError("schedule must be a trainprof.schedule(...) or a torch.profiler.schedule(...), "
                            f"got {type(value).__name__}")
        value = schedule(**settings)  # the same steps, driven by the core
    return value._cpp


def _apply_experimental_config(options: _trainprof.ProfilerOptions, config: Any) -> None:
    if config is None:
        return
    if type(config).__name__ == "_ExperimentalConfig" and type(config).__module__.startswith("torch"):
        # torch.profiler code unchanged: torch's config is about Kineto's
        # metrics and CUPTI; trainprof's (MindSpore's) is another class.
        _ignored("experimental_config", "torch's _ExperimentalConfig configures Kineto; trainprof's is "
                 "trainprof._ExperimentalConfig (profiler_level, mstx domains, export_type, host_sys)")
        return
    if not isinstance(config, _ExperimentalConfig):
        raise TypeError(f"experimental_config must be a trainprof._ExperimentalConfig, got {type(config).__name__}")
    options.profiler_level = _LEVELS[config.profiler_level]
    options.mstx_domain_include = config.mstx_domain_include
    options.mstx_domain_exclude = config.mstx_domain_exclude
    options.data_simplification = config.data_simplification
    options.export_text = ExportType.Text in config.export_type
    options.export_db = ExportType.Db in config.export_type
    options.host_sys = {_HOST_SYSTEM[part] for part in config.host_sys}
    options.host_sys_interval_ms = config.host_sys_interval_ms
    options.sample_operators = config.sample_operators
    options.python_stack_sampling_ms = config.python_stack_sampling_ms
