# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""Where a pip-installed CUDA keeps libcupti, for the core's GPU collector.

PyTorch's CUDA wheels depend on NVIDIA's wheels, which put CUPTI under
site-packages: ``nvidia/cu13/lib/libcupti.so.13`` (CUDA 13) or
``nvidia/cuda_cupti/lib/libcupti.so.12`` (CUDA 12). The core looks for a
libcupti the process already has first (torch loads its own at import), then
at ``TRAINPROF_CUPTI_LIBRARY``; pointing that variable at the wheel's copy
keeps a process that has not imported torch from loading a system CUPTI of
another version than the one torch would use.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Optional

# Relative to a site-packages directory, by CUDA major version.
_WHEEL_CUPTI = {
    "13": ("nvidia/cu13/lib/libcupti.so.13",),
    "12": ("nvidia/cuda_cupti/lib/libcupti.so.12", "nvidia/cu12/lib/libcupti.so.12"),
}


def _torch_cuda_major() -> Optional[str]:
    """The CUDA major version torch was built with, if torch is imported."""
    torch = sys.modules.get("torch")
    version = getattr(getattr(torch, "version", None), "cuda", None)
    return version.split(".")[0] if isinstance(version, str) and version else None


def find_wheel_cupti(search_path: Optional[Iterable[str]] = None) -> Optional[str]:
    """The path of an NVIDIA wheel's libcupti on ``search_path`` (default
    ``sys.path``), the one of torch's CUDA version first, newest CUDA next;
    None when there is none."""
    majors = sorted(_WHEEL_CUPTI, reverse=True)
    preferred = _torch_cuda_major()
    if preferred in majors:
        majors.remove(preferred)
        majors.insert(0, preferred)
    roots = [r for r in (sys.path if search_path is None else search_path) if r]
    for major in majors:
        for relative in _WHEEL_CUPTI[major]:
            for root in roots:
                candidate = Path(root) / relative
                if candidate.is_file():
                    return str(candidate)
    return None


def point_core_at_wheel_cupti() -> Optional[str]:
    """Sets ``TRAINPROF_CUPTI_LIBRARY`` to the wheel's libcupti unless the
    user set it; returns the path it holds afterwards (None: unset)."""
    chosen = os.environ.get("TRAINPROF_CUPTI_LIBRARY")
    if chosen:
        return chosen
    found = find_wheel_cupti()
    if found is not None:
        os.environ["TRAINPROF_CUPTI_LIBRARY"] = found
    return found


def offer_nccl_plugin() -> Optional[str]:
    """Sets ``NCCL_PROFILER_PLUGIN`` to this package's libtrainprof.so unless
    the user set it, so that NCCL, when it makes its first communicator,
    reports its collectives to trainprof's profiler plugin (their GPU times,
    written while a profile records; NCCL is asked for nothing otherwise).
    Returns the value it holds afterwards (None: unset)."""
    chosen = os.environ.get("NCCL_PROFILER_PLUGIN")
    if chosen is not None:
        return chosen
    library = Path(__file__).with_name("libtrainprof.so")
    if library.is_file():
        os.environ["NCCL_PROFILER_PLUGIN"] = str(library)
        return str(library)
    return None
