"""trace_view.pftrace decoded with Perfetto's own trace protos (the perfetto
package's perfetto_trace_pb2): its tracks, names, slices, nesting, counters
and flows are those of trace_view.json, and it is complete where the JSON
trace was cut to its size limit."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import profiled_run, trace_events


pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4


class Decoded:
    """The trace's packets, read the way Perfetto reads them: interned names
    and incremental timestamps per sequence, tracks by uuid."""

    def __init__(self, path: Path) -> None:
        trace = pb.Trace()
        trace.ParseFromString(path.read_bytes())
        packets = []
        self.compressed = 0
        for p in trace.packet:
            if p.HasField("compressed_packets"):  # a batch: a Trace's bytes, zlib-deflated
                batch = pb.Trace()
                batch.ParseFromString(zlib.decompress(p.compressed_packets))
                packets += batch.packet
                self.compressed += 1
            else:
                packets.append(p)
        self.packets = len(packets)
        self.tracks: dict[int, pb.TrackDescriptor] = {}
        self.slices: list[tuple[int, str, int, int, int]] = []  # tid, name, start, end, depth
        self.counters: collections.Counter = collections.Counter()  # track name -> values
        self.global_slices: list[tuple[str, str, int, int]] = []  # track name, name, start, end
        self.flows_out: list[int] = []
        self.flows_in: list[int] = []
        names: dict[tuple[int, int], str] = {}
        clocks: dict[int, int] = {}  # sequence -> its incremental clock's last value
        defaults: dict[int, int] = {}  # sequence -> default track
        open_by_seq: dict[int, list[tuple[int, str, int]]] = collections.defaultdict(list)
        open_by_track: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
        events = []
        for p in packets:
            seq = p.trusted_packet_sequence_id
            if p.HasField("track_descriptor"):
                self.tracks[p.track_descriptor.uuid] = p.track_descriptor
            if p.HasField("trace_packet_defaults"):
                assert p.trace_packet_defaults.timestamp_clock_id == 64
                defaults[seq] = p.trace_packet_defaults.track_event_defaults.track_uuid
            if p.HasField("clock_snapshot"):
                [snap] = [c for c in p.clock_snapshot.clocks if c.clock_id == 64]
                assert snap.is_incremental
                clocks[seq] = snap.timestamp
            for n in p.interned_data.event_names:
                names[(seq, n.iid)] = n.name
            if not p.HasField("track_event"):
                continue
            e = p.track_event
            if seq in clocks:  # a thread's sequence: deltas on its clock
                clocks[seq] += p.timestamp
                ts = clocks[seq]
            else:
                ts = p.timestamp
            track = e.track_uuid or defaults[seq]
            name = names[(seq, e.name_iid)] if e.name_iid else e.name
            events.append((seq, ts, e.type, track, name, e))
        for seq, ts, kind, track, name, e in events:
            if kind == BEGIN and seq in clocks:
                open_by_seq[seq].append((track, name, ts))
                self.flows_out += list(e.flow_ids)
                self.flows_in += list(e.terminating_flow_ids)
            elif kind == END and seq in clocks:
                assert open_by_seq[seq], "an end without a begin"
                t, n, start = open_by_seq[seq].pop()
                assert ts >= start
                self.slices.append((self.tracks[t].thread.tid, n, start, ts, len(open_by_seq[seq])))
            elif kind == BEGIN:  # the process's own tracks: absolute times
                open_by_track[track].append((name, ts))
            elif kind == END:
                n, start = open_by_track[track].pop()
                self.global_slices.append((self.tracks[track].name, n, start, ts))
            elif kind == COUNTER:
                self.counters[self.tracks[track].name] += 1
        assert all(not stack for stack in open_by_seq.values()), "slices left open"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, batches: list) -> Path:
    run = profiled_run(tmp_path_factory.mktemp("pftrace"), batches, active=60)
    return run


def test_the_protobuf_trace_has_the_json_traces_slices_tracks_counters_and_flows(run: Path) -> None:
    decoded = Decoded(run / "PROFILER_OUTPUT" / "trace_view.pftrace")
    events = trace_events(run)
    info = json.loads((run / "profiler_info.json").read_text())
    processes = [t for t in decoded.tracks.values() if t.HasField("process")]
    assert [p.process.pid for p in processes] == [info["pid"]]
    # Every thread slice, with its thread, name, start and end (JSON: us with ns decimals).
    json_slices = sorted((e["tid"], e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
                         for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"))
    ours = sorted((tid, name, start, end) for tid, name, start, end, _ in decoded.slices)
    assert len(ours) == len(json_slices) > 1000
    assert ours == json_slices
    assert sum(1 for s in ours if s[1].startswith("ProfilerStep#")) == 60
    # Nesting: operators inside their step on the main thread.
    depth = {(s[0], s[1], s[2]): s[4] for s in decoded.slices}
    step = next(s for s in decoded.slices if s[1].startswith("ProfilerStep#"))
    inside = [s for s in decoded.slices if s[0] == step[0] and step[2] <= s[2] and s[3] <= step[3] and s != step]
    assert inside and all(depth[(s[0], s[1], s[2])] > step[4] for s in inside)
    # Thread tracks carry their thread's id.
    assert {s[0] for s in ours} <= {t.thread.tid for t in decoded.tracks.values() if t.HasField("thread")}
    # Memory: the allocator's totals, one counter value per report and track.
    reports = sum(1 for e in events if e.get("name") == "[memory]")
    assert reports > 0
    assert decoded.counters["Memory allocated (CPU)"] == reports
    assert decoded.counters["Memory reserved (CPU)"] == reports
    # Forward-backward flows: one id out of a forward operator, into its autograd node.
    json_flows = sum(1 for e in events if e.get("cat") == "fwdbwd" and e.get("ph") == "s")
    assert json_flows > 0
    assert sorted(decoded.flows_out) == sorted(decoded.flows_in) and len(decoded.flows_out) == json_flows


def test_the_critical_path_track_is_the_json_traces(run: Path) -> None:
    decoded = Decoded(run / "PROFILER_OUTPUT" / "trace_view.pftrace")
    ours = sorted((name, start, end) for track, name, start, end in decoded.global_slices if track == "Critical path")
    json_path = sorted((e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
                       for e in trace_events(run) if e.get("cat") == "critical_path" and e.get("ph") == "X")
    assert len(ours) >= 60  # a row a step at least
    assert ours == json_path


def test_a_run_cut_in_the_json_trace_is_whole_in_the_protobuf_trace(run: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run), "--trace-limit-mb", "1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "was cut to stay under 1 MiB" in result.stderr + result.stdout
    json_steps = {e["name"] for e in trace_events(run) if e.get("name", "").startswith("ProfilerStep#")}
    decoded = Decoded(run / "PROFILER_OUTPUT" / "trace_view.pftrace")
    steps = {s[1] for s in decoded.slices if s[1].startswith("ProfilerStep#")}
    assert len(json_steps) < 60 and len(steps) == 60
    size = (run / "PROFILER_OUTPUT" / "trace_view.pftrace").stat().st_size
    # Two small packets a slice, deflated; the memory counters' values count as events too.
    events = len(decoded.slices) + sum(decoded.counters.values())
    assert decoded.compressed > 0 and size / events < 12


def test_trace_format_chooses_the_files(run: Path) -> None:
    out = run / "PROFILER_OUTPUT"
    subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run), "--trace-format", "perfetto"],
                   check=True, capture_output=True, timeout=300)
    assert (out / "trace_view.pftrace").exists() and not (out / "trace_view.json").exists()
    subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run), "--trace-format", "json"],
                   check=True, capture_output=True, timeout=300)
    assert (out / "trace_view.json").exists() and not (out / "trace_view.pftrace").exists()
    bad = subprocess.run([sys.executable, "-m", "trainprof", "analyse", str(run), "--trace-format", "svg"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "--trace-format needs json, perfetto or json,perfetto" in bad.stderr
