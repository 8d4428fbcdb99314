"""torch.profiler code that keeps working under trainprof: what torch itself
asks of "a profiler" while one records."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from conftest import op_statistic, run_dirs, torch

import trainprof
from trainprof import tensorboard_trace_handler


def torch_sees_a_profiler() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def test_torch_sees_a_profiler_while_trainprof_records_and_not_after() -> None:
    assert not torch_sees_a_profiler()
    with trainprof.profile() as prof:
        assert torch_sees_a_profiler()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            torch.ones(4).add(1)
        # torch.profiler's stop cleared it though trainprof records: the next step raises it again.
        prof.step()
        assert torch_sees_a_profiler()
    assert not torch_sees_a_profiler()

    with pytest.raises(RuntimeError, match="the training failed"):
        with trainprof.profile():
            raise RuntimeError("the training failed")
    assert not torch_sees_a_profiler()

    # torch.profiler still records when trainprof stops: the flag stays its.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with trainprof.profile():
            torch.ones(4).add(1)
        assert torch_sees_a_profiler()
    assert not torch_sees_a_profiler()


def test_a_profile_that_records_no_cpu_activity_leaves_torch_alone() -> None:
    with trainprof.profile(activities=[trainprof.ProfilerActivity.CUDA]):
        assert not torch_sees_a_profiler()


def compile_names(names: collections.Counter) -> collections.Counter:
    """The ranges torch.compile's code makes of itself (dynamo, AOT autograd, inductor)."""
    marks = ("Compiled", "Pregraph", "TorchDynamo", "AOTDispatcher")
    return collections.Counter({n: c for n, c in names.items() if any(m in n for m in marks)})


def test_a_compiled_step_records_the_graph_ranges_torch_profiler_records() -> None:
    """torch.compile's code makes its ranges (``## Call CompiledFxGraph <hash> ##``,
    ``Pregraph bytecode``, ...) only while torch believes a profiler is on, and
    only on a thread that holds a profiler state: both hold while trainprof
    records, without profile_memory too."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    @torch.compile
    def step() -> None:
        torch.nn.functional.cross_entropy(model(x), y).backward()

    step()  # compiles, outside both profilers
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    theirs = compile_names(collections.Counter(e.name for e in prof.events()))
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler("tp")):
        step()
    (run,) = run_dirs(Path("tp"))
    ours = compile_names(collections.Counter({name: int(row["Count"]) for name, row in op_statistic(run).items()}))
    graphs = [n for n in theirs if n.startswith("## Call CompiledFxGraph")]
    assert len(graphs) == 2, f"torch.profiler recorded {theirs}: a forward and a backward graph expected"
    assert ours == theirs
