"""HTA on a GPU timeline of ours. Without a GPU, the C++ test
CuptiAnalysis.KernelsBelongToTheRangesThatLaunchedThem feeds CUPTI's own
record structs (through the real libcupti) to a session and writes its
trace_view.json here; HTA's temporal and kernel breakdowns must read it and
measure the kernels that test recorded: k1 1 ms, k2 2 ms, k3 4 ms, on one
stream. scripts/gpu_check.sh does the same on a real GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BINARY = Path(__file__).resolve().parents[2] / "build" / "bin" / "trainprof_cupti_tests"


@pytest.fixture(scope="module")
def gpu_trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not BINARY.exists():
        pytest.skip(f"{BINARY} is not built (cmake --preset default, with CUPTI's headers)")
    out = tmp_path_factory.mktemp("gpu_trace")
    result = subprocess.run(
        [str(BINARY), "--gtest_filter=CuptiAnalysis.KernelsBelongToTheRangesThatLaunchedThem"],
        env={**os.environ, "TRAINPROF_TEST_GPU_TRACE_DIR": str(out)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    if not (out / "rank0.pt.trace.json").exists():
        pytest.skip("libcupti was not found: the test that writes the trace skipped\n" + result.stdout[-1000:])
    return out


def test_hta_kernel_breakdown_measures_our_kernels(gpu_trace_dir: Path) -> None:
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=str(gpu_trace_dir))
    _, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
    sums = dict(zip(kernels["name"], kernels["sum (us)"]))
    for name, us in {"k1()": 1000, "k2()": 2000, "k3()": 4000}.items():
        assert name in sums, f"HTA did not find {name}: {sums}"
        assert abs(sums[name] - us) <= 2, (name, sums[name])


def test_hta_temporal_breakdown_sees_the_device_busy_and_idle(gpu_trace_dir: Path) -> None:
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    breakdown = TraceAnalysis(trace_dir=str(gpu_trace_dir)).get_temporal_breakdown(visualize=False)
    row = breakdown.iloc[0]
    assert row["rank"] == 0
    assert abs(row["compute_time(us)"] - 7000) <= 5, breakdown.to_dict()
    # From the first kernel's start (12 ms) to the last one's end (169 ms).
    assert abs(row["kernel_time(us)"] - 157000) <= 5, breakdown.to_dict()
    assert abs(row["idle_time(us)"] - 150000) <= 5, breakdown.to_dict()


def test_wheel_cupti_is_found_by_cuda_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's wheel layouts: CUDA 13 under nvidia/cu13/lib, CUDA 12 under
    nvidia/cuda_cupti/lib; torch's CUDA version first."""
    from trainprof import _gpu

    cu12 = tmp_path / "site12" / "nvidia" / "cuda_cupti" / "lib" / "libcupti.so.12"
    cu13 = tmp_path / "site13" / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
    for f in (cu12, cu13):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"")
    roots = [str(tmp_path / "site12"), str(tmp_path / "site13")]
    monkeypatch.setattr(_gpu, "_torch_cuda_major", lambda: "12")
    assert _gpu.find_wheel_cupti(roots) == str(cu12)
    monkeypatch.setattr(_gpu, "_torch_cuda_major", lambda: "13")
    assert _gpu.find_wheel_cupti(roots) == str(cu13)
    monkeypatch.setattr(_gpu, "_torch_cuda_major", lambda: None)
    assert _gpu.find_wheel_cupti(roots) == str(cu13)  # the newest
    assert _gpu.find_wheel_cupti([str(tmp_path / "site12")]) == str(cu12)
    assert _gpu.find_wheel_cupti([str(tmp_path)]) is None
    # The user's choice stands.
    monkeypatch.setenv("TRAINPROF_CUPTI_LIBRARY", "/opt/mine/libcupti.so")
    assert _gpu.point_core_at_wheel_cupti() == "/opt/mine/libcupti.so"


_GPU_SESSION = """
import json, sys, torch, trainprof
with trainprof.profile(activities=[trainprof.ProfilerActivity.CPU, trainprof.ProfilerActivity.CUDA],
                       on_trace_ready=trainprof.tensorboard_trace_handler(sys.argv[1])) as prof:
    x = torch.ones(64, 64)
    for _ in range(3):
        x = x @ x / 64
        prof.step()
"""


