# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``data_process`` for ``torch.utils.data.DataLoader``: its stages timed.

Installed once a profile with ``data_process=True`` exists (and torch is
imported); from then on every DataLoader iteration in this process records:

- ``dataset``: fetching one batch's samples (``__getitem__`` /
  ``__getitems__`` / ``next()`` of an IterableDataset), operation = the
  dataset's class name;
- ``collate``: ``collate_fn`` on that batch, operation = its name;
- ``pin_memory``: pinning one batch (``pin_memory=True``), on the thread that
  pins it;
- ``wait``: the training loop's ``next()`` on the loader, operation
  ``DataLoader``, the end of the epoch included. With ``num_workers=0`` it
  encloses the batch's dataset and collate stages (the loop loads the batch
  itself); with workers it is the time the loop blocks.

``Custom Info`` is ``workers=N``. Worker processes (``num_workers > 0``, fork,
spawn or forkserver) do not record runs of their own: each times its stages
with the profiler's clock (the same in every process of the machine) and
sends them, one message per batch, through a pipe of its own to a relay
thread of the training process, which records them on its own Dataset track
(thread name ``DataLoader worker I``). So the stages land in the training
process' run, in dataset.csv and the timeline; stages of batches fetched
while no run records are dropped there. When the workers shut down (the end
of an epoch without ``persistent_workers``) the loop waits (at most 5 s) until
the relays have recorded everything; with persistent workers a batch's stages
are recorded within moments of its arrival, so a cycle that closes at once
may miss its last batch's worker stages.

Nothing here raises into the training loop: a failure of the bookkeeping is
logged and the batch goes on.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import threading
from typing import Any, Callable, Optional

from . import _trainprof

_log = logging.getLogger("trainprof")

# A stage as sent by a worker: (operation, stage, start ticks, end ticks, custom info).
Stage = tuple[str, str, int, int, str]

_installed = False
_install_lock = threading.Lock()
# In a worker process: where its stages go (its pipe to the relay thread).
_worker_queue: Optional[Any] = None
_pinning = threading.local()  # pin_memory() recurses: only the outermost call is a stage

_ticks = _trainprof.stage_clock_ticks
_recording = _trainprof.data_stages_recording  # in the training process: whether stages are kept
_RELAY_JOIN_SECONDS = 5.0  # bound on the wait for a relay to record what its worker sent


def _record(stages: list[Stage]) -> None:
    """Records ``stages`` here, or sends them to the training process from a worker."""
    if _worker_queue is not None:
        _worker_queue.put(stages)
        return
    for operation, stage, start, end, info in stages:
        _trainprof.record_data_stage(operation, stage, start, end, info)


def _identity_collate(data: Any) -> Any:
    """The collate_fn the wrapped fetcher runs with: collation is timed apart."""
    return data


