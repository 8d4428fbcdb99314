# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``profile_memory``: what the memory holds, told to the core as tags.

The analysis classes each allocation (memory_breakdown.csv, docs/OUTPUTS.md):
what this module tags is a parameter, gradient, optimizer state or input;
the rest is classed by its lifetime (activation, temporary) or is unknown.
While a profile with ``profile_memory`` records:

- torch's global optimizer hooks tag, before each ``optimizer.step()``,
  every parameter of its groups and each one's ``.grad``, and after it the
  tensors of its state (Adam's moments and step counts, SGD's momentum);
- the DataLoader's iterator tags the tensors of each batch it yields.

A tag names a tensor's storage (its allocation: address and bytes), so a
view or a parameter sharing a flat buffer tags that buffer. The hooks cost
a pass over the parameters per optimizer step and nothing per operator or
allocation; nothing at all while no such profile records.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Iterable

from . import _trainprof

_log = logging.getLogger("trainprof")

# include/trainprof/memory.h, MemoryCategory.
PARAMETER, GRADIENT, OPTIMIZER_STATE, INPUT = 1, 2, 3, 4
_DEVICE_TYPES = {"cpu": 0, "cuda": 1, "hip": 6, "xla": 9, "mps": 13, "meta": 14, "xpu": 12}

_lock = threading.Lock()
_active = 0  # profiles with profile_memory that record
_installed = False


def _block(t: Any) -> tuple[int, int, int, int] | None:
    """(address, bytes, device type, device index) of a tensor's storage."""
    try:
        if t.is_meta or t.is_sparse:
            return None
        storage = t.untyped_storage()
        address = storage.data_ptr()
        if address == 0:
            return None
        device = t.device
        return (address, storage.nbytes(), _DEVICE_TYPES.get(device.type, 0),
                -1 if device.index is None else device.index)
    except Exception:  # a tensor without storage (a functional tensor, a subclass)
        return None


def _tensors(obj: Any, depth: int = 0) -> Iterable[Any]:
    """The tensors in a batch or a state: nested lists, tuples and dicts."""
    import torch
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item, depth + 1)


# The blocks of the tensors tagged at each step (parameters, their gradients,
# the optimizer's state) by (owner's id, role): reused while the tensor's
# data pointer is the same, so that a step costs a data_ptr() call per tensor
# rather than the storage's description. Cleared when a profile starts.
_blocks: dict[tuple[int, str], tuple[int, tuple[int, int, int, int] | None]] = {}


def _cached_block(key: tuple[int, str], t: Any) -> tuple[int, int, int, int] | None:
    pointer = t.data_ptr()
    cached = _blocks.get(key)
    if cached is not None and cached[0] == pointer:
        return cached[1]
    block = _block(t)
    _blocks[key] = (pointer, block)
    return block


def _tag(category: int, blocks: Iterable[tuple[int, int, int, int] | None]) -> None:
    kept = [b for b in blocks if b is not None]
    if kept:
        _trainprof.tag_memory(category, kept)


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _active:
        return
    try:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        _tag(PARAMETER, (_cached_block((id(p), "p"), p) for p in params))
        _tag(GRADIENT, (_cached_block((id(p), "g"), p.grad) for p in params if p.grad is not None))
    except Exception:
        _log.exception("trainprof: the optimizer's parameters were not tagged")


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _active:
        return
    try:
        _tag(OPTIMIZER_STATE, (_cached_block((id(p), name), t) for p, state in optimizer.state.items()
                               for name, t in (state.items() if isinstance(state, dict) else ())
                               if _is_tensor(t)))
    except Exception:
        _log.exception("trainprof: the optimizer's state was not tagged")


def _is_tensor(obj: Any) -> bool:
    import torch
    return isinstance(obj, torch.Tensor)


def _install() -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data.dataloader import _BaseDataLoaderIter as base_iter

    register_optimizer_step_pre_hook(_before_step)
    register_optimizer_step_post_hook(_after_step)
    next_batch = base_iter.__next__

    @functools.wraps(next_batch)
    def tagged_next(self: Any) -> Any:
        batch = next_batch(self)
        if _active:
            try:
                _tag(INPUT, (_block(t) for t in _tensors(batch)))
            except Exception:
                _log.exception("trainprof: a batch was not tagged")
        return batch

    base_iter.__next__ = tagged_next


def install() -> None:
    """Installs the hooks (once; needs torch imported)."""
    global _installed
    with _lock:
        if _installed:
            return
        try:
            _install()
            _installed = True
        except Exception:
            _log.exception("trainprof: memory categories cannot be recorded; they will read 'unknown'")


def started() -> None:
    """A profile with profile_memory records: the hooks tag."""
    global _active
    with _lock:
        _active += 1
        _blocks.clear()


def stopped() -> None:
    """That profile stopped recording."""
    global _active
    with _lock:
        _active = max(0, _active - 1)
