# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``profile.key_averages()``: torch's ``EventList`` of ``FunctionEventAvg``
over the cycle that closed last, its numbers from the C++ analysis
(``trainprof::key_averages``: the run's raw data through the per-call walk,
summed per key in C++). Times are in µs and memory in bytes, as torch's.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Optional

from . import _trainprof

# The sort keys torch's table accepts ("cuda" and "xpu" read as "device").
SORT_KEYS = ("count", "cpu_time", "cpu_time_total", "self_cpu_time_total", "device_time", "device_time_total",
             "self_device_time_total", "cuda_time", "cuda_time_total", "self_cuda_time_total", "xpu_time",
             "xpu_time_total", "self_xpu_time_total", "cpu_memory_usage", "self_cpu_memory_usage",
             "device_memory_usage", "self_device_memory_usage", "cuda_memory_usage", "self_cuda_memory_usage",
             "flops")


class FunctionEventAvg:
    """One key: every call of an operator or range name (and of its input
    shapes or call stack when grouped by them), with torch's field names."""

    def __init__(self, key: str, count: int = 0, cpu_time_total: float = 0.0, self_cpu_time_total: float = 0.0,
                 device_time_total: float = 0.0, self_device_time_total: float = 0.0,
                 input_shapes: Optional[list] = None, stack: Optional[list[str]] = None, flops: int = 0,
                 is_user_annotation: bool = False, cpu_memory_usage: int = 0, self_cpu_memory_usage: int = 0,
                 device_memory_usage: int = 0, self_device_memory_usage: int = 0) -> None:
        self.key = key
        self.count = count
        self.cpu_time_total = cpu_time_total
        self.self_cpu_time_total = self_cpu_time_total
        self.device_time_total = device_time_total
        self.self_device_time_total = self_device_time_total
        self.input_shapes = input_shapes
        self.stack = stack or []
        self.flops = flops
        self.is_user_annotation = is_user_annotation
        self.cpu_memory_usage = cpu_memory_usage
        self.self_cpu_memory_usage = self_cpu_memory_usage
        self.device_memory_usage = device_memory_usage
        self.self_device_memory_usage = self_device_memory_usage
        self.node_id = -1
        self.overload_name = ""
        self.is_async = False
        self.is_legacy = False
        self.cpu_parent = None

    @classmethod
    def _of(cls, row: _trainprof.KeyAverage, by_shape: bool) -> "FunctionEventAvg":
        # As torch's: None unless grouped by shapes, then [] for a call that has none.
        shapes = (json.loads(row.input_shapes) if row.input_shapes else []) if by_shape else None
        average = cls(row.name, row.count, row.total_ns / 1000.0, row.self_ns / 1000.0,
                      row.device_total_ns / 1000.0, row.device_self_ns / 1000.0, shapes,
                      row.stack.split(";") if row.stack else [], row.flops, not row.is_operator, row.cpu_memory,
                      row.self_cpu_memory, row.device_memory, row.self_device_memory)
        # As torch's: the parent of the key's first call (by name here), None at the top level.
        average.cpu_parent = FunctionEventAvg(row.first_parent) if row.first_parent else None
        return average

    @property
    def cpu_time(self) -> float:
        """Average CPU time per call, µs."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    # torch's CUDA names for the device times.
    cuda_time = device_time
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)
    xpu_time = device_time
    xpu_time_total = cuda_time_total
    self_xpu_time_total = self_cuda_time_total
    cuda_memory_usage = property(lambda self: self.device_memory_usage)
    self_cuda_memory_usage = property(lambda self: self.self_device_memory_usage)

    def __repr__(self) -> str:
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={_format_time(self.self_cpu_time_total)} "
                f"cpu_time={_format_time(self.cpu_time)} self_device_time={_format_time(self.self_device_time_total)} "
                f"device_time={_format_time(self.device_time)} input_shapes={self.input_shapes} count={self.count}>")


class EventList(list):
    """torch's EventList of key averages: a list of FunctionEventAvg, and the table."""

    def __init__(self, events: Iterable[Any] = (), *, with_flops: bool = False, profile_memory: bool = False) -> None:
        super().__init__(events)
        self._with_flops = with_flops
        self._profile_memory = profile_memory

    @property
    def self_cpu_time_total(self) -> float:
        """The sum of the rows' self CPU time, µs."""
        return sum(e.self_cpu_time_total for e in self)

    def total_average(self) -> FunctionEventAvg:
        """Every row summed into one, named "Total"."""
        total = FunctionEventAvg("Total")
        for e in self:
            total.count += e.count
            total.cpu_time_total += e.cpu_time_total
            total.self_cpu_time_total += e.self_cpu_time_total
            total.device_time_total += e.device_time_total
            total.self_device_time_total += e.self_device_time_total
            total.flops += e.flops
            total.cpu_memory_usage += e.cpu_memory_usage
            total.self_cpu_memory_usage += e.self_cpu_memory_usage
            total.device_memory_usage += e.device_memory_usage
            total.self_device_memory_usage += e.self_device_memory_usage
        return total

    def table(self, sort_by: Optional[str] = None, row_limit: int = 100, max_name_column_width: int = 55,
              max_src_column_width: int = 75, header: Optional[str] = None, top_level_events_only: bool = False,
              max_shapes_column_width: int = 80, time_unit: Optional[str] = None) -> str:
        """torch's table: the columns, units and footer torch prints.

        Raises:
            ValueError: a ``sort_by`` torch does not accept (the valid ones are listed).
        """
        if sort_by is not None and sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by {sort_by!r} is not one of: {', '.join(SORT_KEYS)}")
        if time_unit not in (None, "s", "ms", "us"):
            raise ValueError(f"time_unit must be None, 's', 'ms' or 'us', got {time_unit!r}")
        return _Table(self, self._with_flops, self._profile_memory, max_name_column_width, max_src_column_width,
                      max_shapes_column_width, time_unit).render(sort_by, row_limit, header, top_level_events_only)

    def __str__(self) -> str:
        return self.table()


