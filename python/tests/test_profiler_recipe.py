"""PyTorch's profiler recipe ("PyTorch Profiler"), section by section, on the
CPU: each test runs the recipe's code twice, once with ``torch.profiler`` and
once with ``trainprof`` in its place, and checks trainprof's result against
torch's (operator names, call counts, table columns, memory cells), never
against numbers written here.

The recipe profiles torchvision's resnet18, which this environment does not
have: a small ResNet of the same operators stands in for it. Like the recipe,
the model is profiled as constructed (training mode, autograd on): the
recipe calls neither ``model.eval()`` nor ``torch.no_grad()``.

Call stacks are compared by file and function: torch writes a frame's path
relative and the line of its function's ``def``, trainprof the absolute path
and the line that ran.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
from conftest import torch

import trainprof

PROFILERS = (torch.profiler, trainprof)
THIS_FILE = Path(__file__).name
ROW_LIMIT = 10  # the recipe's row_limit for its tables
STACK_DEPTH = 5  # the recipe's group_by_stack_n

# What torch says where the recipe asks for CUDA on a machine without it, and
# when a schedule's cycle closes: expected here, not news.
torch_cuda_warnings = pytest.mark.filterwarnings("ignore:CUDA is not available, disabling CUDA profiling")
torch_cycle_warning = pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle")


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.nn.functional.relu(out + x)


class SmallResNet(torch.nn.Module):
    """resnet18's operators at a fraction of its size: a strided 7x7
    convolution, batch norm, ReLU, max pooling, two residual blocks,
    adaptive average pooling, flatten and a linear classifier."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, channels, 7, stride=2, padding=3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = torch.nn.Sequential(ResidualBlock(channels), ResidualBlock(channels))
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.fixture(scope="module")
def inputs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(5, 3, 64, 64)


@pytest.fixture(scope="module")
def model(inputs: torch.Tensor) -> SmallResNet:
    torch.manual_seed(0)
    net = SmallResNet()
    net(inputs)  # the first call initializes lazily (oneDNN primitives, allocator caches)
    return net


def convolutions(model: torch.nn.Module) -> int:
    """aten::conv2d calls per forward pass."""
    return sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def columns(table_line: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", table_line.strip()) if c]


def table_parts(table: str) -> tuple[list[str], list[str], str]:
    """A key-averages table's header columns, body lines and footer line."""
    lines = table.rstrip("\n").splitlines()
    separators = [i for i, line in enumerate(lines) if line.strip() and set(line) <= {"-", " "}]
    first, second, last = separators[0], separators[1], separators[-1]
    return columns(lines[first + 1]), lines[second + 1:last], lines[last + 1]


def named_rows(body: list[str]) -> list[list[str]]:
    """The body's rows, without the lines that only continue a row's source location."""
    return [columns(line) for line in body if len(columns(line)) > 1]


def counts(averages: Any) -> set[tuple[str, int]]:
    return {(e.key, e.count) for e in averages}


def run_execution_time(profiler: ModuleType, model: SmallResNet, inputs: torch.Tensor) -> Any:
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with profiler.record_function("model_inference"):
            model(inputs)
    return prof


def test_using_profiler_to_analyze_execution_time(model: SmallResNet, inputs: torch.Tensor) -> None:
    """Recipe section "Using profiler to analyze execution time"."""
    theirs, ours = (run_execution_time(profiler, model, inputs) for profiler in PROFILERS)

    assert counts(ours.key_averages()) == counts(theirs.key_averages())
    assert ("model_inference", 1) in counts(ours.key_averages())
    assert {e.key for e in ours.key_averages()} == {e.key for e in theirs.key_averages()}

    def by_shape(prof: Any) -> set[tuple[str, str, int]]:
        return {(e.key, str(e.input_shapes), e.count) for e in prof.key_averages(group_by_input_shape=True)
                if e.key.startswith("aten::")}

    assert by_shape(ours) == by_shape(theirs)
    # The stem's and the blocks' convolutions are rows of their own.
    assert len({shapes for key, shapes, _ in by_shape(ours) if key == "aten::conv2d"}) > 1

    for group_by_input_shape in (False, True):
        tables = [prof.key_averages(group_by_input_shape=group_by_input_shape).table(
            sort_by="cpu_time_total", row_limit=ROW_LIMIT) for prof in (theirs, ours)]
        (their_header, their_body, their_footer), (header, body, footer) = map(table_parts, tables)
        assert header == their_header
        assert ("Input Shapes" in header) == group_by_input_shape
        assert len(body) == len(their_body) == ROW_LIMIT
        assert footer.startswith("Self CPU time total:") and their_footer.startswith("Self CPU time total:")
        # The range around everything is the most expensive row in both.
        assert columns(body[0])[0] == columns(their_body[0])[0] == "model_inference"


def run_memory(profiler: ModuleType, model: SmallResNet, inputs: torch.Tensor) -> Any:
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], profile_memory=True,
                          record_shapes=True) as prof:
        model(inputs)
    return prof


