"""trainprof against torch.profiler on the same CUDA training (issue 16).

The demo's CNN (examples/python/fashion_mnist.py) trains on batches made on
the device from a fixed seed, in three processes (CUPTI is per process, and
two profilers must not share it): without a profiler, under torch.profiler
(CPU + CUDA activities) and under trainprof (CPU + CUDA). Each profiles the
same steps after the same warm-up; trainprof once more with sync_enable
(each outermost operator waits for the GPU) to state that option's cost.
Printed: the time per step and the
overhead of each profiler against none, the kernels per step and the kernel
time per step each one's timeline holds (both read the same way from their
Chrome trace: events of category "kernel"), and each one's export time.

    python bench/gpu_compare.py [--steps N] [--warmup N] [--device cuda|cpu]

Exits 1 when the two profilers disagree on the kernels (count per step, or
total kernel time by more than --time-tolerance), so scripts/gpu_check.sh
fails on a real difference. ``--device cpu`` runs the same plumbing without
a GPU (no kernels): the pytest suite uses it to keep this script working.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("none", "torch.profiler", "trainprof", "trainprof sync")


def make_model(torch, device: str):
    """The demo's CNN: two conv layers, pooling, two linear layers."""
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return model.to(device)


def kernels_in_trace(path: Path) -> tuple[int, float]:
    """Kernels in a Chrome trace (category "kernel"): count and total us."""
    events = json.loads(path.read_text()).get("traceEvents", [])
    durations = [e.get("dur", 0) for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return len(durations), float(sum(durations))


def run_mode(mode: str, device: str, steps: int, warmup: int) -> dict:
    """One mode in this process: its step time, kernels and export time."""
    import torch

    torch.manual_seed(0)
    model = make_model(torch, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(64, 1, 28, 28, device=device), torch.randint(0, 10, (64,), device=device))
               for _ in range(4)]

    def train_step(i: int) -> None:
        images, labels = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    def synchronize() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for i in range(warmup):
        train_step(i)
    synchronize()
    result: dict = {"mode": mode, "steps": steps}
    out = Path(tempfile.mkdtemp(prefix="gpu_compare_"))
    if mode == "none":
        t0 = time.perf_counter()
        for i in range(steps):
            train_step(i)
        synchronize()
        result["seconds"] = time.perf_counter() - t0
    elif mode == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for i in range(steps):
                train_step(i)
            synchronize()
            result["seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        prof.export_chrome_trace(str(out / "kineto.json"))
        result["export_seconds"] = time.perf_counter() - t0
        result["kernels"], result["kernel_us"] = kernels_in_trace(out / "kineto.json")
    else:
        import trainprof

        activities = [trainprof.ProfilerActivity.CPU, trainprof.ProfilerActivity.CUDA]
        prof = trainprof.profile(activities=activities,
                                 on_trace_ready=trainprof.tensorboard_trace_handler(str(out), analyse_flag=False),
                                 sync_enable=mode == "trainprof sync")
        prof.start()
        t0 = time.perf_counter()
        for i in range(steps):
            train_step(i)
        synchronize()
        result["seconds"] = time.perf_counter() - t0
        prof.stop()
        run_dir = prof.last_run_dir
        t0 = time.perf_counter()
        report = trainprof.analyse(run_dir)
        result["export_seconds"] = time.perf_counter() - t0
        if not all(r.ok for r in report.runs):
            raise SystemExit(f"gpu_compare: the analysis failed: {[r.error for r in report.runs]}")
        result["kernels"], result["kernel_us"] = kernels_in_trace(Path(run_dir) / "PROFILER_OUTPUT" /
                                                                  "trace_view.json")
        info = json.loads((Path(run_dir) / "profiler_info.json").read_text())
        result["cupti"] = info.get("collectors", {}).get("cupti", {})
        result["run_dir"] = run_dir
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--time-tolerance", type=float, default=0.10,
                        help="largest relative difference of total kernel time (default 0.10)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in a child
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(run_mode(args.mode, args.device, args.steps, args.warmup)))
        return 0

    results = {}
    for mode in MODES:
        child = subprocess.run([sys.executable, __file__, "--mode", mode, "--device", args.device,
                                "--steps", str(args.steps), "--warmup", str(args.warmup)],
                               capture_output=True, text=True)
        if child.returncode != 0:
            print(f"gpu_compare: the {mode} run failed:\n{child.stderr[-4000:]}", file=sys.stderr)
            return 1
        results[mode] = json.loads(child.stdout.strip().splitlines()[-1])
    base = results["none"]["seconds"] / args.steps
    print(f"{args.steps} steps on {args.device} after {args.warmup} warm-up steps, one process each")
    print(f"{'':16} {'ms/step':>9} {'overhead':>9} {'kernels/step':>13} {'kernel ms/step':>15} {'export s':>9}")
    for mode in MODES:
        r = results[mode]
        per_step = r["seconds"] / args.steps
        line = f"{mode:16} {per_step * 1e3:9.3f} {per_step / base:8.2f}x"
        if "kernels" in r:
            line += (f" {r['kernels'] / args.steps:13.1f} {r['kernel_us'] / args.steps / 1e3:15.3f}"
                     f" {r['export_seconds']:9.2f}")
        print(line)
    ours, theirs = results["trainprof"], results["torch.profiler"]
    print(f"trainprof's CUPTI: {json.dumps(ours['cupti'])}")
    print(f"trainprof's run: {ours['run_dir']}")
    problems = []
    if ours["kernels"] != theirs["kernels"]:
        problems.append(f"kernels: trainprof {ours['kernels']}, torch.profiler {theirs['kernels']}")
    if theirs["kernel_us"] > 0:
        difference = abs(ours["kernel_us"] - theirs["kernel_us"]) / theirs["kernel_us"]
        print(f"kernel time: trainprof / torch.profiler = {ours['kernel_us'] / theirs['kernel_us']:.3f}")
        if difference > args.time_tolerance:
            problems.append(f"kernel time differs by {difference:.1%} (tolerance {args.time_tolerance:.0%})")
    if args.device == "cuda" and ours["kernels"] == 0:
        problems.append("trainprof recorded no kernel: " + ours["cupti"].get("why_not", "?"))
    for p in problems:
        print(f"gpu_compare: MISMATCH {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