def key_averages(run_dir: str, group_by_input_shape: bool, group_by_stack_n: int, stepped: bool,
                 profile_memory: bool = False) -> EventList:
    """``stepped``: the profile's step() was called. Without it the run's one
    step (the whole recording) is left out, as torch.profiler lists
    ProfilerStep#N only for steps. ``profile_memory``: the table shows the
    memory columns (as torch's, when memory was profiled)."""
    result = _trainprof.key_averages(run_dir, group_by_input_shape, group_by_stack_n, include_steps=stepped)
    if result.error:
        raise RuntimeError(f"key_averages(): cannot read {run_dir}: {result.error}")
    rows = [FunctionEventAvg._of(row, group_by_input_shape) for row in result.rows]
    return EventList(rows, with_flops=any(r.flops > 0 for r in rows), profile_memory=profile_memory)


def _format_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _format_memory(nbytes: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _format_share(part: float, whole: float) -> str:
    return "NaN" if whole == 0 else f"{part * 100.0 / whole:.2f}%"


_FLOPS_UNITS = ("FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs")


class _Table:
    """The layout of torch's key-averages table: right-aligned columns 12
    wide (the name, shapes and source columns as wide as their longest
    entry, capped), two spaces apart."""

    def __init__(self, events: list[Any], with_flops: bool, profile_memory: bool, name_cap: int, src_cap: int,
                 shapes_cap: int, time_unit: Optional[str]) -> None:
        self.events = events
        self.time_unit = time_unit
        self.device = any(e.self_device_time_total > 0 for e in events)
        self.memory = profile_memory
        self.device_memory = profile_memory and self.device and any(e.device_memory_usage != 0 for e in events)
        self.shapes = any(e.input_shapes for e in events)
        self.stacks = any(e.stack for e in events)
        positive = [e.flops for e in events if e.flops > 0]
        self.flops_scale, self.flops_unit = 1.0, ""
        if with_flops and positive:
            power = int(max(0.0, min(math.log10(min(positive)) / 3, len(_FLOPS_UNITS) - 1)))
            self.flops_scale, self.flops_unit = 10.0 ** (-3 * power), _FLOPS_UNITS[power]
        self.name_width = min(max((len(e.key) for e in events), default=0) + 4, name_cap)
        self.shapes_width = min(max((len(str(e.input_shapes)) for e in events), default=0) + 4, shapes_cap)
        self.src_width = min(max((len(f) for e in events for f in e.stack), default=0) + 4, src_cap)
        self.columns: list[tuple[str, int, str]] = [("Name", self.name_width, ">")]
        for title in ("Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"):
            self.columns.append((title, 12, ">"))
        if self.device:
            for title in ("Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"):
                self.columns.append((title, 12, ">"))
        if self.memory:
            self.columns += [("CPU Mem", 12, ">"), ("Self CPU Mem", 12, ">")]
        if self.device_memory:
            self.columns += [("CUDA Mem", 12, ">"), ("Self CUDA Mem", 12, ">")]
        self.columns.append(("# of Calls", 12, ">"))
        if self.shapes:
            self.columns.append(("Input Shapes", self.shapes_width, ">"))
        if self.stacks:
            self.columns.append(("Source Location", self.src_width, "<"))
        if self.flops_unit:
            self.columns.append((f"Total {self.flops_unit}", 12, ">"))
        self.line_length = sum(width + 2 for _, width, _ in self.columns) - 2

    def line(self, values: list[Any]) -> str:
        return "".join(f"{value!s:{align}{width}}  " for value, (_, width, align) in zip(values, self.columns))

    def time(self, us: float) -> str:
        if self.time_unit == "s":
            return f"{us / 1e6:.3f}s"
        if self.time_unit == "ms":
            return f"{us / 1e3:.3f}ms"
        if self.time_unit == "us":
            return f"{us:.3f}us"
        return _format_time(us)

    def render(self, sort_by: Optional[str], row_limit: int, header: Optional[str], top_level_only: bool) -> str:
        events = list(self.events)
        if sort_by is not None:
            attribute = sort_by.replace("cuda", "device").replace("xpu", "device")
            events.sort(key=lambda e: getattr(e, attribute), reverse=True)
        self_cpu = sum(e.self_cpu_time_total for e in events)
        self_device = sum(e.self_device_time_total for e in events)
        separator = "".join("-" * width + "  " for _, width, _ in self.columns)
        out: list[str] = []
        if header is not None:
            out += ["=" * self.line_length, header]
        if top_level_only:
            out += ["=" * self.line_length, "This report only display top-level ops statistics"]
        out += [separator, self.line([title for title, _, _ in self.columns]), separator]
        shown = [e for e in events if not top_level_only or e.cpu_parent is None]
        # As torch's: a negative row_limit shows every row.
        for e in shown[:row_limit] if row_limit >= 0 else shown:
            out += self.rows_of(e, self_cpu, self_device)
        out.append(separator)
        out.append(f"Self CPU time total: {self.time(self_cpu)}")
        if self.device:
            out.append(f"Self CUDA time total: {self.time(self_device)}")
        return "\n".join(out) + "\n"

    def rows_of(self, e: FunctionEventAvg, self_cpu: float, self_device: float) -> list[str]:
        name = e.key if len(e.key) < self.name_width - 3 else e.key[:self.name_width - 3] + "..."
        values: list[Any] = [name, _format_share(e.self_cpu_time_total, self_cpu), self.time(e.self_cpu_time_total),
                             _format_share(e.cpu_time_total, self_cpu), self.time(e.cpu_time_total),
                             self.time(e.cpu_time)]
        if self.device:
            values += [self.time(e.self_device_time_total), _format_share(e.self_device_time_total, self_device),
                       self.time(e.device_time_total), self.time(e.device_time)]
        if self.memory:
            values += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        if self.device_memory:
            values += [_format_memory(e.device_memory_usage), _format_memory(e.self_device_memory_usage)]
        values.append(e.count)
        if self.shapes:
            values.append(str(e.input_shapes)[:self.shapes_width])
        if self.stacks:
            values.append(_trim(e.stack[0], self.src_width) if e.stack else "")
        if self.flops_unit:
            values.append("--" if e.flops <= 0 else f"{e.flops * self.flops_scale:8.3f}")
        lines = [self.line(values)]
        if self.stacks and e.stack:
            source = [title for title, _, _ in self.columns].index("Source Location")
            for frame in e.stack[1:]:
                lines.append(self.line([_trim(frame, self.src_width) if i == source else ""
                                        for i in range(len(self.columns))]))
            lines.append(self.line([""] * len(self.columns)))
        return lines


def _trim(path: str, width: int) -> str:
    """A long source location keeps its end, marked "..."."""
    if len(path) <= width:
        return path
    path = path[len(path) - width:]
    return "..." + path[3:] if len(path) > 3 else path
