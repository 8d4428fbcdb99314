# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""trainprof: a low-overhead profiler for neural-network training.

The API of torch.profiler and mindspore.profiler::

    import trainprof
    from trainprof import ProfilerActivity, schedule, tensorboard_trace_handler

    with trainprof.profile(activities=[ProfilerActivity.CPU],
                           schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                           on_trace_ready=tensorboard_trace_handler("./prof")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

MindSpore's class runs as its users write it (``from trainprof import
Profiler``: ``Profiler(output_path=...)``, ``start()`` / ``stop()``,
``analyse()``, ``Profiler.offline_analyse(path)``; docs/GUIDE.md).

Each recorded cycle becomes a run directory under ./prof, analysed into
``PROFILER_OUTPUT/`` (trace_view.json for Perfetto / chrome://tracing,
op_statistic.csv, operator_details.csv, step_trace_time.csv). In a PyTorch
process every aten operator is recorded (the torch collector is loaded after
``import torch``; ``torch_collector_status()`` says why when it cannot be).
"""

from __future__ import annotations

import os as _os
from typing import Optional

# libtrainprof.so would start a profiler of its own from TRAINPROF_OPTIONS
# when it loads (the C++ path, include/trainprof/env.h); in Python the
# package starts it (_zero_code: steps from optimizer.step()), so the
# library does not see the variable while it loads.
_options_text = _os.environ.pop("TRAINPROF_OPTIONS", None)
try:
    from . import _trainprof
finally:
    if _options_text is not None:
        _os.environ["TRAINPROF_OPTIONS"] = _options_text

from . import _gpu, _torch, _zero_code, mstx
from ._dynamic import DynamicProfilerMonitor
from ._flight import flight_recorder
from ._mindspore_profiler import AicoreMetrics, Profiler, tensor_board_trace_handler
from ._ranges import record_function
from . import _trainprof as _trainprof_core
from ._trainprof import version as _core_version
from .analysis import advise, analyse, open_cluster_database, summary
from .profiler import (
    ExportType,
    HostSystem,
    ProfilerAction,
    ProfilerActivity,
    ProfilerLevel,
    _ExperimentalConfig,
    profile,
    schedule,
    tensorboard_trace_handler,
)

__version__: str = _core_version()  # CMakeLists.txt's project version, as the package's

__all__ = [
    "AicoreMetrics",
    "DynamicProfilerMonitor",
    "ExportType",
    "HostSystem",
    "Profiler",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerLevel",
    "_ExperimentalConfig",
    "advise",
    "analyse",
    "flight_recorder",
    "mstx",
    "open_cluster_database",
    "profile",
    "record_function",
    "schedule",
    "summary",
    "tensor_board_trace_handler",
    "tensorboard_trace_handler",
    "torch_collector_status",
]


def torch_collector_status() -> Optional[str]:
    """Loads the torch collector if it can be (importing torch), and returns
    None when aten operators are recorded, else the reason they are not."""
    return _torch.load_torch_collector()


_torch.load_if_torch_imported()
# In a Python process, with_stack records Python stacks rather than native
# ones (libpython's frames), however the profile was started (this API or
# TRAINPROF_OPTIONS); nn.Module paths come from the hooks with_modules installs.
_trainprof_core.enable_python_context()
_gpu.offer_nccl_plugin()  # before torch.distributed makes an NCCL communicator
_zero_code.start_from_environment()
_zero_code.start_monitor_from_environment()
