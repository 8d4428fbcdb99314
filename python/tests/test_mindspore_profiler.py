"""trainprof.Profiler: MindSpore's Profiler class, driven by the Python
examples of MindSpore's own documents with the model, the dataset and
``mindspore.train.Model`` replaced by PyTorch ones and ``mindspore`` by
``trainprof``; and each case where MindSpore logs instead of raising."""

from __future__ import annotations

import csv
import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
from conftest import names, op_statistic, run_dirs, torch, trace_events

import trainprof as ms  # the examples' `import mindspore as ms`
from trainprof import AicoreMetrics, Profiler, ProfilerActivity, ProfilerLevel

# ---- PyTorch stand-ins for the examples' MindSpore parts ----


class Net(torch.nn.Module):
    """The examples' ``nn.Cell`` with ``nn.Dense(2, 2)``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x: Any) -> Any:
        return self.fc(x)


def generator(n: int = 2) -> Any:
    """The examples' generator: ones as data, ones as labels."""
    for _ in range(n):
        yield torch.ones([2, 2]), torch.ones([2], dtype=torch.long)


class RunContext:
    """mindspore.train.RunContext: ``original_args()`` is the callbacks' cb_params."""

    def __init__(self, cb_params: SimpleNamespace) -> None:
        self._cb_params = cb_params

    def original_args(self) -> SimpleNamespace:
        return self._cb_params


class Callback:
    """mindspore.train.Callback: every hook does nothing; the on_train_*
    hooks call the older names, as MindSpore's do."""

    def begin(self, run_context: RunContext) -> None: ...
    def epoch_begin(self, run_context: RunContext) -> None: ...
    def epoch_end(self, run_context: RunContext) -> None: ...
    def step_begin(self, run_context: RunContext) -> None: ...
    def step_end(self, run_context: RunContext) -> None: ...
    def end(self, run_context: RunContext) -> None: ...

    def on_train_begin(self, run_context: RunContext) -> None:
        self.begin(run_context)

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        self.epoch_begin(run_context)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        self.epoch_end(run_context)

    def on_train_step_begin(self, run_context: RunContext) -> None:
        self.step_begin(run_context)

    def on_train_step_end(self, run_context: RunContext) -> None:
        self.step_end(run_context)

    def on_train_end(self, run_context: RunContext) -> None:
        self.end(run_context)


class Model:
    """mindspore.train.Model(net, loss_fn, optimizer).train(epoch, dataset,
    callbacks): steps and epochs counted from 1, callbacks called around them."""

    def __init__(self, net: Any, loss_fn: Any, optimizer: Any) -> None:
        self.net, self.loss_fn, self.optimizer = net, loss_fn, optimizer

    def train(self, epoch: int, dataset: Any, callbacks: Optional[list] = None) -> None:
        callbacks = callbacks or []
        cb_params = SimpleNamespace(cur_epoch_num=0, cur_step_num=0)
        context = RunContext(cb_params)

        def call(hook: str) -> None:  # the hooks a callback has (MindSpore's base class has all)
            for cb in callbacks:
                method = getattr(cb, hook, None)
                if method is not None:
                    method(context)

        call("on_train_begin")
        for e in range(1, epoch + 1):
            cb_params.cur_epoch_num = e
            call("on_train_epoch_begin")
            for data, label in dataset():
                cb_params.cur_step_num += 1
                call("on_train_step_begin")
                loss = self.loss_fn(self.net(data), label)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                call("on_train_step_end")
            call("on_train_epoch_end")
        call("on_train_end")


def train(net: Net, steps: int = 2, epochs: int = 1, callbacks: Optional[list] = None) -> None:
    """The examples' ``train(net)``: Momentum, sparse softmax cross-entropy,
    ``model.train(1, data)``."""
    optimizer = torch.optim.SGD(net.parameters(), lr=1, momentum=0.9)
    loss = torch.nn.CrossEntropyLoss()
    model = Model(net, loss, optimizer)
    model.train(epochs, lambda: generator(steps), callbacks=callbacks)


