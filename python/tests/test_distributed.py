"""torch.distributed (Gloo, real processes): every call recorded as
communication with its bytes, group, sequence and peer; the ranks' runs
matched by the cluster analysis; the DDP demo's slow rank named with its
cause."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES, FASHION_MNIST, assert_outputs_do_not_depend_on_threads, run_dirs

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with Gloo is not available", allow_module_level=True)

# Three ranks; group "1" is world ranks [0, 2]. What each rank calls, in order.
CALLS = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist, trainprof
    rank, out = int(os.environ["RANK"]), sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    pair = dist.new_group([0, 2])
    level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
    with trainprof.profile(experimental_config=level1,
                           on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}")):
        t = torch.ones(1000)                              # 4000 bytes
        dist.all_reduce(t)                                # world #0
        dist.broadcast(t, src=1)                          # world #1, root 1
        parts = [torch.empty(250) for _ in range(3)]
        dist.all_gather(parts, torch.ones(250))           # world #2, 1000 bytes contributed
        dist.barrier()                                    # world #3, 0 bytes
        dist.all_reduce(t, async_op=True).wait()          # world #4, in flight
        if rank in (0, 2):
            dist.all_reduce(torch.ones(100, dtype=torch.float64), group=pair)  # pair #0, 800 bytes
        if rank == 0:
            dist.send(torch.ones(64), dst=2, tag=7)       # 256 bytes to world rank 2
        elif rank == 2:
            dist.recv(torch.empty(64), src=0, tag=7)
    dist.destroy_process_group()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SHIFT_NS = 300_000_000  # rank 1's wall clock runs this far ahead (TRAINPROF_TEST_CLOCK_SHIFT_NS)


def run_ranks(script: Path, out: Path, world: int) -> None:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    shifted = {1: {"TRAINPROF_TEST_CLOCK_SHIFT_NS": str(SHIFT_NS)}}
    procs = [subprocess.Popen([sys.executable, str(script), str(out)], env=dict(env, RANK=str(r), **shifted.get(r, {})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"rank {r}: {err}"


def assert_aligned_to_the_shift(report: str) -> None:
    """The cluster report removed rank 1's shift, as measured: within the
    error bound it gives (a loaded machine widens it, the truth stays in it)."""
    m = re.search(r"Clocks: aligned to rank 0 \(offsets up to ([0-9.]+) ms removed, within \+-([0-9.]+) us\)", report)
    assert m, report
    offset_ns, error_ns = float(m[1]) * 1e6, float(m[2]) * 1e3
    assert abs(offset_ns - SHIFT_NS) <= error_ns + 1000, report  # + the printed rounding


def summary_of(out: Path, rank: int) -> dict:
    [run] = [p for p in out.glob("*_trainprof") if json.loads((p / "profiler_info.json").read_text())["rank"] == rank]
    return json.loads((run / "PROFILER_OUTPUT" / "rank_summary.json").read_text())


@pytest.fixture(scope="module")
def calls_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("gloo")
    script = tmp / "calls.py"
    script.write_text(CALLS)
    out = tmp / "out"
    run_ranks(script, out, 3)
    return out


def test_each_call_is_recorded_with_its_bytes_group_sequence_and_peer(calls_run: Path) -> None:
    for rank in range(3):
        s = summary_of(calls_run, rank)
        info = json.loads(next(p for p in calls_run.glob(f"*/profiler_info.json")
                               if json.loads(p.read_text())["rank"] == rank).read_text())
        assert info["world_size"] == 3  # torch.distributed's rank and world name the run
        groups = {g["name"]: g for g in s["groups"]}
        assert groups["0"]["ranks"] == [[0, 2]]  # runs of consecutive ranks as [first, last]
        if rank != 1:
            assert groups["1"]["ranks"] == [0, 2]  # a subgroup's members as world ranks
        assert all(g["origin"] == "torch.distributed gloo" for g in groups.values())
        names = [g["name"] for g in s["groups"]]
        # [group, sequence, operation, start, end, bytes, step, in flight]
        seen = [(names[c[0]], c[1], c[2], c[5], c[7]) for c in s["collectives"]]
        expected = [("0", 0, "allreduce", 4000, 0), ("0", 1, "broadcast", 4000, 0), ("0", 2, "allgather", 1000, 0),
                    ("0", 3, "barrier", 0, 0), ("0", 4, "allreduce", 4000, 1)]
        if rank != 1:
            expected.append(("1", 0, "allreduce", 800, 0))
        assert seen == expected
        for c in s["collectives"]:
            assert c[4] >= c[3]  # from the call to the end of the backend's work
        # [group, operation, start, end, bytes, step, peer, tag, send]
        transfers = [(names[t[0]], t[1], t[4], t[6], t[7], t[8]) for t in s["transfers"]]
        assert transfers == {0: [("0", "send", 256, 2, 7, 1)], 1: [], 2: [("0", "recv", 256, 0, 7, 0)]}[rank]


def test_each_ranks_outputs_are_the_same_on_any_number_of_threads(calls_run: Path) -> None:
    for run in run_dirs(calls_run):
        assert (run / "PROFILER_OUTPUT" / "rank_summary.json").exists()
        assert_outputs_do_not_depend_on_threads(run)


def test_the_cluster_pass_matches_every_collective_of_the_ranks(calls_run: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(calls_run)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Cluster: 3 of 3 ranks, 6 collectives matched" in result.stdout  # 5 on the world, 1 on the pair
    assert "recorded by some members only" not in result.stdout
    assert "slowest 0->2" in result.stdout  # the send, paired with its receive across the two runs
    matrix = json.loads((calls_run / "cluster_analysis_output" / "cluster_communication_matrix.json").read_text())
    assert set(matrix) == {"(0, 1, 2)", "(0, 2)"}
    link = matrix["(0, 2)"]["step0"]["send-total@0"]["0-2"]
    assert link["Transit Size(MB)"] == pytest.approx(256 / 1e6)
    for rank in range(3):
        [run] = [p for p in calls_run.glob("*_trainprof")
                 if json.loads((p / "profiler_info.json").read_text())["rank"] == rank]
        comm = json.loads((run / "PROFILER_OUTPUT" / "communication.json").read_text())
        ops = set().union(*(step["collective"].keys() for step in comm.values()))
        assert any(op.startswith("allreduce") and op.endswith("@0") for op in ops)
        assert any(op.startswith("barrier") for op in ops)


def test_a_split_cluster_database_opens_as_the_one_file_it_replaces(calls_run: Path, tmp_path: Path) -> None:
    """Spread over 3 MPI processes with --database-split-rows 1, the
    communication rows go to part files; trainprof.open_cluster_database
    joins them into the rows the one-process pass writes, and names a part
    that is missing."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("OpenMPI's mpirun is not installed (scripts/install_deps.sh installs it)")
    # The package's command is built without MPI; the build's has it.
    built = Path(__file__).resolve().parents[2] / "build" / "bin" / "trainprof"
    if not built.exists():
        pytest.skip(f"{built} is not built (cmake --preset default && cmake --build --preset default)")
    import trainprof
    runs = tmp_path / "runs"
    shutil.copytree(calls_run, runs, ignore=shutil.ignore_patterns("cluster_analysis_output"))
    done = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(runs)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    everything = "SELECT * FROM communication ORDER BY rank, group_id, sequence, transfer, start_ns"
    with contextlib.closing(trainprof.open_cluster_database(runs)) as one:
        expected = one.execute(everything).fetchall()
    assert len(expected) >= 3 * 6  # every rank's 6 collectives, and the two sides of the send
    done = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "3", str(built), "cluster", "--mpi",
                           "--database-split-rows", "1", str(runs)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = runs / "cluster_analysis_output"
    assert sorted(p.name for p in out.glob("trainprof.db.part*")) == ["trainprof.db.part1", "trainprof.db.part2"]
    db = trainprof.open_cluster_database(out / "trainprof.db")
    try:
        assert db.execute(everything).fetchall() == expected
        in_main = db.execute("SELECT COUNT(*) FROM main.communication").fetchone()[0]
        assert 0 < in_main < len(expected)  # rank 0's rows only
    finally:
        db.close()
    (out / "trainprof.db.part2").unlink()
    with pytest.raises(ValueError, match="cannot read .*trainprof.db.part2"):
        trainprof.open_cluster_database(runs)


