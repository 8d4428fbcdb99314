"""trainprof against the tools PyTorch users already use: the same aten
operators as torch.profiler, and the trace handler's output read by the
TensorBoard profiler plugin (torch-tb-profiler) and HTA, under both its
names (HolisticTraceAnalysis 0.5, traceinsight)."""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

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


# HTA's checks, run in a child process: HTA (HolisticTraceAnalysis 0.5) and
# its successor traceinsight both install the module `hta`, so traceinsight
# lives in a directory of its own (scripts/python_env.sh) put first on the
# child's path. Prints what it found as JSON.
HTA_CHECK = """
import json, sys
from hta.trace_analysis import TraceAnalysis
from hta.version import __version_tuple__

ours, peer = sys.argv[1], sys.argv[2]

def breakdown(trace_dir):
    try:
        TraceAnalysis(trace_dir=trace_dir).get_temporal_breakdown(visualize=False)
        return "ok"
    except Exception as e:  # compared with the peer's own trace
        return type(e).__name__ + ": " + str(e)[:300]

trace = TraceAnalysis(trace_dir=ours).t
symbols = trace.symbol_table.get_sym_table()
names = sorted({symbols[i] for i in trace.get_trace(0)["name"].unique()})
print(json.dumps({"version": list(__version_tuple__), "ranks": list(trace.traces.keys()), "names": names,
                  "ours": breakdown(ours), "theirs": breakdown(peer)}))
"""


def traceinsight_dir() -> Optional[Path]:
    """Where scripts/python_env.sh installed traceinsight (None: not installed)."""
    path = Path(sys.prefix) / "traceinsight"
    return path if (path / "hta" / "trace_analysis.py").exists() else None


@pytest.mark.parametrize("tool", ["HolisticTraceAnalysis", "traceinsight"])
def test_hta_trace_analysis_loads_the_trace_handler_output(handler_output: Path, trainer: Trainer,
                                                           tool: str) -> None:
    """HTA's TraceAnalysis, as HolisticTraceAnalysis 0.5 and as traceinsight
    (its name since 2026), on the handler's directory: rank, operators and
    steps parse. Its temporal breakdown measures GPU kernels (idle / compute /
    non-compute time of the device): on a CPU-only trace it fails the same way
    on torch.profiler's own trace of the same training, so ours must behave
    as that one does (its kernel breakdown likewise needs device events)."""
    env = dict(os.environ)
    if tool == "traceinsight":
        where = traceinsight_dir()
        if where is None:
            pytest.skip("traceinsight is not installed (scripts/python_env.sh installs it)")
        env["PYTHONPATH"] = os.pathsep.join([str(where)] + [p for p in sys.path if p])
    else:
        pytest.importorskip("hta")
    peer_dir = handler_output.parent / "kineto"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(peer_dir))) as prof:
        trainer.run(3, prof.step)
    child = subprocess.run([sys.executable, "-c", HTA_CHECK, str(handler_output), str(peer_dir)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.splitlines()[-1])
    assert found["version"][:2] == ([0, 6] if tool == "traceinsight" else [0, 5]), found["version"]
    assert found["ranks"] == [0]  # rank 0 (distributedInfo)
    assert {"aten::conv2d", "aten::addmm"} <= set(found["names"])
    assert any(n.startswith("ProfilerStep#") for n in found["names"])
    ours, theirs = found["ours"], found["theirs"]
    logging.getLogger(__name__).info("%s temporal breakdown: trainprof %r, torch.profiler %r", tool, ours, theirs)
    if theirs != "ok":
        assert ours.split(":")[0] == theirs.split(":")[0], f"torch.profiler's trace: {theirs}; ours: {ours}"
    else:
        assert ours == "ok", f"{tool} failed on our trace only: {ours}"
