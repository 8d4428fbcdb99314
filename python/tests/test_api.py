"""The API's names, defaults and argument checks (no training needed)."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trainprof
from trainprof import ProfilerAction, ProfilerActivity, ProfilerLevel, _ExperimentalConfig, schedule

REPO = Path(__file__).resolve().parents[2]


def test_version_is_cmake_project_version() -> None:
    cmake = (REPO / "CMakeLists.txt").read_text()
    assert trainprof.__version__ == re.search(r"project\(trainprof VERSION ([0-9.]+)", cmake).group(1)
    from importlib.metadata import version
    assert version("trainprof") == trainprof.__version__


def test_public_names_take_torch_profilers_arguments_in_its_order() -> None:
    """Code written for torch.profiler runs unchanged: its callables' leading
    parameters, positional as well as by name, are ours in the same order."""
    tp = pytest.importorskip("torch.profiler")

    def params(f: object) -> list[str]:
        return [p for p in inspect.signature(f).parameters if p != "self"]  # type: ignore[arg-type]

    for ours, theirs, leading in ((trainprof.profile.__init__, tp.profile.__init__, 8),
                                  (trainprof.schedule, tp.schedule, 5),
                                  (trainprof.tensorboard_trace_handler, tp.tensorboard_trace_handler, 2),
                                  (trainprof.record_function.__init__, tp.record_function.__init__, 2)):
        assert params(ours)[:leading] == params(theirs)[:leading], (ours, params(ours), params(theirs))
    assert {a.name for a in ProfilerAction} <= {a.name for a in tp.ProfilerAction}
    for name in ("CPU", "CUDA"):
        assert hasattr(ProfilerActivity, name) and hasattr(tp.ProfilerActivity, name)
    assert ProfilerActivity.CUDA is ProfilerActivity.GPU  # torch's name for the same activity
    for name in ("mark", "range_start", "range_end"):
        assert callable(getattr(trainprof.mstx, name))


def test_the_python_api_takes_the_options_of_the_option_table() -> None:
    """The C++ option table (`trainprof options`) says where the Python API
    takes each option: that parameter exists, the binding has the attribute
    it sets (and the stubs list it), a number's range is the table's, and a
    choice's values are the table's."""
    from trainprof import _trainprof

    stubs = (Path(trainprof.__file__).parent / "_trainprof.pyi").read_text()
    stub_options = stubs[stubs.index("class ProfilerOptions:"):stubs.index("def parse_options_json")]
    surfaces = {"profile": trainprof.profile.__init__, "_ExperimentalConfig": _ExperimentalConfig.__init__}
    rows = _trainprof.option_list()
    assert [r.name for r in rows][:3] == ["output_path", "start_profile", "activities"]
    taken = 0
    for row in rows:
        if not row.python:
            continue
        taken += 1
        surface, param = re.fullmatch(r"(\w+)\((\w+)\)", row.python).groups()
        assert param in inspect.signature(surfaces[surface]).parameters, row.python
        for field in row.fields.split(", "):
            assert hasattr(_trainprof.ProfilerOptions(), field), (row.name, field)
            assert re.search(rf"^    {field}: ", stub_options, re.M), (row.name, field)
        if row.type == "uint" and surface == "_ExperimentalConfig":
            low, high = (int(x) for x in re.fullmatch(r"\[(\d+), (\d+)\]", row.range).groups())
            for good in (low, high):
                _ExperimentalConfig(**{param: good})
            for bad in (low - 1, high + 1):
                with pytest.raises(ValueError, match=param):
                    _ExperimentalConfig(**{param: bad})
    assert taken >= 15
    level = next(r for r in rows if r.name == "profiler_level")
    assert {lv.value.replace("LevelNone", "None") for lv in ProfilerLevel} == set(level.range.split("|"))
    export = next(r for r in rows if r.name == "export_type")
    assert {e.value for e in trainprof.ExportType} == set(export.range.split("|"))


def test_every_public_callable_has_a_docstring() -> None:
    objects = [getattr(trainprof, n) for n in trainprof.__all__] + [trainprof.mstx.mark, trainprof.mstx.range_start,
                                                                    trainprof.mstx.range_end]
    for cls in (trainprof.profile, trainprof.record_function):
        objects += [getattr(cls, m) for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))]
    missing = [getattr(o, "__name__", repr(o)) for o in objects if not (getattr(o, "__doc__", None) or "").strip()]
    assert missing == []


def test_package_ships_type_information() -> None:
    package = Path(trainprof.__file__).parent
    assert (package / "py.typed").exists()
    assert (package / "_trainprof.pyi").exists()


def test_schedule_follows_torch_semantics() -> None:
    s = schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1)
    actions = [s(step) for step in range(7)]
    assert actions == [ProfilerAction.NONE, ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                       ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE, ProfilerAction.NONE]
    assert "wait=1" in repr(s)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(wait=-1, active=1), ValueError, "schedule.wait must be >= 0"),
    (dict(wait=0, active=0), ValueError, "schedule.active must be >= 1"),
    (dict(wait=0, active=1, repeat=-2), ValueError, "schedule.repeat"),
    (dict(wait=0, active=1, skip_first=-1), ValueError, "schedule.skip_first"),
    (dict(wait=1.5, active=1), TypeError, "schedule.wait must be an int"),
    (dict(wait=0, active=True), TypeError, "schedule.active must be an int"),
    (dict(wait=0, warmup="1", active=1), TypeError, "schedule.warmup"),
])
def test_schedule_rejects_bad_values(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        schedule(**kwargs)


def test_schedule_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        schedule(1, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(activities=["CPU"]), ValueError, "activities: 'CPU' is not a ProfilerActivity"),
    (dict(activities=[]), ValueError, "activities must not be empty"),
    (dict(activities=ProfilerActivity.CPU), TypeError, "activities must be a list"),
    (dict(record_shapes=1), TypeError, "record_shapes must be a bool"),
    (dict(profile_memory="yes"), TypeError, "profile_memory must be a bool"),
    (dict(with_stack=None), TypeError, "with_stack must be a bool"),
    (dict(with_flops=0), TypeError, "with_flops must be a bool"),
    (dict(with_modules=1), TypeError, "with_modules must be a bool"),
    (dict(data_process=[]), TypeError, "data_process must be a bool"),
    (dict(start_profile="False"), TypeError, "start_profile must be a bool"),
    (dict(schedule=lambda step: None), TypeError, "schedule must be a trainprof.schedule"),
    (dict(on_trace_ready="./prof"), TypeError, "on_trace_ready must be callable"),
    (dict(experimental_config={}), TypeError, "experimental_config must be a trainprof._ExperimentalConfig"),
])
def test_profile_rejects_bad_settings(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        trainprof.profile(**{"start_profile": False, **kwargs})


def test_profile_takes_torch_profiler_activities() -> None:
    import torch
    prof = trainprof.profile(activities=[torch.profiler.ProfilerActivity.CPU], start_profile=False)
    assert prof.current_action is ProfilerAction.NONE


def test_profile_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        trainprof.profile([ProfilerActivity.CPU])  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(dir_name=3), TypeError, "dir_name must be a str"),
    (dict(dir_name=""), ValueError, "dir_name must not be empty"),
    (dict(worker_name=7), TypeError, "worker_name must be a str"),
    (dict(analyse_flag="yes"), TypeError, "analyse_flag must be a bool"),
    (dict(async_mode=None), TypeError, "async_mode must be a bool"),
])
def test_trace_handler_rejects_bad_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        trainprof.tensorboard_trace_handler(**kwargs)


def test_trace_handler_worker_name_must_be_a_file_name(tmp_path: Path) -> None:
    handler = trainprof.tensorboard_trace_handler(tmp_path, worker_name="../escape")
    with pytest.raises(ValueError, match="worker_name"):
        trainprof.profile(on_trace_ready=handler, start_profile=False)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(profiler_level=1), TypeError, "profiler_level must be a trainprof.ProfilerLevel or its name"),
    (dict(profiler_level="Level9"), ValueError, "profiler_level: unknown level 'Level9' (known: 'LevelNone'"),
    (dict(mstx=1), TypeError, "mstx must be a bool"),
    (dict(mstx_domain_include="comm"), TypeError, "mstx_domain_include must be a list of str"),
    (dict(mstx_domain_exclude=[""]), ValueError, "mstx_domain_exclude[0] must not be empty"),
    (dict(mstx_domain_include=["a"], mstx_domain_exclude=["b"]), ValueError, "not both"),
    (dict(data_simplification="no"), TypeError, "data_simplification must be a bool"),
    (dict(export_type=[]), ValueError, "at least one format"),
    (dict(export_type=["csv"]), ValueError, "unknown format 'csv'"),
    (dict(export_type="text"), TypeError, "export_type must be a list"),
])
def test_experimental_config_rejects_bad_values(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        _ExperimentalConfig(**kwargs)


def test_experimental_config_takes_mindspore_values() -> None:
    config = _ExperimentalConfig(profiler_level=ProfilerLevel.Level1, mstx=True, mstx_domain_include=["comm"],
                                 export_type=[trainprof.ExportType.Text])
    assert config.profiler_level is ProfilerLevel.Level1
    assert config.mstx_domain_include == ["comm"]
    # The Options table writes levels by name, as host_sys and export_type take theirs.
    assert _ExperimentalConfig(profiler_level="Level2", export_type=["db"]).profiler_level is ProfilerLevel.Level2


def test_a_keyword_of_another_profiler_says_where_it_lives_here() -> None:
    with pytest.raises(TypeError, match=re.escape("'output_path': the output directory is tensorboard_trace_handler's")):
        trainprof.profile(output_path="./prof")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=re.escape("'record_shape' (did you mean record_shapes?)")):
        trainprof.profile(record_shape=True)  # type: ignore[call-arg]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(profiler_path=5), TypeError, "profiler_path must be a str"),
    (dict(profiler_path="/nonexistent/trainprof"), ValueError, "does not exist"),
    (dict(max_process_number=0), ValueError, "max_process_number must be >= 1"),
    (dict(pretty="true"), TypeError, "pretty must be a bool"),
    (dict(step_list=[3, 5]), ValueError, "step_list must be consecutive"),
    (dict(step_list="3-5"), TypeError, "step_list must be a list of int"),
    (dict(data_simplification=1), TypeError, "data_simplification must be a bool"),
])
def test_analyse_rejects_bad_arguments(tmp_path: Path, kwargs: dict, error: type, message: str) -> None:
    kwargs.setdefault("profiler_path", str(tmp_path))
    with pytest.raises(error, match=re.escape(message)):
        trainprof.analyse(**kwargs)



def test_importing_trainprof_offers_nccl_its_profiler_plugin_unless_one_is_set() -> None:
    """NCCL reads NCCL_PROFILER_PLUGIN when it makes its first communicator:
    the package names its libtrainprof.so, whose ncclProfiler_v4 NCCL loads;
    a value the user set is left alone."""
    show = ("import ctypes, os, trainprof; path = os.environ.get('NCCL_PROFILER_PLUGIN'); print(path); "
            "print(bool(path) and os.path.isfile(path) and ctypes.CDLL(path).ncclProfiler_v4 is not None)")
    env = {k: v for k, v in os.environ.items() if k != "NCCL_PROFILER_PLUGIN"}
    offered = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, env=env, check=True)
    path, loadable = offered.stdout.split()
    assert path.endswith("/trainprof/libtrainprof.so") and loadable == "True", offered.stdout
    kept = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True,
                          env={**env, "NCCL_PROFILER_PLUGIN": "none"}, check=True)
    assert kept.stdout.split()[0] == "none"


def test_trainprof_log_level_takes_any_case_and_names_a_wrong_one() -> None:
    code = "import trainprof; trainprof.profile().stop()"  # the core logs an error: not started
    said = {}
    for level in ("DEBUG", "warn", "verbose"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TRAINPROF_LOG_LEVEL": level})
        assert done.returncode == 0, done.stderr
        said[level] = done.stderr
    assert "[trainprof] [ERROR]" in said["DEBUG"] and "is not a level" not in said["DEBUG"]
    assert "[trainprof] [INFO]" not in said["warn"] and "[trainprof] [ERROR]" in said["warn"]
    assert "TRAINPROF_LOG_LEVEL=verbose is not a level (error, warning, info, debug); info is used" in said["verbose"]