def test_clock_offsets_to_rank_0_are_recovered_within_their_bound(calls_run: Path) -> None:
    for p in calls_run.glob("*_trainprof/profiler_info.json"):
        info = json.loads(p.read_text())
        sync = info["clock_sync"]  # measured through torch.distributed's store, at start and at stop
        assert sync["reference_rank"] == 0 and len(sync["points"]) == 2
        truth = SHIFT_NS if info["rank"] == 1 else 0
        for point in sync["points"]:
            assert abs(point["offset_ns"] - truth) <= point["error_ns"], (info["rank"], point)
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(calls_run)],
                            capture_output=True, text=True, timeout=300)
    assert_aligned_to_the_shift(result.stdout)


def test_a_rank_0_that_does_not_profile_leaves_the_others_unaligned_not_stuck(tmp_path: Path) -> None:
    script = tmp_path / "only_rank1.py"
    script.write_text(textwrap.dedent("""
        import os, sys, torch, torch.distributed as dist
        rank = int(os.environ["RANK"])
        dist.init_process_group("gloo")
        t = torch.ones(10)
        if rank == 1:  # rank 0 never answers the clock measurement
            import trainprof
            level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
            with trainprof.profile(experimental_config=level1,
                                   on_trace_ready=trainprof.tensorboard_trace_handler(sys.argv[1])):
                for _ in range(3):
                    dist.all_reduce(t)
                from trainprof import _distributed
                print("measuring:", any(m.is_alive() for m in _distributed._threads), flush=True)
        else:
            for _ in range(3):
                dist.all_reduce(t)
        dist.barrier()
        dist.destroy_process_group()
    """))
    out = tmp_path / "out"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(script), str(out)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    # The training went on while the measurement waited for rank 0 (rank 0
    # is held in its barrier until rank 1 gets there).
    assert "measuring: True" in outputs[1][0]
    assert "clock alignment with rank 0 failed" in outputs[1][1]
    info = json.loads(next(out.glob("*_trainprof/profiler_info.json")).read_text())
    assert info["rank"] == 1
    sync = info["clock_sync"]  # not aligned, and not pretended: it says why
    assert sync["points"] == []
    assert sync["exchanges"]["started"] == sync["exchanges"]["failed"] == 2
    assert sync["exchanges"]["running"] == 0
    # Rank 0 never answered (a time-out, or the store gone with its process).
    assert all(f.startswith(("DistStoreError", "DistNetworkError")) for f in sync["exchanges"]["failures"]), sync


