"""with_stack: Python call stacks; with_modules: the nn.Module hierarchy;
both on operators in the timeline and in operator_details.csv."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import Trainer, run_dirs, torch, trace_events

import trainprof
from trainprof import tensorboard_trace_handler


def profile_two_steps(trainer: Trainer, **settings: bool) -> Path:
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler("ctx"), **settings):
        trainer.run(2)
    (run,) = run_dirs(Path("ctx"))
    return run


def operator_details(run: Path) -> list[dict]:
    with open(run / "PROFILER_OUTPUT" / "operator_details.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_with_stack_gives_python_frames_as_torch_profiler_writes_them(trainer: Trainer) -> None:
    run = profile_two_steps(trainer, with_stack=True)
    events = trace_events(run)
    conv = next(e for e in events if e.get("name") == "aten::conv2d")
    frames = conv["args"]["Call stack"].split(";")
    # innermost first: torch's Conv2d._conv_forward, forward, ..., Trainer.train_step in conftest.py, this test
    assert "torch/nn/modules/conv.py(" in frames[0] and any(f.endswith(": forward") for f in frames)
    assert any("conftest.py(" in f and f.endswith(": train_step") for f in frames)
    assert any(f.endswith(": test_with_stack_gives_python_frames_as_torch_profiler_writes_them") for f in frames)
    assert not any("trainprof/" in f for f in frames)
    # No shapes were asked for: the stack alone does not add them.
    assert "Input Dims" not in conv["args"]
    # Autograd's backward runs with the GIL released, on the calling thread: it
    # gets the stack of loss.backward().
    node = next(e for e in events if e.get("name") == "ConvolutionBackward0")
    assert any(f.endswith(": train_step") for f in node["args"]["Call stack"].split(";"))
    rows = [r for r in operator_details(run) if r["Name"] == "aten::conv2d"]
    assert rows and rows[0]["Call Stack"] == conv["args"]["Call stack"]


def test_with_stack_and_shapes_together(trainer: Trainer) -> None:
    run = profile_two_steps(trainer, with_stack=True, record_shapes=True)
    conv = next(e for e in trace_events(run) if e.get("name") == "aten::conv2d")
    assert conv["args"]["Input Dims"][0] == [32, 1, 28, 28]
    assert "conv.py(" in conv["args"]["Call stack"]


def test_with_modules_gives_the_module_hierarchy_of_forward_operators(trainer: Trainer) -> None:
    run = profile_two_steps(trainer, with_modules=True)
    events = trace_events(run)
    hierarchy = {e["name"]: e["args"].get("Module Hierarchy") for e in events
                 if e.get("cat") == "cpu_op" and e["name"] in ("aten::conv2d", "aten::relu", "aten::linear")}
    assert hierarchy == {"aten::conv2d": "TOP(Sequential)::0(Conv2d)", "aten::relu": "TOP(Sequential)::1(ReLU)",
                         "aten::linear": "TOP(Sequential)::4(Linear)"}
    loss = next(e for e in events if e.get("name") == "aten::cross_entropy_loss")
    assert "Module Hierarchy" not in loss.get("args", {})  # called outside any module
    rows = {r["Name"]: r["Module Hierarchy"] for r in operator_details(run) if r["Name"] == "aten::conv2d"}
    assert rows == {"aten::conv2d": "TOP(Sequential)::0(Conv2d)"}


def test_module_hooks_are_removed_at_stop(trainer: Trainer) -> None:
    from torch.nn.modules import module as torch_module

    before = (len(torch_module._global_forward_pre_hooks), len(torch_module._global_forward_hooks))
    prof = trainprof.profile(with_modules=True, start_profile=True)
    assert len(torch_module._global_forward_pre_hooks) == before[0] + 1
    trainer.run(1)
    prof.stop()
    assert (len(torch_module._global_forward_pre_hooks), len(torch_module._global_forward_hooks)) == before


def test_a_module_that_raises_leaves_the_hierarchy_consistent(trainer: Trainer) -> None:
    class Failing(torch.nn.Module):
        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            raise RuntimeError("bad batch")

    outer = torch.nn.Sequential(torch.nn.Linear(4, 4), Failing())
    with trainprof.profile(on_trace_ready=tensorboard_trace_handler("ctx"), with_modules=True):
        try:
            outer(torch.ones(2, 4))
        except RuntimeError:
            pass
        torch.ones(3).add_(1)  # outside every module again
    (run,) = run_dirs(Path("ctx"))
    add = next(e for e in trace_events(run) if e.get("name") == "aten::add_")
    assert "Module Hierarchy" not in add.get("args", {})


def test_with_stack_on_python_threads_running_operators_at_once(trainer: Trainer) -> None:
    """Each Python thread's operators get that thread's stack; threads that
    run operators at the same time (each taking the GIL back for its walk)
    neither deadlock nor mix stacks."""
    import threading

    def worker_loop() -> None:
        x = torch.ones(64)
        for _ in range(300):
            x.mul_(1.0001)

    with trainprof.profile(on_trace_ready=tensorboard_trace_handler("ctx"), with_stack=True):
        threads = [threading.Thread(target=worker_loop) for _ in range(3)]
        for t in threads:
            t.start()
        trainer.run(2)
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    (run,) = run_dirs(Path("ctx"))
    events = trace_events(run)
    muls = [e for e in events if e.get("name") == "aten::mul_"]
    assert len(muls) == 900
    assert all(e["args"]["Call stack"].split(";")[0].endswith(": worker_loop") for e in muls)
    conv = next(e for e in events if e.get("name") == "aten::conv2d")
    assert "worker_loop" not in conv["args"]["Call stack"]


def test_with_stack_from_trainprof_options_gives_python_stacks(tmp_path: Path) -> None:
    """A profile started by TRAINPROF_OPTIONS in a Python process records
    Python stacks too (the provider is enabled at ``import trainprof``)."""
    import json
    import os
    import subprocess
    import sys

    code = "import torch, trainprof\ndef work():\n    x = torch.ones(4)\n    x.mul_(2)\nwork()\n"
    env = dict(os.environ, TRAINPROF_OPTIONS=json.dumps({"start": True, "with_stack": True,
                                                         "output_path": str(tmp_path / "env")}))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120, capture_output=True)
    assert trainprof.analyse(str(tmp_path / "env")).ok
    (run,) = (tmp_path / "env").iterdir()
    mul = next(e for e in trace_events(run) if e.get("name") == "aten::mul_")
    assert mul["args"]["Call stack"] == "<string>(4): work;<string>(5): <module>"
