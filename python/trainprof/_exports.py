# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""torch.profiler's export methods on a trainprof profile: ``export_chrome_trace``
and ``export_stacks`` of the cycle that closed last.

The numbers and the timeline come from the C++ analysis of that cycle's run
(analysed here when the trace handler has not done it already); Python only
copies the timeline and reads one table row per distinct call stack.
"""

from __future__ import annotations

import csv
import gzip
import os
import shutil
import tempfile
from typing import Callable, Optional, Union

from .analysis import analyse

# torch.profiler's metrics for export_stacks, and the operator_details.csv
# column each one is.
_STACK_METRICS = {
    "self_cpu_time_total": "Host Self Duration(us)",
    "self_cuda_time_total": "Device Self Duration(us)",
    "self_device_time_total": "Device Self Duration(us)",
}


def analysed_output(run_dir: Optional[str], method: str) -> str:
    """The PROFILER_OUTPUT directory of ``run_dir``, analysing the run first
    when it has not been; RuntimeError naming ``method`` when there is no
    closed run or its analysis failed."""
    if run_dir is None:
        raise RuntimeError(f"{method}(): nothing recorded yet: no cycle of this profile has closed "
                           "(call it after the `with` block or stop(), or in on_trace_ready)")
    output = os.path.join(run_dir, "PROFILER_OUTPUT")
    if not os.path.isfile(os.path.join(output, "trace_view.json")):
        report = analyse(run_dir, max_process_number=1)
        failed = [r.error for r in report.runs if not r.ok]
        if report.error or failed or not os.path.isfile(os.path.join(output, "trace_view.json")):
            raise RuntimeError(f"{method}(): the analysis of {run_dir} failed: "
                               f"{report.error or '; '.join(failed) or 'it wrote no trace_view.json'}")
    return output


def _write_replacing(path: Union[str, "os.PathLike[str]"], write: Callable[[str], None]) -> str:
    """Writes ``path`` as a fresh file beside it, then renames it into place:
    a reader never sees half a file, and what stood at ``path`` (a file, or a
    link planted there) is replaced, never written through."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, partial = tempfile.mkstemp(prefix=".trainprof-", dir=directory)
    os.close(fd)
    try:
        write(partial)
        os.chmod(partial, 0o644 & ~_umask())
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _umask() -> int:
    """The process' umask, read without setting it (os.umask would change it
    for every thread of the training meanwhile); 0o022 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def export_chrome_trace(run_dir: Optional[str], path: Union[str, "os.PathLike[str]"]) -> str:
    source = os.path.join(analysed_output(run_dir, "export_chrome_trace"), "trace_view.json")

    def write(partial: str) -> None:
        with open(source, "rb") as src:
            opener = gzip.open if os.fspath(path).endswith(".gz") else open
            with opener(partial, "wb") as dst:  # type: ignore[operator]
                shutil.copyfileobj(src, dst, 1 << 20)

    return _write_replacing(path, write)


def export_stacks(run_dir: Optional[str], path: Union[str, "os.PathLike[str]"], metric: str) -> str:
    if metric not in _STACK_METRICS:
        raise ValueError(f"metric should be one of: {sorted(_STACK_METRICS)}, got {metric!r}")
    table = os.path.join(analysed_output(run_dir, "export_stacks"), "operator_details.csv")
    column = _STACK_METRICS[metric]
    unsafe = str.maketrans(" ;\t\n", "____")

    def write(partial: str) -> None:
        with open(table, newline="", encoding="utf-8", errors="replace") as src, \
                open(partial, "w", encoding="utf-8") as dst:
            for row in csv.DictReader(src):
                stack = row.get("Call Stack") or ""
                value = int(float(row.get(column) or 0))
                if not stack or value <= 0:
                    continue
                # The table's stacks are innermost first; collapsed stacks outermost first.
                frames = [frame.translate(unsafe) for frame in reversed(stack.split(";"))]
                dst.write(";".join(frames) + " " + str(value) + "\n")

    return _write_replacing(path, write)