# Each rank's clock exchanges with rank 0 are held until its profile has
# stopped and been analysed (the race a loaded machine makes: the exchange
# begun at start still running at stop); with "fail", rank 1's exchanges
# then fail.
HELD_EXCHANGE = textwrap.dedent("""
    import os, sys, threading, torch, torch.distributed as dist, trainprof
    from trainprof import _distributed
    rank, out, mode = int(os.environ["RANK"]), sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    stopped = threading.Event()
    measure = _distributed._ping_pong
    _distributed._WAIT = 3.0  # rank 0 waits this long for the pings that never come

    def held(*args):
        stopped.wait(120)
        if mode == "fail" and rank == 1:
            raise TimeoutError("no answer from rank 0")
        measure(*args)

    _distributed._ping_pong = held
    level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
    with trainprof.profile(experimental_config=level1,
                           on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}")):
        t = torch.ones(10)
        for _ in range(3):
            dist.all_reduce(t)
    stopped.set()
    dist.barrier()
""")


def held_exchange_run(tmp_path: Path, mode: str) -> tuple[Path, dict[int, Path]]:
    script = tmp_path / "held.py"
    script.write_text(HELD_EXCHANGE)
    out = tmp_path / "out"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    shifted = {1: {"TRAINPROF_TEST_CLOCK_SHIFT_NS": str(SHIFT_NS)}}
    procs = [subprocess.Popen([sys.executable, str(script), str(out), mode],
                              env=dict(env, RANK=str(r), **shifted.get(r, {})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = {json.loads((p / "profiler_info.json").read_text())["rank"]: p for p in out.glob("*_trainprof")}
    assert sorted(runs) == [0, 1]
    return out, runs


def test_a_run_analysed_before_its_clock_exchange_ended_is_analysed_again_by_the_cluster_pass(
        tmp_path: Path) -> None:
    out, runs = held_exchange_run(tmp_path, "ok")
    first = json.loads((runs[1] / "PROFILER_OUTPUT" / "profiler_info.json").read_text())["analysis"]
    assert any("still running when the run was analysed" in w for w in first["warnings"]), first["warnings"]
    assert first["clock_sync"]["points"] == []  # what that analysis had
    summary = json.loads((runs[1] / "PROFILER_OUTPUT" / "rank_summary.json").read_text())
    assert not summary["clock_aligned"] and "still running" in summary["clock_problem"]
    info = json.loads((runs[1] / "profiler_info.json").read_text())
    assert len(info["clock_sync"]["points"]) == 2 and info["clock_sync"]["exchanges"]["running"] == 0
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_aligned_to_the_shift(result.stdout)
    assert "still running" not in result.stdout
    summary = json.loads((runs[1] / "PROFILER_OUTPUT" / "rank_summary.json").read_text())
    assert summary["clock_aligned"] and summary["clock_problem"] == ""
    again = json.loads((runs[1] / "PROFILER_OUTPUT" / "profiler_info.json").read_text())["analysis"]
    assert again["clock_sync"] == info["clock_sync"]
    # Analysed on the alignment it has now: a second pass changes nothing.
    before = (runs[1] / "PROFILER_OUTPUT" / "profiler_info.json").stat().st_mtime_ns
    subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(out)], check=True, capture_output=True,
                   timeout=300)
    assert (runs[1] / "PROFILER_OUTPUT" / "profiler_info.json").stat().st_mtime_ns == before


def test_a_rank_whose_clock_exchange_failed_says_so_in_its_run_and_the_cluster_report(tmp_path: Path) -> None:
    out, runs = held_exchange_run(tmp_path, "fail")
    sync = json.loads((runs[1] / "profiler_info.json").read_text())["clock_sync"]
    assert sync["points"] == []
    assert sync["exchanges"] == {"started": 2, "running": 0, "failed": 2,
                                 "failures": ["TimeoutError: no answer from rank 0"] * 2}
    reference = json.loads((runs[0] / "profiler_info.json").read_text())["clock_sync"]
    assert [p["offset_ns"] for p in reference["points"]] == [0, 0]  # rank 0 is the reference
    assert reference["exchanges"]["failed"] == 2
    assert reference["exchanges"]["failures"] == ["RuntimeError: rank 1 did not ping within 3 s (DistStoreError)"] * 2
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ("rank 1: 2 of 2 clock exchange(s) with the reference rank failed "
            "(TimeoutError: no answer from rank 0)") in result.stdout, result.stdout
    analysis = json.loads((out / "cluster_analysis_output" / "cluster_analysis.json").read_text())
    assert not analysis["clocks_aligned"]
    assert [p["rank"] for p in analysis["clock_problems"]] == [0, 1]


def test_level0_records_calls_as_operators_only(tmp_path: Path) -> None:
    script = tmp_path / "level0.py"
    script.write_text(CALLS.replace("experimental_config=level1,", ""))
    out = tmp_path / "out"
    run_ranks(script, out, 3)
    # LibTorch gave no inputs at Level0: no communication, so no rank summary.
    assert not list(out.glob("*_trainprof/PROFILER_OUTPUT/rank_summary.json"))
    trace = next(out.glob("*_trainprof/PROFILER_OUTPUT/trace_view.json")).read_text()
    assert "c10d::allreduce_" in trace  # still in the timeline as an operator


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
@pytest.mark.parametrize("slow, cause", [(["--slow-rank", "2"], "compute"),
                                         (["--slow-rank", "1", "--slow-data"], "data loading")])
def test_ddp_demo_names_the_slow_rank_and_its_cause(tmp_path: Path, slow: list, cause: str) -> None:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(EXAMPLES / "fashion_mnist_ddp.py"), "--out", str(out),
                             "--ranks", "4", "--steps", "20", "--skip-first", "4", "--active", "8",
                             "--slow-ms", "100", *slow],  # far above a loaded 2-core machine's noise
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    slow_rank = slow[1]
    assert f"Straggler: rank {slow_rank}." in result.stdout, result.stdout
    assert f"Cause: {cause}." in result.stdout, result.stdout
    assert (out / "cluster_analysis_output" / "cluster_step_trace_time.csv").exists()
    if cause == "compute":  # the guide quotes this report
        from test_docs import assert_printed_as_quoted
        assert_printed_as_quoted("docs/GUIDE.md", "a slow rank", result.stdout)
    if shutil.which("chromium") is not None:
        assert_the_report_shows_the_straggler(out, int(slow_rank), cause, tmp_path)


