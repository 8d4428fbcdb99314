# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``profile.events()``: torch's ``FunctionEvent`` per recorded call of the
cycle that closed last, from the C++ analysis (``trainprof::call_events``:
parents, children, self time, memory and launched GPU work per call).

The calls stay in C++ (96 bytes each: 1 M calls hold about 96 MB); a
``FunctionEvent`` is made when it is read and not kept, so walking the list
costs one object at a time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Iterator, Optional, Union, overload

from . import _trainprof

_NONE = 0xFFFFFFFF


class Interval:
    """A call's time range in µs from the cycle's start, as torch's."""

    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end

    def elapsed_us(self) -> float:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"Interval(start={self.start}, end={self.end})"


class Kernel:
    """A kernel, copy or set a call launched: ``name``, ``device``, ``duration`` (µs)."""

    __slots__ = ("name", "device", "duration")

    def __init__(self, name: str, device: int, duration: float) -> None:
        self.name = name
        self.device = device
        self.duration = duration

    def __repr__(self) -> str:
        return f"Kernel(name={self.name!r}, device={self.device}, duration={self.duration})"


class FunctionEvent:
    """One recorded call (an operator or a range), with torch's field names.
    Times are µs; memory is bytes allocated less bytes freed while it ran
    (``self_``: while it was the innermost call on its thread). ``thread`` is
    the OS thread id."""

    count = 1
    node_id = -1
    is_async = False
    is_remote = False
    is_legacy = False
    overload_name = ""
    concrete_inputs: list = []
    kwinputs: dict = {}
    scope = 0
    sequence_nr = -1
    fwd_thread = 0

    def __init__(self, events: "CallEventList", index: int) -> None:
        self._events = events
        self._index = index
        (start, end, self_ns, key, self._parent, self._first_child, _, first_kernel, kernel_count,
         self.cpu_memory_usage, self.self_cpu_memory_usage, self.device_memory_usage,
         self.self_device_memory_usage, device_ns, self_device_ns) = events._call(index)
        self.id = index
        self.trace_name, self.thread, self.input_shapes, self.stack, is_operator, is_step, self.flops = \
            events._key(key)
        # torch.profiler's name for every step, for one row in the tables; trace_name keeps the number.
        self.name = "ProfilerStep*" if is_step else self.trace_name
        self.is_user_annotation = not is_operator
        self.time_range = Interval((start - events._origin) / 1000.0, (end - events._origin) / 1000.0)
        self.self_cpu_time_total = self_ns / 1000.0
        self.device_time_total = device_ns / 1000.0
        self.self_device_time_total = self_device_ns / 1000.0
        self.kernels = [events._kernel(k) for k in range(first_kernel, first_kernel + kernel_count)]
        self.use_device = "cuda" if self.kernels else None

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        return self.time_range.elapsed_us()

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total

    @property
    def device_time(self) -> float:
        return self.device_time_total

    cuda_time = device_time
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)
    cuda_memory_usage = property(lambda self: self.device_memory_usage)
    self_cuda_memory_usage = property(lambda self: self.self_device_memory_usage)

    @property
    def cpu_parent(self) -> Optional["FunctionEvent"]:
        """The call this one ran in on its thread (None at the top)."""
        return self._events._event_at_call(self._parent)

    @property
    def cpu_children(self) -> list["FunctionEvent"]:
        """The calls that ran directly in this one, in start order."""
        children = []
        call = self._first_child
        while call != _NONE:
            child = self._events._event_at_call(call)
            if child is not None:
                children.append(child)
            call = self._events._call(call)[6]
        return children

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FunctionEvent) and other._events is self._events and other._index == self._index

    def __hash__(self) -> int:
        return hash((id(self._events), self._index))

    def __repr__(self) -> str:
        return (f"<FunctionEvent id={self.id} name={self.name} thread={self.thread} "
                f"cpu_time_total={self.cpu_time_total:.3f} self_cpu_time_total={self.self_cpu_time_total:.3f} "
                f"input_shapes={self.input_shapes} cpu_memory_usage={self.cpu_memory_usage}>")