# ---- readers ----


def the_run(root: Path) -> Path:
    [run] = run_dirs(root)
    return run


def steps_of(run: Path) -> list[int]:
    with open(run / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return [int(row["Step"]) for row in csv.DictReader(f)]


def assert_analysed(run: Path, raw_kept: bool = False) -> None:
    """The outputs the documents list, trainprof's names: the timeline, the
    operator table with the net's operators, the step table, profiler_info."""
    output = run / "PROFILER_OUTPUT"
    for name in ("trace_view.json", "op_statistic.csv", "step_trace_time.csv", "profiler_info.json"):
        assert (output / name).is_file(), name
    assert "aten::linear" in op_statistic(run)
    assert (run / "profiler_info.json").is_file()
    assert (run / "raw").is_dir() == raw_kept  # data_simplification, True by default


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trainprof" and r.levelno == level]


# ---- the examples ----


def test_the_class_example_records_and_analyses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The class docstring's example (MindSpore 2.4): Profiler(...), train, analyse()."""
    profiler = Profiler(profiler_level=ProfilerLevel.Level0,
                        activities=[ProfilerActivity.CPU, ProfilerActivity.NPU],
                        aicore_metrics=AicoreMetrics.AiCoreNone)
    net = Net()
    train(net)
    report = profiler.analyse()
    assert report is not None and report.ok
    run = the_run(tmp_path / "data")  # output_path's default
    assert_analysed(run)
    npu = [m for m in messages(caplog, logging.WARNING) if "ProfilerActivity.NPU" in m]
    expected = "GPU is recorded" if torch.cuda.is_available() else "the host is recorded"
    assert len(npu) == 1 and expected in npu[0]
    assert not [m for m in messages(caplog, logging.WARNING) if "aicore_metrics" in m]  # the default: silent


def test_the_first_version_example_records_and_analyses(tmp_path: Path) -> None:
    """The older class docstring's example: Profiler(), train, analyse()."""
    profiler = Profiler()
    train(Net(), steps=4)
    profiler.analyse()
    run = the_run(tmp_path / "data")
    assert_analysed(run)
    # Recording began before the first step: step 1 is the start-up; 2 to 4 are steps.
    assert steps_of(run) == [2, 3, 4]


class StopAtStep(Callback):
    """The start() and analyse() examples' callback."""

    def __init__(self, start_step: int, stop_step: int, step_list: Optional[list] = None) -> None:
        super(StopAtStep, self).__init__()
        self.start_step = start_step
        self.stop_step = stop_step
        self.step_list = step_list
        self.profiler = Profiler(start_profile=False)

    def step_begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        step_num = cb_params.cur_step_num
        if step_num == self.start_step:
            self.profiler.start()

    def step_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        step_num = cb_params.cur_step_num
        if step_num == self.stop_step:
            self.profiler.stop()

    def end(self, run_context: RunContext) -> None:
        if self.step_list is None:
            self.profiler.analyse()
        else:
            self.profiler.analyse(step_list=self.step_list, mode="sync")


def test_the_start_example_records_the_steps_between_its_callbacks(tmp_path: Path) -> None:
    train(Net(), steps=8, callbacks=[StopAtStep(start_step=3, stop_step=5)])
    run = the_run(tmp_path / "data")
    assert_analysed(run)
    assert steps_of(run) == [3, 4, 5]  # MindSpore's cur_step_num: whole steps, none of start-up
    steps = [n for n in names(trace_events(run), "user_annotation") if n.startswith("ProfilerStep#")]
    assert steps[:3] == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]


def test_the_analyse_example_keeps_its_step_list(tmp_path: Path) -> None:
    train(Net(), steps=8, callbacks=[StopAtStep(start_step=1, stop_step=5, step_list=[2, 3, 4])])
    run = the_run(tmp_path / "data")
    assert_analysed(run)
    assert steps_of(run) == [2, 3, 4]


