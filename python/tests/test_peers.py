"""trainprof against the tools PyTorch users already use: the same aten
operators as torch.profiler, and the trace handler's output read by the
TensorBoard profiler plugin (torch-tb-profiler) and HTA."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import pytest
from conftest import Trainer, op_statistic, run_dirs, torch

import trainprof
from trainprof import ProfilerActivity, schedule, tensorboard_trace_handler

STEPS = 3


def torch_profiler_aten_counts(trainer: Trainer) -> collections.Counter:
    """aten operator -> calls, as torch.profiler (Kineto, CPU) records them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.run(STEPS)
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def trainprof_aten_counts(trainer: Trainer) -> collections.Counter:
    """aten operator -> calls, from trainprof's op_statistic.csv."""
    with trainprof.profile(activities=[ProfilerActivity.CPU],
                           on_trace_ready=tensorboard_trace_handler("tp")):
        trainer.run(STEPS)
    (run,) = run_dirs(Path("tp"))
    return collections.Counter({name: int(row["Count"]) for name, row in op_statistic(run).items()
                                if name.startswith("aten::")})


def test_same_aten_operators_the_same_number_of_times_as_torch_profiler(trainer: Trainer) -> None:
    """The same training steps, recorded by each profiler in turn, after a
    warm-up step (first calls initialize lazily). Only ``aten::`` names are
    compared: autograd nodes and user scopes are named differently by the two
    (torch: ``autograd::engine::evaluate_function: AddmmBackward0`` around
    ``AddmmBackward0``; trainprof: the node itself), and torch.profiler adds
    its own ``ProfilerStep``/``[memory]`` entries."""
    trainer.run(1)
    theirs = torch_profiler_aten_counts(trainer)
    ours = trainprof_aten_counts(trainer)
    assert theirs, "torch.profiler recorded no aten operator"
    missing = {n: c - ours[n] for n, c in theirs.items() if ours[n] != c}
    extra = {n: c for n, c in ours.items() if n not in theirs}
    assert not missing and not extra, f"count differences (torch - trainprof): {missing}; only trainprof: {extra}"
    assert sum(ours.values()) > 50 and "aten::convolution_backward" in ours


@pytest.fixture
def handler_output(tmp_path: Path, trainer: Trainer) -> Path:
    """A trace handler's directory after two recorded cycles of two steps."""
    out = tmp_path / "log"
    with trainprof.profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=2),
                           on_trace_ready=tensorboard_trace_handler(out, worker_name="worker0"),
                           record_shapes=True, profile_memory=True, with_stack=True, with_modules=True) as prof:
        trainer.run(6, prof.step)
    return out


def test_trace_handler_names_each_trace_as_torch_does(handler_output: Path) -> None:
    runs = run_dirs(handler_output)
    assert len(runs) == 2
    traces = sorted(p.name for p in handler_output.glob("*.pt.trace.json"))
    assert len(traces) == 2 and all(t.startswith("worker0.") for t in traces)
    for run, trace in zip(runs, traces):  # the same file as trace_view.json (a hard link)
        assert (handler_output / trace).samefile(run / "PROFILER_OUTPUT" / "trace_view.json")


def test_tensorboard_profiler_plugin_loads_the_trace_handler_output(handler_output: Path) -> None:
    """torch-tb-profiler's own loading path, as `tensorboard --logdir` runs it
    (RunLoader: file discovery, parsing, the views' data), without a browser."""
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler import consts
    from torch_tb_profiler.io import Cache
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.loader import RunLoader
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    # First the parse in this process, so that an error surfaces as itself
    # (the loader's worker processes log it and drop the profile).
    trace = next(handler_output.glob("*.pt.trace.json"))
    data = RunProfileData.parse("worker0", None, str(trace), str(handler_output))
    profile = RunGenerator("worker0", None, data).generate_run_profile()
    assert consts.OVERALL_VIEW in profile.views and consts.OP_VIEW in profile.views
    assert consts.TRACE_VIEW in profile.views
    op_names = {row["name"] for row in profile.operation_table_by_name["data"]}
    assert {"aten::conv2d", "aten::addmm"} <= op_names
    steps = profile.overview["steps"]["rows"]
    assert len(steps) >= 2  # ProfilerStep#N found
    assert profile.module_stats is None or isinstance(profile.module_stats, list)

    cache = Cache()
    run = RunLoader("log", str(handler_output), cache).load()
    profiles = run.get_profiles()
    assert len(profiles) == 2, "the plugin sees both cycles (spans)"
    assert run.workers == ["worker0"]
    assert run.get_workers(consts.OVERALL_VIEW.display_name) == ["worker0"]
    assert len(run.get_spans("worker0")) == 2


def hta_temporal_breakdown(trace_dir: Path) -> object:
    """HTA's temporal breakdown of ``trace_dir``, or the exception it raised."""
    from hta.trace_analysis import TraceAnalysis

    try:
        return TraceAnalysis(trace_dir=str(trace_dir)).get_temporal_breakdown(visualize=False)
    except Exception as e:  # noqa: BLE001  (compared with the peer's own trace below)
        return e


def test_hta_trace_analysis_loads_the_trace_handler_output(handler_output: Path, trainer: Trainer) -> None:
    """HTA's TraceAnalysis on the handler's directory: rank, operators and
    steps parse. Its temporal breakdown measures GPU kernels (idle / compute /
    non-compute time of the device): on a CPU-only trace it fails the same way
    on torch.profiler's own trace of the same training, so ours must behave
    as that one does (its kernel breakdown likewise needs device events)."""
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=str(handler_output))
    trace = analyzer.t
    assert list(trace.traces.keys()) == [0]  # rank 0 (distributedInfo)
    df = trace.get_trace(0)
    symbols = trace.symbol_table.get_sym_table()
    names = {symbols[i] for i in df["name"].unique()}
    assert {"aten::conv2d", "aten::addmm"} <= names
    assert any(n.startswith("ProfilerStep#") for n in names)

    ours = hta_temporal_breakdown(handler_output)
    peer_dir = handler_output.parent / "kineto"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(peer_dir))) as prof:
        trainer.run(3, prof.step)
    theirs = hta_temporal_breakdown(peer_dir)
    logging.getLogger(__name__).info("HTA temporal breakdown: trainprof %r, torch.profiler %r", ours, theirs)
    if isinstance(theirs, Exception):
        assert type(ours) is type(theirs), f"torch.profiler's trace: {theirs!r}; ours: {ours!r}"
    else:
        assert not isinstance(ours, Exception), f"HTA failed on our trace only: {ours!r}"
