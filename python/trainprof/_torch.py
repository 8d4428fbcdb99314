# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Loads the torch collector (libtrainprof_torch.so) into this process.

The collector registers LibTorch RecordFunction callbacks, so it must bind to
the very libtorch that ``import torch`` loaded: it is loaded after torch, and
only when its build matches the running torch (a collector compiled against
another torch release could crash on a changed class layout). It registers
itself with the core when loaded; from then on every profile recording CPU
activity records aten operators.

When it cannot be loaded, profiling still works (steps, record_function,
mstx, metadata, analysis); the reason is kept and said once.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import logging
import os
import sys
import warnings
from typing import Any, Callable, Optional

from . import _build_info

_log = logging.getLogger("trainprof")

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtrainprof_torch.so")

_loaded = False
_library: Optional[ctypes.CDLL] = None  # the loaded collector, for its C entry points
_problem: Optional[str] = None  # why the collector is not loaded, once known
_warned = False


def _release(version: str) -> str:
    """'2.15.0+cu132' -> '2.15': LibTorch's C++ ABI holds within a minor release."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _find_problem() -> Optional[str]:
    """Why the collector cannot be loaded now, or None when it can."""
    if not _build_info.TORCH_VERSION:
        return (f"trainprof was built without its torch collector ({_build_info.TORCH_MISSING_REASON}); "
                "reinstall it in an environment with torch >= 2.7: pip install --no-build-isolation .")
    try:
        import torch  # noqa: F401  (loads the libtorch the collector must bind to)
    except ImportError as e:
        return f"torch cannot be imported ({e}); operators are not recorded"
    running = getattr(torch, "__version__", "?")
    if _release(running) != _release(_build_info.TORCH_VERSION):
        return (f"trainprof's torch collector was built against torch {_build_info.TORCH_VERSION}, "
                f"this process runs torch {running}; reinstall trainprof "
                "(pip install --no-build-isolation --force-reinstall .)")
    if not os.path.isfile(_LIBRARY):
        return f"the torch collector {_LIBRARY} is missing; reinstall trainprof"
    return None


def load_torch_collector() -> Optional[str]:
    """Loads the collector if it is not loaded yet.

    Returns None when it is loaded, else why not (the same text each time).
    """
    global _loaded, _problem
    if _loaded or _problem is not None:
        return _problem
    _problem = _find_problem()
    if _problem is None:
        try:
            global _library
            _library = ctypes.CDLL(_LIBRARY)
            _loaded = True
            _step_aside_for_torch_profiler(_library)
        except OSError as e:
            _problem = f"cannot load the torch collector {_LIBRARY}: {e}"
    return _problem


# Where torch's profilers are started from Python: each module keeps its own
# reference to the C function (``from torch.autograd import _enable_profiler``).
_PROFILER_STARTS = (
    ("torch.autograd", "_enable_profiler"),
    ("torch.autograd", "_enable_profiler_legacy"),
    ("torch.autograd.profiler", "_enable_profiler"),
    ("torch.autograd.profiler", "_enable_profiler_legacy"),
    ("torch.autograd.profiler_legacy", "_enable_profiler_legacy"),
)


def _step_aside_for_torch_profiler(library: ctypes.CDLL) -> None:
    """Makes torch's own profiler start on a thread where trainprof records
    memory: LibTorch refuses ("Profiler is already enabled on this thread")
    while the thread's profiler slot holds trainprof's memory reporter, so the
    reporter is taken out of the starting thread first. While torch's
    profiler records there, that thread's allocations go to it (trainprof
    says so once when its profile stops); afterwards trainprof takes them
    again. Both profilers record everything else."""
    try:
        yield_state = library.trainprof_torch_yield_profiler_state
    except AttributeError:
        return
    yield_state.restype = ctypes.c_int
    yield_state.argtypes = []
    import importlib
    for module_name, name in _PROFILER_STARTS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        start = getattr(module, name, None)
        if start is None or getattr(start, "_trainprof_steps_aside", False):
            continue
        setattr(module, name, _stepping_aside(start, yield_state))


def _stepping_aside(start: Callable[..., Any], yield_state: Any) -> Callable[..., Any]:
    def start_profiler(*args: Any, **kwargs: Any) -> Any:
        yield_state()
        return start(*args, **kwargs)

    start_profiler._trainprof_steps_aside = True  # type: ignore[attr-defined]
    start_profiler.__name__ = getattr(start, "__name__", "start_profiler")
    start_profiler.__doc__ = getattr(start, "__doc__", None)
    return start_profiler


def warn_if_unavailable() -> None:
    """Loads the collector; says once, as a warning, why operators go unrecorded."""
    global _warned
    problem = load_torch_collector()
    if problem is not None and not _warned:
        _warned = True
        warnings.warn(f"trainprof: torch operators are not recorded: {problem}", RuntimeWarning, stacklevel=3)


def load_if_torch_imported() -> None:
    """At ``import trainprof``: when torch is already imported, load the
    collector now (cheap); otherwise it is loaded by the first profile."""
    if "torch" in sys.modules and sys.modules["torch"] is not None:
        load_torch_collector()


_on_import: list[Callable[[], None]] = []


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Runs the callbacks of ``when_imported`` right after ``import torch`` completes."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_torch = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            exec_torch(module)
            _run_import_callbacks()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _run_import_callbacks() -> None:
    callbacks = list(_on_import)
    _on_import.clear()
    for callback in callbacks:
        try:
            callback()
        except Exception:
            _log.exception("trainprof: setting up after `import torch` failed; training goes on")


def when_imported(callback: Callable[[], None]) -> None:
    """Calls ``callback`` now when torch is imported, else right after the
    process imports it (without importing torch: a script may set its
    environment first). What the callback raises is logged."""
    _on_import.append(callback)
    if sys.modules.get("torch") is not None and hasattr(sys.modules["torch"], "optim"):
        _run_import_callbacks()
    elif not any(isinstance(f, _TorchImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchImportHook())


# ---- torch's "a profiler is on" flag ----
#
# Code that annotates itself asks torch.autograd.profiler._is_profiler_enabled
# before it makes a range (torch.compile's "## Call CompiledFxGraph ... ##" and
# "Pregraph bytecode", dynamo's and inductor's own): torch.profiler sets it
# while it runs. A trainprof profile recording CPU activity sets it too, so
# that those ranges reach trainprof's operator callbacks, and puts back what
# torch's own profiler needs when it stops.

_profiles_on = 0  # trainprof profiles recording CPU activity in this process


def _set_torch_profiler_flag(enabled: bool) -> None:
    profiler = getattr(getattr(sys.modules.get("torch"), "autograd", None), "profiler", None)
    if profiler is None or not hasattr(profiler, "_is_profiler_enabled"):
        return  # a torch without the flag: nothing asks it
    setter = getattr(profiler, "_set_is_profiler_enabled", None)
    if setter is not None:
        setter(enabled)
    else:
        profiler._is_profiler_enabled = enabled


def _raise_torch_profiler_flag() -> None:
    if _profiles_on > 0:
        _set_torch_profiler_flag(True)


def profile_started() -> None:
    """A trainprof profile recording CPU activity started: torch sees a
    profiler on (now, or right after ``import torch`` when it comes later)."""
    global _profiles_on
    _profiles_on += 1
    when_imported(_raise_torch_profiler_flag)


def profile_stepped() -> None:
    """At each step of a started profile: torch.profiler's stop clears the
    flag even when trainprof still records; it is raised again here."""
    if _profiles_on > 0 and sys.modules.get("torch") is not None:
        profiler = getattr(sys.modules["torch"].autograd, "profiler", None)
        if profiler is not None and getattr(profiler, "_is_profiler_enabled", True) is False:
            _set_torch_profiler_flag(True)


def profile_stopped() -> None:
    """A trainprof profile stopped: the flag is torch's own again (on while
    torch's profiler runs, off otherwise)."""
    global _profiles_on
    _profiles_on = max(0, _profiles_on - 1)
    if _profiles_on == 0 and sys.modules.get("torch") is not None:
        _set_torch_profiler_flag(profiler_running())


def collector_library() -> Optional[ctypes.CDLL]:
    """The loaded collector (None when it is not loaded)."""
    return _library


def profiler_running() -> bool:
    """Whether torch's own profiler (torch.profiler / autograd's) records in
    this process now. CUPTI serves one activity client at a time, so a
    trainprof profile started meanwhile leaves the GPU to it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001  (an older or partial torch: assume not)
        return False
