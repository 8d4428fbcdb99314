"""NCCL on a device: the package offers libtrainprof as NCCL's profiler plugin
at import, and NCCL reports a one-rank job's all-reduces to it while a
profile records (a one-rank communicator may copy rather than run a kernel:
such an operation is counted as not timed, not written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_dirs

JOB = """
import os, sys
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
import trainprof
import torch, torch.distributed as dist
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 22, device="cuda")
with trainprof.profile(activities=[trainprof.ProfilerActivity.CPU, trainprof.ProfilerActivity.CUDA],
                       profile_communication=True,
                       on_trace_ready=trainprof.tensorboard_trace_handler(sys.argv[1])) as prof:
    for _ in range(5):
        dist.all_reduce(x)
        prof.step()
    torch.cuda.synchronize()
dist.destroy_process_group()
print("plugin", os.environ.get("NCCL_PROFILER_PLUGIN"))
"""


@pytest.mark.device
def test_nccl_reports_a_jobs_all_reduces_to_the_plugin(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    job = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr
    assert "plugin " in job.stdout and "libtrainprof.so" in job.stdout, job.stdout
    [run] = run_dirs(out)
    with open(run / "PROFILER_OUTPUT" / "profiler_info.json") as f:
        plugin = json.load(f)["collectors"]["nccl"]
    assert plugin["communicators"] >= 1, plugin
    seen = plugin["operations_written"] + plugin["operations_without_gpu_times"] + \
        plugin["operations_not_timed_yet"]
    assert seen >= 5, plugin