def test_the_stop_example_records_its_epochs(tmp_path: Path) -> None:
    class StopAtEpoch(Callback):
        def __init__(self, start_epoch: int, stop_epoch: int) -> None:
            super(StopAtEpoch, self).__init__()
            self.start_epoch = start_epoch
            self.stop_epoch = stop_epoch
            self.profiler = Profiler(start_profile=False)

        def epoch_begin(self, run_context: RunContext) -> None:
            cb_params = run_context.original_args()
            epoch_num = cb_params.cur_epoch_num
            if epoch_num == self.start_epoch:
                self.profiler.start()

        def epoch_end(self, run_context: RunContext) -> None:
            cb_params = run_context.original_args()
            epoch_num = cb_params.cur_epoch_num
            if epoch_num == self.stop_epoch:
                self.profiler.stop()

        def end(self, run_context: RunContext) -> None:
            self.profiler.analyse()

    train(Net(), steps=3, epochs=4, callbacks=[StopAtEpoch(start_epoch=2, stop_epoch=3)])
    run = the_run(tmp_path / "data")
    assert_analysed(run)
    assert steps_of(run) == [4, 5, 6, 7, 8, 9]  # epochs 2 and 3, three steps each


def test_the_custom_training_example_records_steps_of_its_loop(tmp_path: Path) -> None:
    """The guide's custom training loop: start after step i == 2, stop after i == 5."""
    profiler = ms.Profiler(start_profile=False)
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for i, (data, label) in enumerate(generator(9)):
        loss = torch.nn.functional.cross_entropy(net(data), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i == 2:
            profiler.start()
        if i == 5:
            profiler.stop()
    profiler.analyse()
    run = the_run(tmp_path / "data")
    assert_analysed(run)
    assert steps_of(run) == [4, 5, 6]  # the loop's i = 3, 4, 5


def get_real_rank() -> int:
    """The guide's: the rank, from RANK_ID when not distributed."""
    return int(os.getenv("RANK_ID", "0"))


def test_the_rank_callback_example_writes_under_its_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guide's StopAtStep for data non-sink mode: output_path per rank,
    stop and analyse inside step_end."""

    class StopAtStepPerRank(Callback):
        def __init__(self, start_step: int, stop_step: int) -> None:
            super(StopAtStepPerRank, self).__init__()
            self.start_step = start_step
            self.stop_step = stop_step
            rank_id = get_real_rank()
            output_path = os.path.join("profiler_data", f"rank_{rank_id}")
            self.profiler = ms.Profiler(start_profile=False, output_path=output_path)

        def on_train_step_begin(self, run_context: RunContext) -> None:
            cb_params = run_context.original_args()
            step_num = cb_params.cur_step_num
            if step_num == self.start_step:
                self.profiler.start()

        def on_train_step_end(self, run_context: RunContext) -> None:
            cb_params = run_context.original_args()
            step_num = cb_params.cur_step_num
            if step_num == self.stop_step:
                self.profiler.stop()
                self.profiler.analyse()

    monkeypatch.setenv("RANK_ID", "3")
    train(Net(), steps=6, callbacks=[StopAtStepPerRank(2, 4)])
    run = the_run(tmp_path / "profiler_data" / "rank_3")
    assert_analysed(run)
    assert steps_of(run) == [2, 3, 4]


def test_the_functional_example_profiles_every_epoch(tmp_path: Path) -> None:
    """The guide's unconditional example 1: a functional loop over epochs."""
    profiler = ms.Profiler(output_path="profiler_data")
    model = Net()
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def forward_fn(data: Any, label: Any) -> Any:
        logits = model(data)
        loss = loss_fn(logits, label)
        return loss, logits

    def train_step(data: Any, label: Any) -> Any:
        (loss, _) = forward_fn(data, label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    def train_loop() -> None:
        for data, label in generator(3):
            train_step(data, label)

    for t in range(2):
        train_loop()
    profiler.analyse()
    run = the_run(tmp_path / "profiler_data")
    assert_analysed(run)
    assert steps_of(run) == [2, 3, 4, 5, 6]


def test_the_dynamic_monitor_example_records_the_configured_steps(tmp_path: Path) -> None:
    """The guide's DynamicProfilerMonitor, a callback of model.train, after
    profiler_config.json was edited to record steps 3 to 5."""
    (tmp_path / "dyn_cfg").mkdir()
    (tmp_path / "dyn_cfg" / "profiler_config.json").write_text(json.dumps(
        {"start_step": 3, "stop_step": 5, "aicore_metrics": -1, "profiler_level": -1, "profile_framework": -1,
         "analyse_mode": 0, "profile_communication": False, "parallel_strategy": True, "with_stack": True,
         "data_simplification": False}))
    profile_callback = ms.DynamicProfilerMonitor(cfg_path="./dyn_cfg", output_path="./dynprof_data")
    train(Net(), steps=8, callbacks=[profile_callback])
    run = the_run(tmp_path / "dynprof_data")
    assert run.name.startswith("rank0_start3_stop5_")
    assert steps_of(run) == [3, 4, 5]


CRASHING_SCRIPT = """
import sys, torch, trainprof as ms
net = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
profiler = ms.Profiler(output_path=sys.argv[1])
for step in range(6):
    loss = net(torch.ones(2, 2)).square().mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
raise RuntimeError("Error occur.")
profiler.stop()
"""


def test_offline_analyse_after_a_crash_of_one_and_of_several_ranks(tmp_path: Path) -> None:
    """The offline analysis guide: a script that fails before stop(), then
    Profiler.offline_analyse(path=...) with its documented arguments, on one
    card's output_path and on a directory of ranks' output_paths."""
    script = tmp_path / "train.py"
    script.write_text(CRASHING_SCRIPT)
    for out in ("single", "multi/rank_0", "multi/rank_1"):
        done = subprocess.run([sys.executable, str(script), str(tmp_path / out)], capture_output=True, text=True)
        assert done.returncode == 1 and "Error occur." in done.stderr
    report = Profiler.offline_analyse(path=str(tmp_path / "single"), pretty=False, step_list=None,
                                      data_simplification=True)
    assert report is not None and report.ok and len(report.runs) == 1
    run = the_run(tmp_path / "single")
    output = run / "PROFILER_OUTPUT"
    assert "aten::linear" in op_statistic(run) and (output / "trace_view.json").is_file()
    assert not (run / "raw").exists()  # data_simplification=True
    report = Profiler.offline_analyse(str(tmp_path / "multi"), pretty=True)
    assert report is not None and report.ok and len(report.runs) == 2
    for rank in (0, 1):
        run = the_run(tmp_path / "multi" / f"rank_{rank}")
        assert "aten::linear" in op_statistic(run) and (run / "raw").is_dir()  # offline's default: kept
        assert (run / "PROFILER_OUTPUT" / "profiler_info.json").read_text().startswith("{\n")  # pretty


def test_a_schedule_in_a_with_block_hands_each_cycle_to_on_trace_ready(tmp_path: Path) -> None:
    called = []
    with Profiler(schedule=ms.schedule(wait=1, warmup=1, active=2, repeat=1),
                  on_trace_ready=ms.tensorboard_trace_handler("./prof")) as prof:
        for data, label in generator(6):
            Net()(data).sum().backward()
            prof.step()
    run = the_run(tmp_path / "prof")
    steps = [n for n in names(trace_events(run), "user_annotation") if n.startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    # MindSpore calls on_trace_ready with no argument, torch.profiler with the profiler.
    no_argument = Profiler(schedule=ms.schedule(wait=0, active=1, repeat=1), output_path="./a",
                           on_trace_ready=lambda: called.append("none"))
    no_argument.step()
    no_argument.stop()
    with_profiler = Profiler(schedule=ms.schedule(wait=0, active=1, repeat=1), output_path="./b",
                             on_trace_ready=lambda p: called.append(p))
    with_profiler.step()
    with_profiler.stop()
    assert called == ["none", with_profiler]
    # MindSpore's tensor_board_trace_handler, given uncalled: each cycle analysed under output_path.
    with Profiler(schedule=ms.schedule(wait=0, active=2, repeat=1), output_path="./c",
                  on_trace_ready=ms.tensor_board_trace_handler) as prof:
        for data, label in generator(3):
            Net()(data).sum().backward()
            prof.step()
    assert (the_run(tmp_path / "c") / "PROFILER_OUTPUT" / "trace_view.json").is_file()


def test_metadata_goes_to_the_run_directory(tmp_path: Path) -> None:
    profiler = Profiler(output_path="./meta")
    profiler.add_metadata("distributed_args", "world_size=1")
    profiler.add_metadata_json("model", json.dumps({"layers": 1}))
    train(Net())
    profiler.stop()
    metadata = json.loads((the_run(tmp_path / "meta") / "profiler_metadata.json").read_text())
    assert metadata["distributed_args"] == "world_size=1" and metadata["model"] == {"layers": 1}


def test_analyse_async_analyses_in_a_child_process(tmp_path: Path) -> None:
    profiler = Profiler()
    train(Net(), steps=3)
    profiler.analyse(mode="async")
    profiler._prof._wait_for_analyses()  # the child the user need not wait for
    assert_analysed(the_run(tmp_path / "data"))


# ---- where MindSpore logs instead of raising ----


def test_starting_twice_warns_and_keeps_recording(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler()
    profiler.start()
    assert any("already started" in m for m in messages(caplog, logging.WARNING))
    train(Net())
    profiler.stop()
    assert (the_run(tmp_path / "data") / "raw").is_dir()


def test_stopping_when_stopped_logs_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler(start_profile=False)
    profiler.stop()
    assert any("has not started" in m for m in messages(caplog, logging.ERROR))
    profiler.start()
    profiler.stop()
    profiler.stop()
    assert sum("has not started" in m for m in messages(caplog, logging.ERROR)) == 2
    assert len(run_dirs(tmp_path / "data")) == 1


def test_step_without_a_schedule_logs_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler()
    profiler.step()
    assert any("no schedule" in m for m in messages(caplog, logging.ERROR))
    train(Net(), steps=3)
    assert profiler.step_num == 3  # the optimizer's steps still count
    profiler.stop()


def test_step_while_stopped_logs_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler(start_profile=False, schedule=ms.schedule(wait=0, active=2))
    profiler.step()
    assert any("is stopped" in m for m in messages(caplog, logging.ERROR))
    assert profiler.step_num == 0


def test_stop_with_a_schedule_before_any_step_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler(schedule=ms.schedule(wait=0, active=2, repeat=1))
    profiler.stop()
    assert any("call step()" in m for m in messages(caplog, logging.WARNING))
    profiler.step()
    profiler.stop()  # after a step, stop() stops
    assert len(run_dirs(tmp_path / "data")) == 1
    assert profiler.analyse() is None  # a schedule's cycles are on_trace_ready's
    assert any("on_trace_ready" in m for m in messages(caplog, logging.WARNING))


def test_ascend_only_settings_each_say_once_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from trainprof import _mindspore_profiler
    _mindspore_profiler._said.clear()
    settings = dict(aicore_metrics=AicoreMetrics.PipeUtilization, l2_cache=True, hbm_ddr=True, pcie=True,
                    parallel_strategy=True, timeline_limit=500)
    for _ in range(2):
        Profiler(start_profile=False, **settings)
    said = messages(caplog, logging.WARNING)
    for name in ("aicore_metrics", "l2_cache", "hbm_ddr", "pcie", "parallel_strategy"):
        lines = [m for m in said if m.startswith(f"Profiler: {name} ")]
        assert len(lines) == 1 and "no effect here" in lines[0] and "\n" not in lines[0], name
    assert sum("'timeline_limit' is not a parameter" in m for m in said) == 1


def test_a_wrong_analyse_argument_is_logged_and_the_run_kept(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    profiler = Profiler()
    train(Net())
    assert profiler.analyse(mode="fast") is None
    assert profiler.analyse(step_list=[3, 1]) is None
    errors = messages(caplog, logging.ERROR)
    assert any("mode must be 'sync' or 'async'" in e for e in errors)
    assert any("step_list must be consecutive" in e for e in errors)
    run = the_run(tmp_path / "data")
    assert (run / "raw").is_dir() and not (run / "PROFILER_OUTPUT").exists()
    assert Profiler.offline_analyse(tmp_path / "nowhere") is None
    assert any("nowhere" in e for e in messages(caplog, logging.ERROR))
    assert Profiler.offline_analyse(tmp_path / "data").ok


def test_the_signature_is_mindspores() -> None:
    parameters = inspect.signature(Profiler).parameters
    defaults = {name: p.default for name, p in parameters.items()}
    assert defaults["start_profile"] is True and defaults["output_path"] == "./data"
    assert defaults["profiler_level"] is ProfilerLevel.Level0 and defaults["data_simplification"] is None
    assert defaults["sync_enable"] is True
    for name in ("activities", "schedule", "on_trace_ready", "profile_memory", "with_stack", "record_shapes",
                 "data_process", "host_sys", "mstx", "export_type", "aicore_metrics", "l2_cache", "hbm_ddr",
                 "pcie", "parallel_strategy"):
        assert name in parameters, name
    assert list(inspect.signature(Profiler.analyse).parameters) == ["self", "offline_path", "pretty", "step_list",
                                                                     "mode"]
    assert list(inspect.signature(Profiler.offline_analyse).parameters) == ["path", "pretty", "step_list",
                                                                            "data_simplification"]
    # Typed throughout (the package ships py.typed): every parameter and result annotated.
    for method in (Profiler.__init__, Profiler.start, Profiler.stop, Profiler.step, Profiler.analyse,
                   Profiler.offline_analyse, Profiler.add_metadata, Profiler.add_metadata_json):
        signature = inspect.signature(method)
        assert signature.return_annotation is not inspect.Signature.empty, method
        for name, p in signature.parameters.items():
            assert name in ("self", "cls") or p.annotation is not inspect.Parameter.empty, (method, name)
    with pytest.raises(TypeError, match="start_profile"):
        Profiler(start_profile="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="aicore_metrics"):
        Profiler(aicore_metrics=1)  # type: ignore[arg-type]


def test_npu_in_torchs_profile_and_the_defaults_of_several_ranks(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """mindspore.profiler.profile's default activities, [CPU, NPU], work in
    trainprof.profile; a rank of several records communication, as
    MindSpore does at Level0, and keeps its raw data for the cluster
    analysis, unless told otherwise."""
    with ms.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.NPU],
                    on_trace_ready=ms.tensorboard_trace_handler("./npu")):
        train(Net())
    assert "aten::linear" in op_statistic(the_run(tmp_path / "npu"))

    def recorded_options(out: str, **kwargs: Any) -> dict:
        profiler = Profiler(output_path=out, **kwargs)
        profiler.stop()
        return json.loads((the_run(tmp_path / out) / "profiler_info.json").read_text())["options"]

    one = recorded_options("one")
    assert one["profile_communication"] is False and one["data_simplification"] is True  # MindSpore's
    monkeypatch.setenv("WORLD_SIZE", "2")
    two = recorded_options("two")
    assert two["profile_communication"] is True
    assert two["data_simplification"] is False  # kept for `trainprof cluster`
    off = recorded_options("off", profile_communication=False, data_simplification=True)
    assert off["profile_communication"] is False and off["data_simplification"] is True