def assert_the_report_shows_the_straggler(out: Path, slow_rank: int, cause: str, tmp_path: Path) -> None:
    """The job's report opens with the cluster: the straggler finding first, and the straggler's late steps drawn
    from cluster_step_trace_time.csv (its Computing, or its Data Wait when data loading is the cause)."""
    from test_report import read_csv, render
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    rendered, dom = render(out / "report.html", f"report-cluster-{cause.split()[0]}", tmp_path)
    assert rendered.index('<section id="cluster">') < rendered.index('<section class="run"')
    cards = re.findall(r'<div class="card ([a-z-]+)">', rendered)
    assert cards[:3] == ["findings-card", "straggler-card", "heat-card"], cards
    assert re.findall(r'<li data-rule="([a-z_]+)">', rendered)[0] == "straggler"
    assert dom.elements["straggler-cause"]["data-rank"] == str(slow_rank)
    analysis = json.loads((out / "cluster_analysis_output" / "cluster_analysis.json").read_text())
    steps = read_csv(out / "cluster_analysis_output" / "cluster_step_trace_time.csv")
    metric = steps[0].index("Data Wait" if cause == "data loading" else "Computing")
    own = {int(r[0]): float(r[metric]) for r in steps[1:] if r[1] == "rank" and int(r[2]) == slow_rank}
    bars = re.findall(r'<rect class="(late|on-time)" [^>]*data-step="(\d+)" data-us="([0-9.]+)"', rendered)
    assert sorted(int(step) for kind, step, _ in bars if kind == "late") == analysis["straggler_steps"]
    assert {int(step): float(us) for _, step, us in bars} == pytest.approx(own, abs=1e-3)
    # The heat map shown first is of the same metric.
    assert re.findall(r'<svg class="heat-map chart" data-metric="([^"]+)"', rendered)[0] == steps[0][metric]


