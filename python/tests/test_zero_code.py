"""Profiling an unmodified script: ``python -m trainprof run`` and
``TRAINPROF_OPTIONS``; steps come from optimizer.step()."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from conftest import names, op_statistic, run_dirs, trace_events

# A training script that knows nothing of trainprof.
TRAIN_SCRIPT = '''
import sys
import torch


def main():
    steps = int(sys.argv[sys.argv.index("--steps") + 1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 26 * 26, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = [(torch.rand(16, 1, 28, 28), torch.randint(0, 10, (16,))) for _ in range(steps)]
    if "--loader" in sys.argv:  # a DataLoader with 2 worker processes, batches of 16
        dataset = torch.utils.data.TensorDataset(torch.cat([x for x, _ in data]), torch.cat([y for _, y in data]))
        context = "spawn" if "--spawn" in sys.argv else None
        data = torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=2, multiprocessing_context=context)
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("trained", len(data))
    if "--fail" in sys.argv:
        raise ValueError("the script failed")
    if "--segv" in sys.argv:  # a crash in native code
        import ctypes
        ctypes.string_at(0)
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))


if __name__ == "__main__":  # spawned DataLoader workers import this file
    main()
'''

SCHEDULE = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}


def write_script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    return script


def run(args: list[str], env_options: Optional[str] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TRAINPROF_OPTIONS", None)
    if env_options is not None:
        env["TRAINPROF_OPTIONS"] = env_options
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def step_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return list(csv.DictReader(f))


def assert_one_cycle_of_three_steps(out: Path) -> None:
    """The schedule's one cycle: an analysed run with its 3 active steps and the aten operators."""
    runs = run_dirs(out)
    assert len(runs) == 1
    rows = step_rows(runs[0])
    assert len(rows) == 3
    assert [int(r["Step"]) for r in rows] == [2, 3, 4]  # after 1 wait and 1 warmup step
    events = trace_events(runs[0])
    steps = [n for n in names(events, "user_annotation") if n.startswith("ProfilerStep#")]
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert {"aten::conv2d", "aten::addmm"} <= set(op_statistic(runs[0]))


def test_run_profiles_an_unmodified_script_with_steps_from_the_optimizer(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    options = json.dumps({"output_path": str(tmp_path / "out"), "analyse": True, "schedule": SCHEDULE})
    result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "8"])
    assert result.returncode == 0, result.stderr
    assert "trained 8" in result.stdout  # the script's arguments reach it
    assert_one_cycle_of_three_steps(tmp_path / "out")
    assert "trainprof summary" in result.stderr  # where the outputs are


