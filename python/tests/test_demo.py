"""The Python demo (examples/python/fashion_mnist.py), short: it trains from
Debian's Fashion-MNIST files with DataLoader workers, records its schedule's
cycles and prints where the time went and where the outputs are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, FASHION_MNIST, assert_outputs_do_not_depend_on_threads, run_dirs

import trainprof

DEMO = EXAMPLES / "fashion_mnist.py"


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_demo_trains_profiles_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(DEMO), "--out", str(out), "--steps", "24", "--schedule", "1,1,3,2,2"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    runs = run_dirs(out)
    assert len(runs) == 2  # the schedule's two cycles, each analysed
    for run in runs:
        assert (run / "PROFILER_OUTPUT" / "trace_view.json").exists()
        assert (run / "PROFILER_OUTPUT" / "dataset.csv").exists()  # the workers' stages reached the run
        assert (run / "PROFILER_OUTPUT" / "host_cpu_usage.csv").exists()  # host_sys
    text = result.stdout
    assert "test accuracy" in text
    assert text.count(f"run {runs[0].parent}") >= 1 or str(runs[0]) in text  # each cycle's summary
    assert "aten::" in text  # where the time went
    assert "  host: " in text  # whether the machine was the bottleneck
    assert "trace_view.json" in text and f"trainprof summary {out}" in text  # where the outputs are
    # It ends with the advisor's top finding, or says none fired.
    findings = trainprof.advise(out)
    last = text[text.rindex("\nadvice"):]
    if findings:
        assert last.startswith(f"\nadvice, the top of {len(findings)}: {findings[0]['title']}"), last
    else:
        assert last.startswith("\nadvice: none of the advisor's rules fired"), last
    # Analysed again on 1 and on 3 threads: the same bytes.
    assert_outputs_do_not_depend_on_threads(runs[-1])


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_demo_with_the_flight_recorder_writes_only_the_planted_slow_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # No loader workers: steadier steps, so that only the planted one is 3x the median.
    result = subprocess.run([sys.executable, str(DEMO), "--out", str(out), "--steps", "40", "--slow-step", "30", "--workers", "0",
                             "--flight-recorder"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    # The planted step's dump. A machine busy with other work may stretch a
    # step 3x too: that one is dumped as well (it was slow), or joins the
    # planted one's burst; either way every dump is a slow step's, and the
    # planted step is in one, named in its reason.
    planted = []
    for run in run_dirs(out):
        fired = json.loads((run / "profiler_info.json").read_text())["flight_recorder"]
        assert fired["trigger"] == "slow_step", fired
        if fired["step"] <= 30 <= fired["last_step"]:
            planted.append((run, fired))
    [(run, fired)] = planted
    said = f"steps {fired['step']}-{fired['last_step']} slow, " if fired["step"] < 30 else "step 30 took "
    assert f"the flight recorder wrote {run} by itself (slow_step: {said}" in text, text
    assert "planted_stall" in text  # and what the slow step did
    steps = [line.split(",")[0] for line in (run / "PROFILER_OUTPUT" / "step_trace_time.csv").read_text().splitlines()]
    # The ring's steps, the slow one whole: the dump is written once the step after it has ended.
    assert "29" in steps and "30" in steps and "31" in steps, steps


def test_summary_of_a_directory_without_runs_names_it(tmp_path: Path) -> None:
    import trainprof
    with pytest.raises(ValueError, match="profiler_path: no trainprof run directory"):
        trainprof.summary(tmp_path)
    with pytest.raises(TypeError, match="profiler_path"):
        trainprof.summary(3)  # type: ignore[arg-type]