@pytest.mark.skipif(__import__("shutil").which("chromium") is None, reason="chromium is not installed")
def test_the_report_of_the_ranks_shows_each_ranks_waiting(calls_run: Path) -> None:
    from test_report import Tables, chromium, console_lines
    subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(calls_run)], check=True, capture_output=True,
                   timeout=300)
    result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(calls_run)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "report of 3 run(s)" in result.stdout, result.stderr
    rendered = chromium("--dump-dom", (calls_run / "report.html").as_uri())
    assert console_lines(rendered.stderr) == []
    dom = Tables()
    dom.feed(rendered.stdout)
    analysis = json.loads((calls_run / "cluster_analysis_output" / "cluster_analysis.json").read_text())
    rows = {int(r[0]): r for r in dom.tables["cluster-table"][1:]}
    assert sorted(rows) == [0, 1, 2]
    for r in analysis["per_rank"]:
        assert rows[r["rank"]][1] == f"{r['waited_ns'] / 1e6:.3f}"
        assert rows[r["rank"]][2] == f"{r['others_waited_for_it_ns'] / 1e6:.3f}"
    assert len(dom.tables["step-table"]) >= 2  # and each rank's own sections follow


def test_the_cluster_timeline_as_perfetto_protobuf_has_the_json_slices_and_flows(calls_run: Path) -> None:
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(calls_run)], check=True, capture_output=True,
                   timeout=300)
    out = calls_run / "cluster_analysis_output"
    events = json.loads((out / "cluster_trace_view.json").read_text())["traceEvents"]
    trace = pb.Trace()
    trace.ParseFromString((out / "cluster_trace_view.pftrace").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    process_of = {u: t.thread.pid for u, t in tracks.items() if t.HasField("thread")}
    assert sorted(t.process.pid for t in tracks.values() if t.HasField("process")) == [0, 1, 2]
    begins = [(p.track_event, p.timestamp) for p in trace.packet
              if p.HasField("track_event") and p.track_event.type == 1]
    ours = sorted((process_of[e.track_uuid], e.name, ts) for e, ts in begins)
    # JSON: ts in us with ns decimals from the same origin; a process per rank.
    theirs = sorted((e["pid"], e["name"], round(e["ts"] * 1000)) for e in events if e.get("ph") == "X")
    assert ours == theirs and len(ours) > 15
    flows_out = [f for e, _ in begins for f in e.flow_ids]
    flows_in = [f for e, _ in begins for f in e.terminating_flow_ids]
    assert len(flows_out) == len(set(flows_out))  # one id a flow
    assert sorted(flows_out) == sorted(flows_in)
    assert len(flows_in) == sum(1 for e in events if e.get("ph") == "s") > 0


# Each rank starts profiling at its own step (rank r at step r, as a
# profile started mid-epoch or a dynamic config read at different times
# would); rank 2 is slow before every allreduce.
LATE_STARTS = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist, trainprof
    rank, out = int(os.environ["RANK"]), sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
    prof = trainprof.profile(experimental_config=level1, start_profile=False,
                             on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}"))
    t = torch.ones(1000)
    for step in range(10):
        if step == rank:
            prof.start()
        if rank == 2:
            time.sleep(0.05)
        dist.all_reduce(t)
        if step >= rank:
            prof.step()
    prof.stop()
    dist.destroy_process_group()
""")


def test_ranks_that_start_profiling_at_different_steps_match_every_collective(tmp_path: Path) -> None:
    script = tmp_path / "late.py"
    script.write_text(LATE_STARTS)
    out = tmp_path / "out"
    run_ranks(script, out, 4)
    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # Steps 3-9 every rank recorded; steps 0-2 only those that had started.
    assert "Cluster: 4 of 4 ranks, 7 collectives matched across their groups, 3 recorded by some members only" \
        in result.stdout, result.stdout
    assert "Collective numbering: rank 1 in group 0 +1, rank 2 in group 0 +2, rank 3 in group 0 +3" \
        in result.stdout, result.stdout
    assert "Not matched" not in result.stdout
    assert "Straggler: rank 2." in result.stdout, result.stdout
    analysis = json.loads((out / "cluster_analysis_output" / "cluster_analysis.json").read_text())
    assert [(s["rank"], s["offset"]) for s in analysis["numbering"]["shifted"]] == [(1, 1), (2, 2), (3, 3)]


# Four ranks under the flight recorder; rank 3 never enters the 30th
# allreduce (step 29) for 12 s while the others wait inside it.
HANG = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist, trainprof
    rank, out = int(os.environ["RANK"]), sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def busy_elsewhere():  # where the hung rank is: its stack in the report names this
        time.sleep(12)

    with trainprof.flight_recorder(out, ring_mb=16, hang_timeout_s=2, slow_step_factor=0, dump_signal=None,
                                   profile_communication=True) as recorder:
        for step in range(32):
            optimizer.zero_grad()
            model(torch.randn(8, 16)).sum().backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            if rank == 3 and step == 29:
                busy_elsewhere()
            dist.all_reduce(grads)  # one collective per step: #29 in step 29
            optimizer.step()
            recorder.step()
    dist.destroy_process_group()
""")


