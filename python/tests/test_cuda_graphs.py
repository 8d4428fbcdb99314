"""CUDA graphs on a device: a graph captured from a model while a profile
records, then replayed; every kernel of every replay is a row of its own in
kernel_details.csv (never one row per graph launch), under the same names as
the model's eager kernels, with its graph, its node and the operator that
captured it."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_dirs, torch

import trainprof
from trainprof import ProfilerActivity, tensorboard_trace_handler

REPLAYS = 4


@pytest.mark.device
def test_each_replayed_kernel_is_listed_with_the_operator_that_captured_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    static_x = torch.randn(32, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream before capture, as torch asks
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    out = tmp_path / "out"
    with trainprof.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                           on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        model(static_x)  # eagerly, once: the kernels the graph must show by name
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(static_x)
        for _ in range(REPLAYS):
            graph.replay()
            prof.step()
        torch.cuda.synchronize()
    [run] = run_dirs(out)
    with open(run / "PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    from_graph = [r for r in rows if r["Graph Node Id"]]
    eager = [r for r in rows if not r["Graph Node Id"] and r["Launch API"] != "cudaGraphLaunch"]
    assert from_graph, "no kernel carries a graph node id"
    assert {r["Launch API"] for r in from_graph} == {"cudaGraphLaunch"}
    per_node = Counter(r["Graph Node Id"] for r in from_graph)
    assert set(per_node.values()) == {REPLAYS}, per_node  # each node once per replay
    assert {r["Name"] for r in from_graph} == {r["Name"] for r in eager}
    captured = {r["Capture Operator"] for r in from_graph}
    assert all(captured) and all(c.startswith("aten::") for c in captured), captured