def test_run_without_options_records_the_whole_script_into_data(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    result = subprocess.run([sys.executable, "-m", "trainprof", "run", str(script), "--steps", "4"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"})
    assert result.returncode == 0, result.stderr
    runs = run_dirs(tmp_path / "data")
    assert len(runs) == 1
    rows = step_rows(runs[0])  # analysed: the default options say so
    # A step between each two optimizer.step() calls. Before the first: the
    # start-up (imports, the model, the first batch); after the last: the
    # tail to the exit. Neither is a step.
    assert [int(r["Step"]) for r in rows] == [1, 2, 3]
    assert all(float(r["Computing"]) > 0 for r in rows)
    with open(runs[0] / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        info = json.load(f)
    analysis = info["analysis"]
    assert info["options"]["profile_communication"] is False  # one process: no ranks to match
    start_up = analysis["start_up"]
    assert start_up["recorded_as_step"] == 0 and analysis["tail"]["recorded_as_step"] == 4
    # It holds the script's import of torch: its collections and seconds,
    # far more than a step's.
    assert start_up["gc_collections"] > 0, start_up
    assert start_up["ms"] > 10 * max(float(r["Computing"]) / 1e3 for r in rows), (start_up, rows)
    assert "gc_pauses" not in [f["rule"] for f in analysis["advice"]], analysis["advice"]
    assert "start-up: " in result.stderr, result.stderr


def test_run_under_a_launcher_of_several_ranks_records_their_communication(tmp_path: Path) -> None:
    """torchrun (WORLD_SIZE), mpirun (OMPI_COMM_WORLD_SIZE): the default
    options add profile_communication, which the cluster pass needs; given
    options stay as given."""
    script = write_script(tmp_path)
    base = {k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"}
    for variable, given, want in [("WORLD_SIZE", None, True), ("OMPI_COMM_WORLD_SIZE", None, True),
                                  ("WORLD_SIZE", '{"analyse": true}', False)]:
        out = tmp_path / f"{variable}{given is not None}"
        out.mkdir()
        options = ["--options", given] if given else []
        result = subprocess.run([sys.executable, "-m", "trainprof", "run", *options, str(script), "--steps", "2"],
                                capture_output=True, text=True, cwd=out, timeout=300, env=dict(base, **{variable: "2"}))
        assert result.returncode == 0, result.stderr
        [run_dir] = run_dirs(out / "data")
        with open(run_dir / "profiler_info.json") as f:
            assert json.load(f)["options"]["profile_communication"] is want, (variable, given)


def test_trainprof_options_under_torchrun_profiles_the_ranks_not_the_launcher(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text("import torch.distributed as dist\n" + TRAIN_SCRIPT.replace(
        "    torch.manual_seed(0)", "    dist.init_process_group('gloo')\n    torch.manual_seed(0)"))
    torchrun = Path(sys.executable).parent / "torchrun"
    options = json.dumps({"start": True, "output_path": str(tmp_path / "out")})
    for launcher in ([str(torchrun)], [sys.executable, "-m", "torch.distributed.run"]):
        result = subprocess.run([*launcher, "--nproc-per-node", "2", str(script), "--steps", "2"],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "TRAINPROF_OPTIONS": options})
        assert result.returncode == 0, result.stderr
    runs = run_dirs(tmp_path / "out")
    ranks = sorted(json.loads((r / "profiler_info.json").read_text())["rank"] for r in runs)
    assert ranks == [0, 0, 1, 1]  # two ranks per launch, no launcher


def test_run_records_the_dataloader_workers_stages(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    options = json.dumps({"output_path": str(tmp_path / "out"), "analyse": True, "data_process": True})
    result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "5", "--loader"])
    assert result.returncode == 0, result.stderr
    with open(run_dirs(tmp_path / "out")[0] / "PROFILER_OUTPUT" / "dataset.csv", newline="") as f:
        rows = {(r["Operation"], r["Stage"]): int(r["Occurrences"]) for r in csv.DictReader(f)}
    assert rows == {("TensorDataset", "dataset"): 5, ("default_collate", "collate"): 5, ("DataLoader", "wait"): 6}


def test_the_scripts_exit_status_and_exception_pass_through(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    options = json.dumps({"output_path": str(tmp_path / "exit"), "analyse": True})
    result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "3", "--exit", "3"])
    assert result.returncode == 3
    # Still stopped, flushed and analysed: 3 optimizer steps end the start-up
    # and steps 1 and 2; the tail runs to the exit.
    assert [int(r["Step"]) for r in step_rows(run_dirs(tmp_path / "exit")[0])] == [1, 2]

    options = json.dumps({"output_path": str(tmp_path / "fail"), "analyse": True})
    result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "2", "--fail"])
    assert result.returncode == 1
    assert "ValueError: the script failed" in result.stderr
    assert "_run.py" not in result.stderr  # the traceback is the script's, as `python train.py` shows it
    assert [int(r["Step"]) for r in step_rows(run_dirs(tmp_path / "fail")[0])] == [1]


def test_run_refuses_bad_options_naming_the_key(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    result = run(["-m", "trainprof", "run", "--options", '{"schedule": {"wait": 1}}', str(script), "--steps", "1"])
    assert result.returncode != 0
    assert "schedule" in result.stderr and "active" in result.stderr
    result = run(["-m", "trainprof", "run", "--options", '{"recod_shapes": true}', str(script)])
    assert result.returncode != 0 and "recod_shapes" in result.stderr
    result = run(["-m", "trainprof", "run", str(tmp_path / "missing.py")])
    assert result.returncode != 0 and "missing.py" in result.stderr


def test_trainprof_options_profiles_a_plain_python_run(tmp_path: Path) -> None:
    """The .pth file installed with the package starts trainprof in a
    process that never imports it."""
    script = write_script(tmp_path)
    options = json.dumps({"start": True, "output_path": str(tmp_path / "out"), "analyse": True,
                          "schedule": SCHEDULE})
    result = run([str(script), "--steps", "8"], env_options=options)
    assert result.returncode == 0, result.stderr
    assert_one_cycle_of_three_steps(tmp_path / "out")


def test_trainprof_options_spawned_workers_are_not_profiled_on_their_own(tmp_path: Path) -> None:
    """Spawned DataLoader workers see TRAINPROF_OPTIONS too: they start no
    profile of their own, and their stages reach the script's run."""
    script = write_script(tmp_path)
    options = json.dumps({"start": True, "output_path": str(tmp_path / "out"), "analyse": True,
                          "data_process": True})
    result = run([str(script), "--steps", "4", "--loader", "--spawn"], env_options=options)
    assert result.returncode == 0, result.stderr
    runs = run_dirs(tmp_path / "out")
    assert len(runs) == 1
    with open(runs[0] / "PROFILER_OUTPUT" / "dataset.csv", newline="") as f:
        rows = {(r["Operation"], r["Stage"]): int(r["Occurrences"]) for r in csv.DictReader(f)}
    assert rows[("TensorDataset", "dataset")] == 4


def test_trainprof_options_errors_leave_the_script_unprofiled(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    result = run([str(script), "--steps", "2"], env_options='{"start": true, "buffer_mb": "big"}')
    assert result.returncode == 0 and "trained 2" in result.stdout
    assert "buffer_mb" in result.stderr and "without profiling" in result.stderr
    result = run([str(script), "--steps", "2"],
                 env_options=json.dumps({"start": False, "output_path": str(tmp_path / "off")}))
    assert result.returncode == 0 and not (tmp_path / "off").exists()


# ---- one rule for --options and TRAINPROF_OPTIONS under `run` ----

DEEP = "[" * 2000 + "]" * 2000  # JSON nested deeper than the core's limit (128)


def test_run_takes_bad_options_from_either_source_as_a_usage_error(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    for args, env in ((["--options", '{"buffer_mb": "big"}'], None),
                      ([], '{"start": true, "buffer_mb": "big"}'),
                      (["--options", DEEP], None),
                      ([], DEEP)):
        result = subprocess.run([sys.executable, "-m", "trainprof", "run", *args, str(script), "--steps", "1"],
                                capture_output=True, text=True, cwd=tmp_path, timeout=300,
                                env={**{k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"},
                                     **({"TRAINPROF_OPTIONS": env} if env is not None else {})})
        what = f"{args or 'TRAINPROF_OPTIONS'}: {result.stderr}"
        assert result.returncode == 2, what  # a usage error: the script does not run
        assert "trained" not in result.stdout, what
        assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr, what
        assert "this process runs without profiling" not in result.stderr, what  # nothing contradicts it
        assert ("buffer_mb" in result.stderr) != (args[-1:] == [DEEP] or env == DEEP), what
        assert "usage: python -m trainprof run" in result.stderr, what
        assert not (tmp_path / "data").exists(), what


def test_run_with_start_false_from_either_source_runs_the_script_unprofiled(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    for args, env, source in ((["--options", '{"start": false}'], None, "--options"),
                              ([], '{"start": false}', "TRAINPROF_OPTIONS")):
        result = subprocess.run([sys.executable, "-m", "trainprof", "run", *args, str(script), "--steps", "2"],
                                capture_output=True, text=True, cwd=tmp_path, timeout=300,
                                env={**{k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"},
                                     **({"TRAINPROF_OPTIONS": env} if env is not None else {})})
        assert result.returncode == 0 and "trained 2" in result.stdout, result.stderr
        assert f'{source} has "start": false' in result.stderr, result.stderr
        assert not (tmp_path / "data").exists(), source


def test_run_takes_trainprof_options_like_options(tmp_path: Path) -> None:
    """TRAINPROF_OPTIONS under `run` is what --options would be ("start" implied)."""
    script = write_script(tmp_path)
    options = json.dumps({"output_path": str(tmp_path / "out"), "analyse": True, "schedule": SCHEDULE})
    result = run(["-m", "trainprof", "run", str(script), "--steps", "8"], env_options=options)
    assert result.returncode == 0, result.stderr
    assert_one_cycle_of_three_steps(tmp_path / "out")


def test_run_analyses_at_exit_unless_the_options_say_not_to(tmp_path: Path) -> None:
    """`run` stops, flushes and analyses at exit whatever the options,
    unless they have "analyse": false."""
    script = write_script(tmp_path)
    for out, extra in (("analysed", {}), ("raw_only", {"analyse": False})):
        options = json.dumps({"output_path": str(tmp_path / out), **extra})
        result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "3"])
        assert result.returncode == 0, result.stderr
        (run_dir,) = run_dirs(tmp_path / out)
        assert (run_dir / "PROFILER_OUTPUT" / "op_statistic.csv").is_file() == (not extra), result.stderr
    assert "trainprof analyse" in result.stderr  # where to go on from the raw data


LOOP_SCRIPT = """
import torch
net = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for i in range(10 ** 9):
    net(torch.ones(4, 8)).sum().backward()
    optimizer.step()
    if i == 20:
        print("READY", flush=True)
"""


def test_a_signal_flushes_the_run_and_sigint_in_python_closes_it(tmp_path: Path) -> None:
    """SIGTERM ends the process from its handler: what was recorded is
    flushed and analysed, the run not closed (no metadata file), and the
    analysis says it ends at the signal. SIGINT in Python is a
    KeyboardInterrupt: the interpreter exits and the run is closed."""
    import signal

    import trainprof

    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT)
    for sig in (signal.SIGTERM, signal.SIGINT):
        out = tmp_path / sig.name
        env = {**os.environ, "TRAINPROF_OPTIONS": json.dumps({"start": True, "output_path": str(out)})}
        child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert child.stdout is not None and child.stdout.readline() == "READY\n"
        child.send_signal(sig)
        child.communicate(timeout=120)
        assert child.returncode == -sig  # the signal's own end, as without trainprof
        (run_dir,) = run_dirs(out)
        report = trainprof.analyse(run_dir)
        assert report.ok and report.runs[0].events > 0
        signal_note = [w for w in report.runs[0].warnings if "ends at the signal that ended the process" in w]
        closed = (run_dir / "profiler_metadata.json").exists()
        if sig == signal.SIGTERM:
            assert signal_note and not closed, report.runs[0].warnings
        else:
            assert closed and not signal_note, report.runs[0].warnings
        assert "aten::addmm" in op_statistic(run_dir)


def test_a_scripts_traceback_under_run_is_the_scripts_alone(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    options = json.dumps({"output_path": str(tmp_path / "fail"), "analyse": False})
    result = run(["-m", "trainprof", "run", "--options", options, str(script), "--steps", "1", "--fail"])
    assert result.returncode == 1
    plain = subprocess.run([sys.executable, str(script), "--steps", "1", "--fail"], capture_output=True, text=True,
                           timeout=300)
    frames = [line for line in result.stderr.splitlines() if line.startswith("  File ")]
    assert frames == [line for line in plain.stderr.splitlines() if line.startswith("  File ")]
    assert "runpy" not in result.stderr


def test_a_chdir_in_the_script_loses_no_run(tmp_path: Path) -> None:
    script = tmp_path / "chdir_train.py"
    (tmp_path / "elsewhere").mkdir()
    script.write_text(TRAIN_SCRIPT.replace("    for x, y in data:",
                                           "    import os\n    os.chdir('elsewhere')\n    for x, y in data:"))
    result = subprocess.run([sys.executable, "-m", "trainprof", "run", "--options",
                             '{"output_path": "prof", "analyse": true}', str(script), "--steps", "3"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "TRAINPROF_OPTIONS"})
    assert result.returncode == 0, result.stderr
    (run_dir,) = run_dirs(tmp_path / "prof")
    assert [int(r["Step"]) for r in step_rows(run_dir)] == [1, 2], result.stderr
    assert not (tmp_path / "elsewhere" / "prof").exists()
    assert f"trainprof summary {tmp_path / 'prof'}" in result.stderr