def test_a_hang_of_one_gloo_rank_is_dumped_by_all_and_the_missing_rank_named(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    out = tmp_path / "flight"
    run_ranks(script, out, 4)
    incidents = list(out.glob("flight_incident_*"))
    assert [p.name.endswith("_hang_29") for p in incidents] == [True], incidents
    runs = sorted(out.rglob("*_trainprof"))
    assert len(runs) == 4 and all(r.parent == incidents[0] for r in runs), runs  # one dump per rank, together
    ranks = set()
    for run in runs:
        info = json.loads((run / "profiler_info.json").read_text())
        fired = info["flight_recorder"]
        ranks.add(info["rank"])
        assert fired["trigger"] == "hang" and fired["incident"]["key"] == "hang_29", fired
        assert fired["since_last_step_ns"] < 4e9, fired  # the hang timeout and 2 s
        assert (run / "hang_stacks.txt").exists() and (run / "native_stacks.txt").exists()
    assert ranks == {0, 1, 2, 3}
    report = (incidents[0] / "cluster_analysis_output" / "straggler_report.txt").read_text()
    assert report.startswith("Flight recorder incident 'hang_29': hang, announced by rank "), report
    assert "Stuck collective: allreduce #29 of group '0': rank(s) 0, 1, 2 entered it and wait inside; " \
           "rank(s) 3 never entered it." in report, report
    # The ranks' clocks aligned (rank 1's is shifted here), every collective before the hung one matched.
    assert "Cluster: 4 of 4 ranks, 29 collectives matched across their groups." in report, report
    rank3 = report.index("Rank 3 (last collective entered in the group: #28) was at:")
    assert "in busy_elsewhere" in report[rank3:], report
    incident = json.loads((incidents[0] / "cluster_analysis_output" / "cluster_analysis.json").read_text())["incident"]
    assert incident["stuck_collectives"][0]["missing"] == [3], incident
    if shutil.which("chromium") is not None:
        # The incident's report opens with it: who waits inside the stuck collective, who never came.
        from test_report import render
        result = subprocess.run([sys.executable, "-m", "trainprof", "report", str(incidents[0])], capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        rendered, dom = render(incidents[0] / "report.html", "report-incident", tmp_path)
        assert re.findall(r'<div class="card ([a-z-]+)">', rendered)[:2] == ["findings-card", "incident-card"]
        stuck = re.search(r'<div class="stuck" data-name="allreduce" data-sequence="29">(.*?)</div></div>', rendered,
                          re.S).group(1)
        assert re.findall(r'<span class="inside">rank (\d+)</span>', stuck) == ["0", "1", "2"]
        assert re.findall(r'<span class="missing">rank (\d+) \(last entered #(\d+)\)</span>', stuck) == [("3", "28")]


# Two ranks, the slow one (argv[2]) sleeping before each allreduce, with no
# launcher's job id in the environment (as under torchrun without
# --standalone or --rdzv-id): rank 0 names the process group through the store.
SLOW_RANK = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist, trainprof
    rank, out, slow = int(os.environ["RANK"]), sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    level1 = trainprof._ExperimentalConfig(profiler_level=trainprof.ProfilerLevel.Level1)
    with trainprof.profile(experimental_config=level1,
                           on_trace_ready=trainprof.tensorboard_trace_handler(out, worker_name=f"rank{rank}")) as prof:
        t = torch.ones(1000)
        for step in range(6):
            if rank == slow:
                time.sleep(0.05)
            dist.all_reduce(t)
            prof.step()
    dist.destroy_process_group()
""")

LAUNCHER_JOB_IDS = ("TRAINPROF_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                    "SLURM_JOB_ID", "LSB_JOBID", "PBS_JOBID", "FLUX_JOB_ID")


def test_two_torch_jobs_in_one_directory_are_told_apart_by_the_name_rank_0_gave(tmp_path: Path) -> None:
    """Without a job id the second job's runs would pass for further cycles
    of the first's ranks (same world, apart in time) and their collectives'
    numbers would meet. Each job's ranks record rank 0's name for it; the
    cluster pass analyses the later job (as many ranks) and names the first,
    left out; --job-id analyses the first."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_RANK)
    out = tmp_path / "out"
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_JOB_IDS}
    jobs = []
    for slow in (0, 1):
        env = dict(base, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
        before = set(out.glob("*_trainprof"))
        procs = [subprocess.Popen([sys.executable, str(script), str(out), str(slow)], env=dict(env, RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        for r, p in enumerate(procs):
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"rank {r}: {err}"
        infos = [json.loads((run / "profiler_info.json").read_text()) for run in set(out.glob("*_trainprof")) - before]
        assert sorted(i["rank"] for i in infos) == [0, 1]
        assert {i.get("job_source") for i in infos} == {"torch.distributed store"}, infos
        [job] = {i["job"] for i in infos}  # the same on both ranks
        assert re.fullmatch(r"torch\.distributed-[0-9a-f]{16}", job)
        jobs.append(job)
    assert jobs[0] != jobs[1]

    result = subprocess.run([sys.executable, "-m", "trainprof", "cluster", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"analysed job '{jobs[1]}' (2 rank(s), 2 run(s))" in result.stdout, result.stdout
    assert f"left out '{jobs[0]}' (2 rank(s), 2 run(s))" in result.stdout, result.stdout
    assert "Straggler: rank 1." in result.stdout, result.stdout
    analysis = json.loads((out / "cluster_analysis_output" / "cluster_analysis.json").read_text())
    assert [(j["job"], j["analysed"]) for j in analysis["jobs"]] == sorted([(jobs[0], False), (jobs[1], True)])
    first = subprocess.run([sys.executable, "-m", "trainprof", "cluster", "--job-id", jobs[0], str(out)],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "Straggler: rank 0." in first.stdout, first.stdout


# Two DDP ranks under the zero-code flight recorder, no line of trainprof in
# the script; with a planted step (argv[2]), rank 1's loss turns NaN there,
# and through the gradients' all-reduce every rank's parameters after it.
NAN_LOSS = textwrap.dedent("""
    import math, os, sys, torch, torch.distributed as dist
    rank, planted = int(os.environ["RANK"]), int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(30):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if rank == 1 and step == planted:
            loss = loss * math.nan
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()
""")


def run_nan_loss(tmp_path: Path, name: str, planted: int) -> Path:
    script = tmp_path / "nan_loss.py"
    script.write_text(NAN_LOSS)
    out = tmp_path / name
    options = {"start": True, "output_path": str(out), "flight_recorder": {"slow_step_factor": 0, "ring_mb": 16,
                                                                            "hang_timeout_s": 0, "dump_signal": 0}}
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               TRAINPROF_OPTIONS=json.dumps(options))
    procs = [subprocess.Popen([sys.executable, str(script), str(out), str(planted)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"rank {r}: {err}"
    return out


def test_a_nan_loss_on_one_rank_is_one_incident_naming_that_rank(tmp_path: Path) -> None:
    out = run_nan_loss(tmp_path, "planted", 20)
    incidents = list(out.glob("flight_incident_*"))
    assert [p.name.endswith("_non_finite_loss") for p in incidents] == [True], list(out.iterdir())
    runs = sorted(incidents[0].glob("*_trainprof"))
    assert len(runs) == 2, runs  # every rank dumped the same steps
    assert sorted(out.rglob("*_trainprof")) == runs  # and nothing else was written
    for run in runs:
        info = json.loads((run / "profiler_info.json").read_text())
        assert info["flight_recorder"]["trigger"] == "non_finite_loss", info["flight_recorder"]
        # The ring holds the step the loss went wrong in.
        with open(run / "PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
            assert "20" in {row["Step"] for row in csv.DictReader(f)}, run
        if info["rank"] == 1:
            assert info["flight_recorder"]["first_non_finite_loss"] == {"step": 20, "value": "nan"}
            with open(run / "step_health.csv", newline="") as f:
                losses = {row["Step"]: row["Loss"] for row in csv.DictReader(f)}
            assert losses["20"] == "nan" and math.isfinite(float(losses["19"])), losses
    report = (incidents[0] / "cluster_analysis_output" / "straggler_report.txt").read_text()
    assert "Non-finite loss: first at step 20, on rank(s) 1" in report, report


def test_a_clean_run_with_the_loss_checked_never_dumps(tmp_path: Path) -> None:
    out = run_nan_loss(tmp_path, "clean", -1)
    assert not list(out.rglob("*_trainprof")), list(out.rglob("*"))
