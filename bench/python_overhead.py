#!/usr/bin/env python3
"""trainprof against torch.profiler (Kineto) on PyTorch 2.x, in one process.

    .venv/bin/python bench/python_overhead.py [--rounds 11] [--samples 5] [--iters 1000] \
        [--export-iters 20000] [--json OUT.json] [--only overhead|record_function|export] \
        [--configs NAME...] [--workloads op|step|transformer]

Configurations, run in turn (order rotated every round) so that the shared
machine's drift hits them alike:

  none              no profiler
  bare              a global RecordFunction callback that does nothing (LibTorch's floor for any
                    operator profiler), from bench/torch_floor.cc (built on first use)
  bare_inputs       the same asking for the inputs (the floor of record_shapes)
  bare_full         bare_inputs plus a memory reporter that drops every report (the floor of
                    record_shapes + profile_memory: LibTorch's allocator then tracks every block)
  bare_full_clock   bare_full reading the clock at each operator's start and end and at each memory
                    report (the floor of any profiler that timestamps what it records)
  bare_disabled     bare's callback registered, then switched off (at::disableCallback): what steps
                    without operator recording pay
  kineto            torch.profiler.profile(activities=[CPU])
  kineto_shapes_mem the same with record_shapes + profile_memory
  kineto_stack      the same with with_stack
  trainprof         trainprof.profile() (Level0)
  trainprof_shapes_mem, trainprof_stack, trainprof_modules (with_modules)

Workloads: ``op``: a loop of ``x.add_(1)`` on a one-element tensor (the
per-operator cost: the operator itself is negligible); ``step``: a small CNN
training step (conv, relu, pool, linear, cross-entropy, backward, SGD), where
nn.Module hooks (with_modules) and Python stacks have their real depth;
``transformer``: a small transformer language model's training step (2
encoder layers of width 128, 64 tokens, batch 8, AdamW). Cost
is the training thread's CPU time (time.thread_time_ns), so another process
on the machine costs less than in wall time. Per round and configuration: the
median of ``--samples`` samples; "added" is a configuration's median minus
the same round's ``none``, then the median over rounds.

Also: ``trainprof.record_function`` against ``torch.profiler.record_function``
(an empty ``with`` block, each under its own profiler and with none), and the
time from the end of training to the outputs: Kineto's stop (its
post-processing) + ``export_chrome_trace``, Kineto with
``tensorboard_trace_handler``, trainprof's stop + analysis (trace handler).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, Optional

import torch

import trainprof

torch.set_num_threads(1)

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FLOOR_SOURCE = os.path.join(_REPO, "bench", "torch_floor.cc")
_floor: ctypes.CDLL | None = None


def floor_library() -> ctypes.CDLL:
    """bench/torch_floor.cc, compiled once against this environment's torch and trainprof
    (cached by the source, torch and package they were built from)."""
    global _floor
    if _floor is not None:
        return _floor
    torch_dir = os.path.dirname(torch.__file__)
    package_dir = os.path.dirname(trainprof.__file__)
    sources = [_FLOOR_SOURCE, os.path.join(_REPO, "src", "collectors", "torch", "memory_total.h")]
    digest = hashlib.sha256(torch.__version__.encode() + package_dir.encode())
    for source in sources:
        with open(source, "rb") as f:
            digest.update(f.read())
    key = digest.hexdigest()[:16]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trainprof-bench")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    library = os.path.join(cache, f"libtorch_floor-{key}.so")
    if not os.path.exists(library):
        print(f"building the floor's callbacks ({_FLOOR_SOURCE}) into {library} ...", file=sys.stderr)
        fd, partial = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        command = [os.environ.get("CXX", "c++"), "-O2", "-std=c++20", "-shared", "-fPIC",
                   f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-isystem", os.path.join(torch_dir, "include"),
                   "-I", os.path.join(_REPO, "include"), "-I", os.path.join(_REPO, "src"), _FLOOR_SOURCE, "-o", partial,
                   os.path.join(torch_dir, "lib", "libtorch_cpu.so"), os.path.join(torch_dir, "lib", "libc10.so"),
                   os.path.join(package_dir, "libtrainprof.so"),
                   f"-Wl,-rpath,{os.path.join(torch_dir, 'lib')}:{package_dir}"]
        try:
            subprocess.run(command, check=True)
            os.replace(partial, library)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    _floor = ctypes.CDLL(library)
    return _floor


def bare_callback(mode: int) -> None:
    """0: none; 1: no-op RecordFunction callback; 2: the same with inputs; 3: and a memory
    reporter that drops the reports; 4: 3 reading the clock at each start, end and report;
    5: 1 switched off."""
    if not floor_library().trainprof_bench_floor(ctypes.c_int(mode)):
        raise RuntimeError("cannot register the bare callback")


@contextlib.contextmanager
def bare(mode: int) -> Iterator[None]:
    bare_callback(mode)
    try:
        yield
    finally:
        bare_callback(0)


def kineto(**settings: bool) -> Callable[[], Any]:
    return lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **settings)


def ours(out: str, **settings: bool) -> Callable[[], Any]:
    # No analysis here: the cost of recording only (analysis is measured apart).
    return lambda: trainprof.profile(on_trace_ready=trainprof.tensorboard_trace_handler(out, analyse_flag=False),
                                     **settings)


def flight(out: str, sample_operators: Optional[int]) -> Callable[[], Any]:
    # The always-on recorder, its triggers off (a dump would cost the round);
    # sample_operators None: the recorder's default.
    return lambda: trainprof.flight_recorder(out, analyse=False, slow_step_factor=0, hang_timeout_s=None,
                                             dump_signal=None, sample_operators=sample_operators)


def configurations(out: str) -> dict[str, Callable[[], Any]]:
    return {
        "none": contextlib.nullcontext,
        "bare": lambda: bare(1),
        "bare_inputs": lambda: bare(2),
        "bare_full": lambda: bare(3),
        "bare_full_clock": lambda: bare(4),
        "bare_disabled": lambda: bare(5),
        "kineto": kineto(),
        "kineto_shapes_mem": kineto(record_shapes=True, profile_memory=True),
        "kineto_stack": kineto(with_stack=True),
        "kineto_modules": kineto(with_modules=True),
        "trainprof": ours(out),
        "trainprof_shapes_mem": ours(out, record_shapes=True, profile_memory=True),
        "trainprof_stack": ours(out, with_stack=True),
        "trainprof_modules": ours(out, with_modules=True),
        "flight": flight(out, 1),
        "flight_default": flight(out, None),
        "flight_sampled10": flight(out, 10),
        "flight_sampled100": flight(out, 100),
        "flight_sampled1000": flight(out, 1000),
    }


class Workloads:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.x = torch.ones(1)
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(4 * 13 * 13, 10))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.batch = (torch.rand(4, 1, 28, 28), torch.randint(0, 10, (4,)))
        # A small transformer language model: 2 encoder layers of width 128,
        # 4 heads, sequences of 64 tokens of a 1000-token vocabulary, AdamW.
        self.embed = torch.nn.Embedding(1000, 128)
        layer = torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(128, 1000)
        self.lm = torch.nn.ModuleList([self.embed, self.encoder, self.head])
        self.lm_opt = torch.optim.AdamW(self.lm.parameters(), lr=1e-3)
        self.tokens = torch.randint(0, 1000, (8, 65))
        self.causal = torch.nn.Transformer.generate_square_subsequent_mask(64)

    def op(self, iters: int) -> None:
        x = self.x
        for _ in range(iters):
            x.add_(1)

    def step(self, iters: int) -> None:
        data, target = self.batch
        for _ in range(iters):
            loss = torch.nn.functional.cross_entropy(self.model(data), target)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


    def transformer(self, iters: int) -> None:
        inputs, targets = self.tokens[:, :-1], self.tokens[:, 1:]
        for _ in range(iters):
            hidden = self.encoder(self.embed(inputs), mask=self.causal, is_causal=True)
            loss = torch.nn.functional.cross_entropy(self.head(hidden).reshape(-1, 1000), targets.reshape(-1))
            self.lm_opt.zero_grad()
            loss.backward()
            self.lm_opt.step()


def operators_per_iteration(fn: Callable[[int], None]) -> float:
    """How many RecordFunction operators (all nesting levels) one iteration runs."""
    fn(5)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(20)
    return sum(1 for e in prof.events() if not e.name.startswith("ProfilerStep")) / 20


def measure(fn: Callable[[int], None], iters: int, samples: int) -> float:
    """Median thread CPU ns of one iteration."""
    fn(max(1, iters // 5))  # warm
    times = []
    for _ in range(samples):
        t0 = time.thread_time_ns()
        fn(iters)
        times.append((time.thread_time_ns() - t0) / iters)
    return statistics.median(times)


def run_overhead(args: argparse.Namespace, out: str) -> dict:
    w = Workloads()
    configs = configurations(out)
    if args.configs:
        unknown = set(args.configs) - set(configs)
        if unknown:
            sys.exit(f"--configs: unknown configuration(s) {sorted(unknown)}; known: {list(configs)}")
        configs = {n: c for n, c in configs.items() if n == "none" or n in args.configs}
    names = list(configs)
    workloads = {"op": (w.op, args.iters), "step": (w.step, max(1, args.iters // 50)),
                 "transformer": (w.transformer, max(1, args.iters // 200))}
    if args.workloads:
        workloads = {k: v for k, v in workloads.items() if k in args.workloads}
    per_iter_ops = {k: operators_per_iteration(fn) for k, (fn, _) in workloads.items()}
    raw: dict[str, dict[str, list[float]]] = {k: {n: [] for n in names} for k in workloads}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            with configs[name]():
                for k, (fn, iters) in workloads.items():
                    raw[k][name].append(measure(fn, iters, args.samples))
        shutil.rmtree(out, ignore_errors=True)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    result = {}
    for k in workloads:
        added = {n: statistics.median(a - b for a, b in zip(raw[k][n], raw[k]["none"])) for n in names}
        result[k] = {"ops_per_iteration": per_iter_ops[k],
                     "none_ns_per_iteration": statistics.median(raw[k]["none"]),
                     "added_ns_per_iteration": added,
                     "added_ns_per_op": {n: v / per_iter_ops[k] for n, v in added.items()}}
    return result


def run_record_function(args: argparse.Namespace, out: str) -> dict:
    """ns per empty ``with record_function(...)`` block."""
    def block(cls: Any) -> Callable[[int], None]:
        def fn(iters: int) -> None:
            for _ in range(iters):
                with cls("range"):
                    pass
        return fn

    cases = {
        "trainprof_idle": (contextlib.nullcontext, block(trainprof.record_function)),
        "torch_idle": (contextlib.nullcontext, block(torch.profiler.record_function)),
        "trainprof_recording": (ours(out), block(trainprof.record_function)),
        "torch_recording": (kineto(), block(torch.profiler.record_function)),
    }
    raw: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, (ctx, fn) in cases.items():
            with ctx():
                raw[name].append(measure(fn, args.iters, args.samples))
        shutil.rmtree(out, ignore_errors=True)
    return {k: statistics.median(v) for k, v in raw.items()}


def run_export(args: argparse.Namespace, out: str) -> dict:
    """Seconds from the end of training to the outputs, for the same
    ``--export-iters`` iterations of the op loop."""
    w = Workloads()
    n = args.export_iters
    result: dict[str, list[float]] = {"kineto_stop": [], "kineto_export_chrome_trace": [],
                                      "kineto_stop_and_export": [], "kineto_tensorboard_trace_handler": [],
                                      "trainprof_stop_and_analysis": []}
    events = {}
    os.makedirs(out, exist_ok=True)  # the other parts remove it between rounds
    for _ in range(3):
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()
        w.op(n)
        t0 = time.perf_counter()
        prof.__exit__(None, None, None)
        t1 = time.perf_counter()
        prof.export_chrome_trace(os.path.join(out, "kineto.json"))
        t2 = time.perf_counter()
        result["kineto_stop"].append(t1 - t0)
        result["kineto_export_chrome_trace"].append(t2 - t1)
        result["kineto_stop_and_export"].append(t2 - t0)
        events["kineto"] = len(prof.events())
        del prof

        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      on_trace_ready=torch.profiler.tensorboard_trace_handler(os.path.join(out, "tb")))
        prof.__enter__()
        w.op(n)
        t0 = time.perf_counter()
        prof.__exit__(None, None, None)
        result["kineto_tensorboard_trace_handler"].append(time.perf_counter() - t0)
        del prof

        prof = trainprof.profile(on_trace_ready=trainprof.tensorboard_trace_handler(os.path.join(out, "tp")),
                                 start_profile=True)
        w.op(n)
        t0 = time.perf_counter()
        prof.stop()
        result["trainprof_stop_and_analysis"].append(time.perf_counter() - t0)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    summary = {k: statistics.median(v) for k, v in result.items()}
    summary["operators"] = events["kineto"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--export-iters", type=int, default=20000)
    parser.add_argument("--json", help="write the results here as well")
    parser.add_argument("--only", choices=["overhead", "record_function", "export"], action="append")
    parser.add_argument("--configs", nargs="+", help="overhead: only these configurations (and none)")
    parser.add_argument("--workloads", nargs="+", choices=["op", "step", "transformer"],
                        help="overhead: only these workloads")
    args = parser.parse_args()
    if trainprof.torch_collector_status() is not None:
        sys.exit(f"the torch collector is not loaded: {trainprof.torch_collector_status()}")
    out = tempfile.mkdtemp(prefix="tp_bench_")
    try:
        parts = args.only or ["overhead", "record_function", "export"]
        result: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0],
                                  "rounds": args.rounds, "samples": args.samples, "iters": args.iters}
        if "overhead" in parts:
            result["overhead"] = run_overhead(args, out)
        if "record_function" in parts:
            result["record_function_ns"] = run_record_function(args, out)
        if "export" in parts:
            result["export_s"] = run_export(args, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