def test_a_cuda_session_uses_the_cupti_torch_loaded(tmp_path: Path) -> None:
    """ProfilerActivity.CUDA in a torch process: the core uses the libcupti
    torch's wheel brought (never a system CUPTI of another version beside
    it), says in profiler_info.json whether GPU activity was recorded, and
    the analysis repeats why not; the host is recorded either way. Without a
    CUDA driver CUPTI is not called at all: CUPTI 13.2 (torch's wheel) then
    overflows the stack in its first call, which crashed this test once."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch: no CUPTI comes with it")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TRAINPROF_CUPTI_LIBRARY"}
    result = subprocess.run([sys.executable, "-c", _GPU_SESSION, str(out)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted(out.glob("*_trainprof"))
    assert len(runs) == 1, list(out.iterdir())
    info = json.loads((runs[0] / "profiler_info.json").read_text())
    gpu = info["collectors"]["cupti"]
    loaded = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if "libcupti.so" in line]
    assert loaded, "torch with CUDA loads libcupti at import"
    if "library" in gpu:  # CUPTI was reached (a driver is present)
        assert Path(gpu["library"]).resolve() == Path(loaded[0]).resolve(), gpu
    else:
        assert gpu["why_not"].startswith("no CUDA driver"), gpu
    out_info = json.loads((runs[0] / "PROFILER_OUTPUT" / "profiler_info.json").read_text())
    if gpu["recorded"]:
        assert (runs[0] / "PROFILER_OUTPUT" / "kernel_details.csv").exists()
    else:
        assert gpu["why_not"] in result.stderr
        assert f"GPU activity was asked for but not recorded: {gpu['why_not']}" in out_info["analysis"]["warnings"]
    ops = (runs[0] / "PROFILER_OUTPUT" / "op_statistic.csv").read_text()
    assert "aten::mm" in ops


def test_gpu_compare_runs_its_three_modes_without_a_gpu() -> None:
    """bench/gpu_compare.py (scripts/gpu_check.sh's comparison) on the CPU:
    the three processes run, the table is printed, and with no kernels on
    either side the two profilers agree."""
    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_compare.py"
    result = subprocess.run([sys.executable, str(script), "--device", "cpu", "--steps", "3", "--warmup", "1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for mode in ("none", "torch.profiler", "trainprof"):
        assert f"\n{mode} " in "\n" + result.stdout, result.stdout
    assert "trainprof's run: " in result.stdout


_SYNC_SESSION = """
import sys, torch, trainprof
with trainprof.profile(sync_enable=True,
                       on_trace_ready=trainprof.tensorboard_trace_handler(sys.argv[1])) as prof:
    x = torch.ones(64, 64)
    for _ in range(3):
        x = x @ x / 64
        prof.step()
print("driver loaded:", "libcuda.so" in open("/proc/self/maps").read())
"""


def test_sync_enable_runs_and_says_when_there_is_no_driver(tmp_path: Path) -> None:
    """sync_enable=True (MindSpore's option): the training runs and its
    operators are recorded; without the CUDA driver in the process the
    option is said to be ignored, once; the run's options keep it."""
    pytest.importorskip("torch")
    import trainprof

    with pytest.raises(TypeError, match="sync_enable"):
        trainprof.profile(sync_enable="yes", start_profile=False)
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-c", _SYNC_SESSION, str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    warning = "sync_enable: the CUDA driver is not in this process"
    if "driver loaded: False" in result.stdout:
        assert result.stderr.count(warning) == 1, result.stderr
    else:
        assert warning not in result.stderr
    runs = sorted(out.glob("*_trainprof"))
    assert len(runs) == 1
    info = json.loads((runs[0] / "profiler_info.json").read_text())
    assert info["options"]["sync_enable"] is True
    assert "aten::mm" in (runs[0] / "PROFILER_OUTPUT" / "op_statistic.csv").read_text()


def test_gpu_activity_is_left_to_a_running_torch_profiler(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """CUPTI serves one client: a trainprof profile asking for CUDA while
    torch.profiler records leaves the GPU to torch's (a warning says so) and
    records the host; without torch's profiler running, CUDA is asked for."""
    torch = pytest.importorskip("torch")
    import trainprof

    handler = trainprof.tensorboard_trace_handler(str(tmp_path / "out"))
    activities = [trainprof.ProfilerActivity.CPU, trainprof.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with caplog.at_level("WARNING", logger="trainprof"):
            with trainprof.profile(activities=activities, on_trace_ready=handler) as prof:
                torch.ones(8, 8) @ torch.ones(8, 8)
    assert any("torch.profiler is recording in this process" in r.getMessage() for r in caplog.records)
    info = json.loads((Path(prof.last_run_dir) / "profiler_info.json").read_text())
    assert info["options"]["activities"] == ["CPU"]
    assert "aten::mm" in (Path(prof.last_run_dir) / "PROFILER_OUTPUT" / "op_statistic.csv").read_text()
    caplog.clear()
    with trainprof.profile(activities=activities, on_trace_ready=handler) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert not any("torch.profiler is recording" in r.getMessage() for r in caplog.records)
    info = json.loads((Path(prof.last_run_dir) / "profiler_info.json").read_text())
    assert sorted(info["options"]["activities"]) == ["CPU", "GPU"]
