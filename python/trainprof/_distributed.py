"""torch.distributed: the process' rank and the groups' members, for the core.

The torch collector sees each collective with its process group, but torch
keeps the group's members (their world ranks) in Python. ``sync()`` hands
them over, with this process' rank and world size (which name the run
directories: ``rank{R}_...``), when torch.distributed is initialized. The
profile calls it at ``start()`` and at every ``step()``; it costs a length
check when nothing changed, and never raises.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any

from . import _torch, _trainprof

_log = logging.getLogger("trainprof")

_known: set[str] = set()  # group names already handed over
_rank_set = False
_failed = False


def _groups(dist: Any) -> list[tuple[str, list[int]]]:
    """(group name, world ranks in group rank order) of every group torch knows."""
    c10d = dist.distributed_c10d
    names = getattr(getattr(c10d, "_world", None), "pg_names", None)
    if names is None:  # an older torch: the default group only
        world = dist.group.WORLD
        return [(world.group_name, list(range(dist.get_world_size())))]
    return [(name, dist.get_process_group_ranks(pg)) for pg, name in list(names.items())]


def sync() -> None:
    """Hands torch.distributed's rank and new groups to the core (no effect
    when torch.distributed is not initialized)."""
    global _rank_set, _failed
    if _failed:
        return
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    try:
        if not dist.is_available() or not dist.is_initialized():
            return
        if not _rank_set:
            _trainprof.set_distributed_rank(dist.get_rank(), dist.get_world_size())
            _rank_set = True
        c10d = dist.distributed_c10d
        names = getattr(getattr(c10d, "_world", None), "pg_names", None)
        if names is not None and len(names) == len(_known):
            return
        library = _torch.collector_library()
        if library is None:
            return
        for name, ranks in _groups(dist):
            if name in _known:
                continue
            array = (ctypes.c_int32 * len(ranks))(*ranks)
            library.trainprof_torch_comm_group(name.encode(), array, ctypes.c_int64(len(ranks)))
            _known.add(name)
    except Exception:
        _failed = True
        _log.exception("trainprof: cannot read torch.distributed's groups; their members are not recorded")