class CallEventList(Sequence):
    """torch's ``EventList`` of ``FunctionEvent``, read from C++ one call at a
    time: indexing, iteration, ``len``, ``table()``, ``key_averages()``,
    ``total_average()``, ``self_cpu_time_total``."""

    def __init__(self, calls: _trainprof.CallEvents, run_dir: str, stepped: bool, profile_memory: bool) -> None:
        self._calls = calls
        self._call = calls.call
        self._run_dir = run_dir
        self._stepped = stepped
        self._profile_memory = profile_memory
        self._origin = calls.origin_ns
        self._keys: dict[int, tuple] = {}

    def _key(self, k: int) -> tuple:
        key = self._keys.get(k)
        if key is None:
            name, tid, shapes, stack, is_operator, is_step, flops = self._calls.key(k)
            key = (name, tid, json.loads(shapes) if shapes else [], stack.split(";") if stack else [],
                   is_operator, is_step, flops)
            self._keys[k] = key
        return key

    def _kernel(self, j: int) -> Kernel:
        name, device, start, end = self._calls.kernel(j)
        return Kernel(name, device, (end - start) / 1000.0)

    def _event_at_call(self, call: int) -> Optional[FunctionEvent]:
        return None if call == _NONE else FunctionEvent(self, call)

    def __len__(self) -> int:
        return len(self._calls)

    @overload
    def __getitem__(self, i: int) -> FunctionEvent: ...
    @overload
    def __getitem__(self, i: slice) -> list[FunctionEvent]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[FunctionEvent, list[FunctionEvent]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        return FunctionEvent(self, i)

    def __iter__(self) -> Iterator[FunctionEvent]:
        for call in range(len(self._calls)):
            yield FunctionEvent(self, call)

    @property
    def self_cpu_time_total(self) -> float:
        """The sum of every call's self CPU time, µs."""
        return sum(self._call(c)[2] for c in range(len(self._calls))) / 1000.0

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> Any:
        """The calls averaged by key (``profile.key_averages()`` of the same cycle)."""
        from . import _key_averages

        return _key_averages.key_averages(self._run_dir, group_by_input_shape, group_by_stack_n, self._stepped,
                                          self._profile_memory)

    def total_average(self) -> Any:
        return self.key_averages().total_average()

    def table(self, sort_by: Optional[str] = None, row_limit: int = 100, max_name_column_width: int = 55,
              max_src_column_width: int = 75, header: Optional[str] = None, top_level_events_only: bool = False,
              max_shapes_column_width: int = 80, time_unit: Optional[str] = None) -> str:
        """torch's table with one row per call (every call is read: for a long
        cycle, ``key_averages().table()`` is the summary)."""
        from . import _key_averages

        events = _key_averages.EventList(list(self), with_flops=any(self._key(k)[6] > 0 for k in self._keys_used()),
                                         profile_memory=self._profile_memory)
        return events.table(sort_by, row_limit, max_name_column_width, max_src_column_width, header,
                            top_level_events_only, max_shapes_column_width, time_unit)

    def _keys_used(self) -> range:
        return range(self._calls.key_count())

    def __repr__(self) -> str:
        return f"<EventList of {len(self)} FunctionEvent, read on demand>"


def events(run_dir: str, stepped: bool, profile_memory: bool) -> CallEventList:
    """``stepped``: the profile's step() was called. Without it the session's
    one step (the whole recording) is left out: torch.profiler lists steps
    only when there are some."""
    calls = _trainprof.call_events(run_dir, include_steps=stepped)
    if calls.error:
        raise RuntimeError(f"events(): cannot read {run_dir}: {calls.error}")
    return CallEventList(calls, run_dir, stepped, profile_memory)
