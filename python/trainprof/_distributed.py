# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""torch.distributed: the process' rank and the groups' members, for the core.

The torch collector sees each collective with its process group, but torch
keeps the group's members (their world ranks) in Python. ``sync()`` hands
them over, with this process' rank and world size (which name the run
directories: ``rank{R}_...``), when torch.distributed is initialized. The
profile calls it at ``start()`` and at every ``step()``; it costs a length
check when nothing changed, and never raises.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any, Optional

from . import _torch, _trainprof

_log = logging.getLogger("trainprof")

_known: set[str] = set()  # group names already handed over
_rank_set = False
_failed = False


# Where launchers (torchrun, mpirun, srun) put the number of processes.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def one_of_several_ranks() -> bool:
    """A launcher started this process as one of several ranks, or
    torch.distributed runs with several (never raises)."""
    for name in WORLD_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return True
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized()
                    and dist.get_world_size() > 1)
    except Exception:
        return False


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
            measure_clock_offset()  # the first of two: the second at stop()
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


# ---- Clock alignment ----
#
# Ranks on different machines have different clocks. As libtrainprof_mpi does
# over MPI, each rank measures its offset to rank 0 with ping-pongs, here
# through torch.distributed's store (the key-value server every rank of the
# job reaches): a rank writes a ping, rank 0 answers with its wall clock, and
# with the shortest of the round trips the answer was read at the rank's
# mid-point within +- half of it. Measured when profiling first sees
# torch.distributed and again at stop(), on a thread of its own, so that the
# training never waits for it (a rank that does not answer ends it after
# _WAIT). The thread is not a daemon: a process that ends meanwhile waits
# for it (at most _WAIT), since one left inside torch's store client while
# the process tears down aborts it. Exchanges run one at a time, in the
# order started (the same on every rank), and rank 0 stays until each peer
# has read its last answer. The core writes the points into every run's
# profiler_info.json, with each exchange's start and end (a run closed while
# one runs, or one that failed, says so), and the analysis removes the
# offsets, interpolating the drift between them; `trainprof cluster`
# analyses a run again when an exchange ended after its analysis.

_ROUNDS = 10
_WAIT = 10.0  # seconds a ping or an answer is waited for
_epoch = 0  # measurements started by this process (every rank starts the same ones)
_threads: list[threading.Thread] = []
_start_lock = threading.Lock()


# Rank 0's name for this job (this process group): every rank's runs record
# it where no launcher names the job (torchrun without --standalone or a
# rendezvous id names none), so that the runs of two jobs written to one
# directory are told apart. Another process group, or a restart, another name.
_JOB = f"torch.distributed-{uuid.uuid4().hex[:16]}"


def _ping_pong(store: Any, rank: int, world: int, prefix: str) -> None:
    wait = datetime.timedelta(seconds=_WAIT)
    if rank == 0:  # the reference: its own offset is 0 by definition
        store.set(f"{prefix}/job", _JOB)  # before any answer: a peer that has one reads it
        _trainprof.set_runtime_job(_JOB)
        _trainprof.add_clock_sync_point(0, _trainprof.realtime_ns(), 0, 0)
        for peer in range(1, world):
            try:
                for i in range(_ROUNDS):
                    key = f"{prefix}/{peer}/{i}"
                    store.wait([key + "/ping"], wait)
                    store.set(key + "/pong", str(_trainprof.realtime_ns()))
            except Exception as e:  # the reason names the rank that did not ping
                raise RuntimeError(f"rank {peer} did not ping within {_WAIT:g} s ({type(e).__name__})") from e
        # Each peer says when it has read its last answer: until then this
        # process (and the store's server, when it holds it) stays.
        store.wait([f"{prefix}/{peer}/done" for peer in range(1, world)], wait)
        return
    best = (2**63, 0, 0)  # round trip, offset, when (this clock)
    for i in range(_ROUNDS):
        key = f"{prefix}/{rank}/{i}"
        t0 = _trainprof.realtime_ns()
        store.set(key + "/ping", "1")
        store.wait([key + "/pong"], wait)
        theirs = int(store.get(key + "/pong"))
        t1 = _trainprof.realtime_ns()
        if t1 - t0 < best[0]:
            best = (t1 - t0, (t0 + t1) // 2 - theirs, (t0 + t1) // 2)
    try:  # rank 0's name for the job, set before its first answer (none from an older trainprof)
        store.wait([f"{prefix}/job"], datetime.timedelta(seconds=1))
        job = store.get(f"{prefix}/job").decode("ascii", "replace")
    except Exception:
        job = ""
    store.set(f"{prefix}/{rank}/done", "1")
    if job:
        _trainprof.set_runtime_job(job)
    _trainprof.add_clock_sync_point(0, best[2], best[1], best[0] // 2 + 1)


def _measure(store: Any, rank: int, world: int, prefix: str, previous: Optional[threading.Thread]) -> None:
    failure = ""
    try:
        # One exchange at a time, in the order every rank started them: the
        # store's client is not to be used by two of them at once, and rank 0
        # serves them in that order.
        if previous is not None:
            previous.join()
        _ping_pong(store, rank, world, prefix)
    except Exception as e:
        failure = f"{type(e).__name__}: {e}".encode("utf-8", "replace").decode("utf-8")
        _log.warning("trainprof: clock alignment with rank 0 failed (%s); "
                     "this rank's times are not aligned to rank 0's", failure)
    finally:  # the run's profiler_info.json says how it ended
        _trainprof.note_clock_exchange_ended(bool(failure), failure)


def measure_clock_offset() -> None:
    """Starts a measurement of this rank's clock offset to rank 0 (in the
    background; no effect without torch.distributed or with one rank)."""
    global _epoch
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return
        store = dist.distributed_c10d._get_default_store()
        rank, world = dist.get_rank(), dist.get_world_size()
    except Exception:
        return
    with _start_lock:  # epochs and their order as started
        prefix = f"trainprof/clock/{_epoch}"
        _epoch += 1
        _trainprof.note_clock_exchange_started()
        _threads[:] = [t for t in _threads if t.is_alive()]  # ended ones are not kept
        previous = _threads[-1] if _threads else None
        thread = threading.Thread(target=_measure, args=(store, rank, world, prefix, previous), daemon=False,
                                  name="trainprof-clock")
        try:
            thread.start()
        except RuntimeError as e:  # no thread to be had: this exchange ends here
            _trainprof.note_clock_exchange_ended(True, f"cannot start its thread: {e}")
            return
        _threads.append(thread)


def _wait_at_exit() -> None:
    """At interpreter exit, the exchanges still running are waited for
    (at most _EXIT_WAIT): a profile stopped at exit (TRAINPROF_OPTIONS,
    ``trainprof run``) starts one after the interpreter joined its threads,
    and a thread left inside torch's store client while the interpreter
    goes aborts the process (a rank's exit status -6)."""
    deadline = time.monotonic() + _EXIT_WAIT
    for t in list(_threads):
        t.join(max(0.0, deadline - time.monotonic()))


# Registered at import, before any handler that stops a profile: atexit
# runs the later ones first, so this one waits for what they started.
_EXIT_WAIT = 2 * _WAIT + 5
atexit.register(_wait_at_exit)


def wait_for_clock_measurements(timeout: float) -> None:
    """Waits at most ``timeout`` seconds for the measurements started (tests)."""
    for t in list(_threads):
        t.join(timeout)