def memory_by_key(averages: Any) -> dict[str, tuple[int, int, int]]:
    """Each aten:: key's call count, bytes with its children and its own bytes
    (mean()'s aten::div_ calls aten::div_: both count it once)."""
    return {e.key: (e.count, e.cpu_memory_usage, e.self_cpu_memory_usage)
            for e in averages if e.key.startswith("aten::")}


def test_using_profiler_to_analyze_memory_consumption(model: SmallResNet, inputs: torch.Tensor) -> None:
    """Recipe section "Using profiler to analyze memory consumption"."""
    theirs, ours = (run_memory(profiler, model, inputs).key_averages() for profiler in PROFILERS)

    # Allocation sizes are deterministic: every operator's bytes are torch's to the byte.
    assert memory_by_key(ours) == memory_by_key(theirs)
    assert any(self_bytes > 0 for _, _, self_bytes in memory_by_key(ours).values())
    # Memory freed outside every operator is torch's "[memory]" row in both.
    assert {(e.key, e.count, e.cpu_memory_usage) for e in ours if e.key == "[memory]"} == \
        {(e.key, e.count, e.cpu_memory_usage) for e in theirs if e.key == "[memory]"}
    assert {e.key for e in ours} == {e.key for e in theirs}

    for sort_by, cell in (("self_cpu_memory_usage", "Self CPU Mem"), ("cpu_memory_usage", "CPU Mem")):
        (their_header, their_body, _), (header, body, _) = (
            table_parts(averages.table(sort_by=sort_by, row_limit=ROW_LIMIT)) for averages in (theirs, ours))
        assert header == their_header
        assert header[-3:] == ["CPU Mem", "Self CPU Mem", "# of Calls"]
        assert len(body) == len(their_body) == ROW_LIMIT
        # Sorted by the same bytes: the sorted column reads the same down the
        # table, whichever order equal rows take.
        position = header.index(cell)
        assert [columns(r)[position] for r in body] == [columns(r)[position] for r in their_body]
        their_cells = {columns(r)[0]: columns(r)[-3:] for r in their_body}
        for row in map(columns, body):
            if row[0] in their_cells:
                assert row[-3:] == their_cells[row[0]], row[0]


def operator_names(trace: dict, category: str) -> collections.Counter:
    return collections.Counter(e["name"] for e in trace["traceEvents"]
                               if e.get("cat") == category and e["name"].startswith("aten::"))


def test_using_tracing_functionality(model: SmallResNet, inputs: torch.Tensor, tmp_path: Path) -> None:
    """Recipe section "Using tracing functionality"."""
    traces = {}
    for profiler in PROFILERS:
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
            model(inputs)
        path = tmp_path / f"{profiler.__name__}_trace.json"
        prof.export_chrome_trace(str(path))
        traces[profiler] = json.loads(path.read_text())
    theirs, ours = traces[torch.profiler], traces[trainprof]
    assert "traceEvents" in theirs and "traceEvents" in ours

    # torch's category for operators is cpu_op; trainprof's is whatever its aten:: events carry.
    our_categories = {e.get("cat") for e in ours["traceEvents"] if e["name"].startswith("aten::")}
    assert our_categories == {"cpu_op"}
    assert operator_names(ours, "cpu_op") == operator_names(theirs, "cpu_op")
    assert operator_names(ours, "cpu_op")["aten::conv2d"] == convolutions(model)

    # torch.profiler exports a profile once ("Trace is already saved"); trainprof
    # exports it again, here compressed because the name ends in .gz.
    compressed = tmp_path / "trainprof_trace.json.gz"
    prof.export_chrome_trace(str(compressed))
    with gzip.open(compressed, "rt") as f:
        assert json.load(f) == ours