def _name_of(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


class _TimedFetcher:
    """A torch dataset fetcher whose fetch() times the samples and the collation apart."""

    def __init__(self, inner: Any, collate_fn: Callable[[Any], Any], dataset: Any, info: str) -> None:
        self._inner = inner
        self._collate_fn = collate_fn
        self._dataset_name = type(dataset).__name__
        self._collate_name = _name_of(collate_fn)
        self._info = info

    def fetch(self, possibly_batched_index: Any) -> Any:
        if _worker_queue is None and not _recording():
            return self._collate_fn(self._inner.fetch(possibly_batched_index))
        start = _ticks()
        data = self._inner.fetch(possibly_batched_index)  # StopIteration passes through
        fetched = _ticks()
        batch = self._collate_fn(data)
        try:
            _record([(self._dataset_name, "dataset", start, fetched, self._info),
                     (self._collate_name, "collate", fetched, _ticks(), self._info)])
        except Exception:
            _log.exception("trainprof: a data stage was not recorded")
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _WorkerInit:
    """The worker_init_fn of a profiled multi-worker loader: points the
    worker's stages at its pipe, then runs the loader's own worker_init_fn."""

    def __init__(self, inner: Optional[Callable[[int], None]], queues: list[Any]) -> None:
        self.inner = inner
        self.queues = queues

    def __call__(self, worker_id: int) -> None:
        global _worker_queue
        install()  # a spawned worker starts without the patches
        _worker_queue = self.queues[worker_id]
        if self.inner is not None:
            self.inner(worker_id)


def _relay(queue: Any, worker_id: int) -> None:
    """Records what worker ``worker_id`` sends until None arrives."""
    _trainprof.set_thread_name(f"DataLoader worker {worker_id}")
    while True:
        try:
            stages = queue.get()
        except (EOFError, OSError):
            return
        if stages is None:
            return
        for operation, stage, start, end, info in stages:
            _trainprof.record_data_stage(operation, stage, start, end, info)


def _patch(torch: Any) -> None:
    data = torch.utils.data
    dataloader = data.dataloader
    pin_module = data._utils.pin_memory
    kind = dataloader._DatasetKind
    create_fetcher = kind.create_fetcher

    def timed_create_fetcher(kind_: Any, dataset: Any, auto_collation: bool, collate_fn: Any,
                             drop_last: bool) -> Any:
        inner = create_fetcher(kind_, dataset, auto_collation, _identity_collate, drop_last)
        info = data.get_worker_info()
        workers = info.num_workers if info is not None else 0
        return _TimedFetcher(inner, collate_fn, dataset, f"workers={workers}")

    kind.create_fetcher = staticmethod(timed_create_fetcher)

    base_iter = dataloader._BaseDataLoaderIter
    next_batch = base_iter.__next__

    @functools.wraps(next_batch)
    def timed_next(self: Any) -> Any:
        if not _recording():
            return next_batch(self)
        start = _ticks()
        try:
            return next_batch(self)
        finally:
            try:
                _record([("DataLoader", "wait", start, _ticks(), f"workers={self._num_workers}")])
            except Exception:
                _log.exception("trainprof: a data stage was not recorded")

    base_iter.__next__ = timed_next

    pin_memory = pin_module.pin_memory

    @functools.wraps(pin_memory)
    def timed_pin_memory(batch: Any, device: Any = None) -> Any:
        if getattr(_pinning, "active", False) or (_worker_queue is None and not _recording()):
            return pin_memory(batch, device)
        _pinning.active = True
        start = _ticks()
        try:
            return pin_memory(batch, device)
        finally:
            _pinning.active = False
            try:
                _record([("pin_memory", "pin_memory", start, _ticks(), "")])
            except Exception:
                _log.exception("trainprof: a data stage was not recorded")

    pin_module.pin_memory = timed_pin_memory

    multi_iter = dataloader._MultiProcessingDataLoaderIter
    multi_init = multi_iter.__init__
    multi_shutdown = multi_iter._shutdown_workers

    @functools.wraps(multi_init)
    def init_with_relays(self: Any, loader: Any) -> None:
        own_init = loader.worker_init_fn
        queues: list[Any] = []
        try:
            context = loader.multiprocessing_context or multiprocessing.get_context()
            queues = [context.SimpleQueue() for _ in range(loader.num_workers)]
            loader.worker_init_fn = _WorkerInit(own_init, queues)
        except Exception:
            _log.exception("trainprof: DataLoader workers' stages are not recorded")
        try:
            multi_init(self, loader)
        finally:
            if queues:
                loader.worker_init_fn = own_init
        self._trainprof_relays = []
        try:
            for i, queue in enumerate(queues):
                relay = threading.Thread(target=_relay, args=(queue, i), name=f"trainprof relay {i}", daemon=True)
                relay.start()
                self._trainprof_relays.append((queue, relay))
        except Exception:
            _log.exception("trainprof: DataLoader workers' stages are not recorded")

    @functools.wraps(multi_shutdown)
    def shutdown_with_relays(self: Any) -> None:
        try:
            multi_shutdown(self)
        finally:
            # The workers are joined: what they sent is in the pipes, the end
            # marker follows it, and each relay records it all before it ends.
            relays, self._trainprof_relays = getattr(self, "_trainprof_relays", []), []
            try:
                for queue, _ in relays:
                    queue.put(None)
                for _, relay in relays:
                    relay.join(_RELAY_JOIN_SECONDS)
            except Exception:
                _log.exception("trainprof: DataLoader workers' last stages may be missing")

    multi_iter.__init__ = init_with_relays
    multi_iter._shutdown_workers = shutdown_with_relays


def install() -> None:
    """Times DataLoader stages in this process from now on (once; needs torch imported)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        try:
            import torch
            _patch(torch)
            _installed = True
        except Exception:
            _log.exception("trainprof: torch.utils.data.DataLoader stages cannot be recorded")