def run_with_stack(profiler: ModuleType, model: SmallResNet, inputs: torch.Tensor) -> Any:
    # torch needs its verbose config for Python stacks in its events; trainprof
    # takes torch's config and says it ignores it.
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.CUDA],
                          with_stack=True,
                          experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True)) as prof:
        model(inputs)
    return prof


FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<function>.+)$")


@torch_cuda_warnings
def test_examining_stack_traces(model: SmallResNet, inputs: torch.Tensor, caplog: pytest.LogCaptureFixture,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Recipe section "Examining stack traces"."""
    monkeypatch.setattr(trainprof.profiler, "_warned_ignored", set())  # said once per process
    theirs = run_with_stack(torch.profiler, model, inputs)
    caplog.clear()
    ours = run_with_stack(trainprof, model, inputs)
    said = [r.getMessage() for r in caplog.records if r.name == "trainprof" and r.levelname == "WARNING"]
    assert any(m.startswith("experimental_config: not supported by trainprof") for m in said), said

    grouped = {prof: prof.key_averages(group_by_stack_n=STACK_DEPTH) for prof in (theirs, ours)}
    row_limit = 2  # the recipe's, for this table
    (their_header, their_body, _), (header, body, _) = (
        table_parts(grouped[prof].table(sort_by="self_cuda_time_total", row_limit=row_limit))
        for prof in (theirs, ours))
    assert header == their_header
    assert "Source Location" in header
    assert len(named_rows(body)) == len(named_rows(their_body)) == row_limit

    # Every operator has a stack, in both; no other key has one.
    keys_with_stack = {prof: {e.key for e in grouped[prof] if e.stack} for prof in (theirs, ours)}
    assert keys_with_stack[ours] == keys_with_stack[theirs]
    assert keys_with_stack[ours] and all(key.startswith("aten::") for key in keys_with_stack[ours])

    # Each convolution was called from this file's forward(). trainprof's
    # five grouped frames reach it; torch's verbose frames ("<built-in method
    # ...>", "nn.Module: Conv2d_0") take two of its five, so torch's is
    # checked on the whole stack of each call.
    our_conv_stacks = [e.stack for e in grouped[ours] if e.key == "aten::conv2d"]
    assert our_conv_stacks and all(len(stack) == STACK_DEPTH for stack in our_conv_stacks)
    for stack in our_conv_stacks:
        assert any(THIS_FILE in frame for frame in stack), stack
    for prof in (theirs, ours):
        calls = [e.stack for e in prof.events() if e.name == "aten::conv2d"]
        assert len(calls) == convolutions(model)
        for stack in calls:
            frames_in_this_file = [FRAME.match(f) for f in stack if THIS_FILE in f]
            assert frames_in_this_file and frames_in_this_file[0]["function"] == "forward", stack
    # trainprof's frames all read "path(line): function", as torch's Python frames do.
    assert all(FRAME.match(frame) for e in grouped[ours] for frame in e.stack)


def collapsed_stacks(path: Path) -> list[tuple[list[str], int]]:
    """A collapsed-stack file's lines: frames outermost first, and the value."""
    parsed = []
    for line in path.read_text().splitlines():
        frames, value = line.rsplit(" ", 1)
        assert " " not in frames and "\t" not in frames, line
        parsed.append((frames.split(";"), int(value)))
    return parsed


COLLAPSED_FRAME = re.compile(r"^(?:.*/)?(?P<file>[^/]+)\(\d+\):_(?P<function>.+)$")


def file_and_function(frame: str) -> tuple[str, str] | None:
    """A collapsed frame's file name and function; None for one that names no file."""
    match = COLLAPSED_FRAME.match(frame)
    return (match["file"], match["function"]) if match else None


@torch_cuda_warnings
def test_visualizing_data_as_a_flame_graph(model: SmallResNet, inputs: torch.Tensor, tmp_path: Path) -> None:
    """Recipe section "Visualizing data as a flame graph" (its metric on the CPU: self_cpu_time_total)."""
    files = {}
    for profiler in PROFILERS:
        prof = run_with_stack(profiler, model, inputs)
        files[profiler] = tmp_path / f"{profiler.__name__}_stacks.txt"
        prof.export_stacks(str(files[profiler]), "self_cpu_time_total")
    theirs, ours = (collapsed_stacks(files[profiler]) for profiler in PROFILERS)
    assert theirs and ours
    for stacks in (theirs, ours):
        # The innermost field is a frame in both: neither writes operator names.
        assert not any(frames[-1].startswith("aten::") for frames, _ in stacks)
        assert any(THIS_FILE in frame for frames, _ in stacks for frame in frames)
    assert all(value > 0 for _, value in ours)
    # Where trainprof's stacks end, torch's pass: the same files and
    # functions (their line numbers and paths are written differently).
    their_functions = {file_and_function(frame) for frames, _ in theirs for frame in frames} - {None}
    our_leaves = {file_and_function(frames[-1]) for frames, _ in ours}
    assert None not in our_leaves
    assert our_leaves <= their_functions, our_leaves - their_functions
    assert (THIS_FILE, "forward") in our_leaves


# What a trace handler saw of a cycle: the step number, its table's header
# columns and the call counts of its key averages.
Cycle = tuple[int, list[str], collections.Counter]


def recipe_trace_handler(out: Path, seen: list[Cycle]) -> Callable[[Any], None]:
    """The recipe's trace_handler (its trace files under ``out``), noting each cycle in ``seen``."""

    def trace_handler(p: Any) -> None:
        output = p.key_averages().table(sort_by="self_cuda_time_total", row_limit=ROW_LIMIT)
        print(output)
        p.export_chrome_trace(str(out / ("test_trace_" + str(p.step_num) + ".json")))
        seen.append((p.step_num, table_parts(output)[0], key_counts(p.key_averages())))

    return trace_handler


def key_counts(averages: Any) -> collections.Counter:
    """Call counts by key (every step is the one key ``ProfilerStep*``)."""
    return collections.Counter({e.key: e.count for e in averages})


def step_names(trace_file: Path) -> list[str]:
    trace = json.loads(trace_file.read_text())
    return sorted(e["name"] for e in trace["traceEvents"]
                  if e.get("ph") == "X" and e["name"].startswith("ProfilerStep"))


@torch_cuda_warnings
@torch_cycle_warning
def test_using_profiler_to_analyze_long_running_jobs(model: SmallResNet, inputs: torch.Tensor,
                                                     tmp_path: Path) -> None:
    """Recipe section "Using profiler to analyze long-running jobs"."""
    their_schedule, our_schedule = (profiler.schedule(skip_first=10, wait=5, warmup=1, active=3, repeat=2)
                                    for profiler in PROFILERS)
    assert [our_schedule(step).name for step in range(41)] == [their_schedule(step).name for step in range(41)]

    cycles: dict[ModuleType, list[Cycle]] = {}
    for profiler in PROFILERS:
        out = tmp_path / profiler.__name__
        out.mkdir()
        cycles[profiler] = []
        trace_handler = recipe_trace_handler(out, cycles[profiler])
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.CUDA],
                              schedule=profiler.schedule(wait=1, warmup=1, active=2),
                              on_trace_ready=trace_handler) as p:
            for idx in range(8):
                model(inputs)
                p.step()
    theirs, ours = cycles[torch.profiler], cycles[trainprof]

    assert theirs and [step for step, _, _ in ours] == [step for step, _, _ in theirs]
    for (_, their_header, their_counts), (_, header, our_counts) in zip(theirs, ours):
        assert header == their_header
        assert our_counts == their_counts
    trace_files = {profiler: sorted(f.name for f in (tmp_path / profiler.__name__).iterdir())
                   for profiler in PROFILERS}
    assert trace_files[trainprof] == trace_files[torch.profiler]
    # Each cycle's trace holds the same two steps.
    for name in trace_files[trainprof]:
        assert step_names(tmp_path / "trainprof" / name) == step_names(tmp_path / "torch.profiler" / name)
