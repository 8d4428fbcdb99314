// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/cluster_trace.h"

#include "base/json_limits.h"
#include "exporter/perfetto_proto.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace trainprof::exporter {
namespace {

using analysis::CommTiming;

constexpr int kTrackTid = 1;
constexpr int kPathTid = 2;  // the job's critical path (analysis/cluster_path.h)

// Microseconds, the trace format's unit, with 3 decimals (ns).
std::string us(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
  return text;
}

class TraceWriter {
 public:
  // Times are written from `origin_ns` (wall clock): viewers read them as
  // doubles, which hold ns only for spans far shorter than the epoch.
  TraceWriter(const OutputPath& path, uint64_t origin_ns) : file_(path), origin_ns_(origin_ns) {
    buffer_ =
        "{\"displayTimeUnit\":\"ms\",\"trainprof\":{\"wall_clock_ns_at_ts_0\":" + std::to_string(origin_ns) +
        "},\"traceEvents\":[";
  }

  std::string at(uint64_t wall_ns) const { return us(wall_ns - std::min(wall_ns, origin_ns_)); }

  void event(const std::string& text) {
    if (!first_) buffer_ += ",\n";
    first_ = false;
    buffer_ += text;
    file_.drain(buffer_);
  }

  void metadata(int pid, const char* name, const std::string& value, int tid = kTrackTid) {
    event("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
          ",\"name\":\"" + name + "\",\"args\":{\"name\":" + base::json_text(nlohmann::json(value)) + "}}");
  }

  // A segment of the job's critical path on its rank's "Critical path"
  // track, with a flow from the segment before it when that was another
  // rank's.
  void path_segment(const analysis::ClusterPathSegment& s, const analysis::ClusterPathSegment* before) {
    event("{\"ph\":\"X\",\"cat\":\"critical_path\",\"pid\":" + std::to_string(s.rank) +
          ",\"tid\":" + std::to_string(kPathTid) + ",\"ts\":" + at(s.start_ns) + ",\"dur\":" + us(s.dur_ns) +
          ",\"name\":" + base::json_text(nlohmann::json(s.name)) + ",\"args\":{\"Step\":" +
          std::to_string(s.step) + ",\"Kind\":\"" + (s.communication ? "communication" : "work") + "\"}}");
    if (before == nullptr || before->rank == s.rank || before->step != s.step) return;
    std::string id = std::to_string(++flows_);
    event("{\"ph\":\"s\",\"cat\":\"critical_path\",\"name\":\"critical path\",\"id\":" + id +
          ",\"pid\":" + std::to_string(before->rank) + ",\"tid\":" + std::to_string(kPathTid) +
          ",\"ts\":" + at(before->start_ns) + "}");
    event("{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"critical_path\",\"name\":\"critical path\",\"id\":" + id +
          ",\"pid\":" + std::to_string(s.rank) + ",\"tid\":" + std::to_string(kPathTid) +
          ",\"ts\":" + at(s.start_ns) + "}");
  }

  void slice(const CommTiming& t) {
    uint64_t end = std::max(t.end_ns, t.start_ns);
    nlohmann::json args = {
        {"Group", t.group},
        {"Sequence", t.sequence},
        {"Bytes", t.bytes},
        {"Wait(ms)", static_cast<double>(t.wait_ns) / 1e6},
        {"Transit(ms)", static_cast<double>(end - t.start_ns - std::min(t.wait_ns, end - t.start_ns)) / 1e6}};
    if (t.transfer) args["Peer"] = t.peer;
    event("{\"ph\":\"X\",\"cat\":\"communication\",\"pid\":" + std::to_string(t.rank) +
          ",\"tid\":" + std::to_string(kTrackTid) + ",\"ts\":" + at(t.start_ns) +
          ",\"dur\":" + us(end - t.start_ns) + ",\"name\":" + base::json_text(nlohmann::json(t.operation)) +
          ",\"args\":" + base::json_text(args) + "}");
    if (t.wait_ns > 0) {
      event("{\"ph\":\"X\",\"cat\":\"communication\",\"pid\":" + std::to_string(t.rank) +
            ",\"tid\":" + std::to_string(kTrackTid) + ",\"ts\":" + at(t.start_ns) +
            ",\"dur\":" + us(std::min(t.wait_ns, end - t.start_ns)) + ",\"name\":\"wait\"}");
    }
  }

  // A flow from `from` (at `from_ns`, inside its slice) to `to` (at `to_ns`).
  void flow(const CommTiming& from, uint64_t from_ns, const CommTiming& to, uint64_t to_ns) {
    std::string id = std::to_string(++flows_);
    event("{\"ph\":\"s\",\"cat\":\"communication\",\"name\":\"matched\",\"id\":" + id +
          ",\"pid\":" + std::to_string(from.rank) + ",\"tid\":" + std::to_string(kTrackTid) +
          ",\"ts\":" + at(from_ns) + "}");
    event("{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"communication\",\"name\":\"matched\",\"id\":" + id +
          ",\"pid\":" + std::to_string(to.rank) + ",\"tid\":" + std::to_string(kTrackTid) +
          ",\"ts\":" + at(to_ns) + "}");
  }

  std::string finish() {
    buffer_ += "\n]}\n";
    file_.commit(buffer_);
    return file_.error();
  }

 private:
  OutputFile file_;
  std::string buffer_;
  bool first_ = true;
  uint64_t origin_ns_;
  uint64_t flows_ = 0;
};

}  // namespace

namespace {

// A flow arrow between the matched operations of two ranks.
struct Flow {
  const CommTiming* from;
  uint64_t from_ns;
  const CommTiming* to;
  uint64_t to_ns;
};

// Collectives by (group, sequence): from the last member to arrive to each
// other member (it released them); transfers by channel and order, as the
// cluster pass paired them (the wait it found is the other side's arrival:
// own start + wait).
std::vector<Flow> cluster_flows(const std::vector<CommTiming>& timings) {
  std::vector<Flow> flows;
  std::map<std::pair<std::string_view, int64_t>, std::vector<const CommTiming*>> collectives;
  for (const CommTiming& t : timings) {
    if (!t.transfer) collectives[{t.group, t.sequence}].push_back(&t);
  }
  for (const auto& [key, members] : collectives) {
    if (members.size() > kMaxFlowGroup) continue;
    const CommTiming* last =
        *std::max_element(members.begin(), members.end(),
                          [](const CommTiming* a, const CommTiming* b) { return a->start_ns < b->start_ns; });
    for (const CommTiming* m : members) {
      if (m != last) flows.push_back({last, last->start_ns, m, m->start_ns + m->wait_ns});
    }
  }
  // Transfers: the k-th send of (group, sender, receiver, tag) to the k-th
  // receive, as MPI delivers them (timings are in start order per rank).
  using Channel = std::tuple<std::string_view, int, int, int32_t>;
  std::map<Channel, std::pair<std::vector<const CommTiming*>, std::vector<const CommTiming*>>> channels;
  for (const CommTiming& t : timings) {
    if (!t.transfer || t.peer < 0 || t.tag < 0) continue;
    Channel c{t.group, t.sends ? t.rank : t.peer, t.sends ? t.peer : t.rank, t.tag};
    (t.sends ? channels[c].first : channels[c].second).push_back(&t);
  }
  for (auto& [channel, sides] : channels) {
    auto& [sends, receives] = sides;
    for (size_t k = 0; k < std::min(sends.size(), receives.size()); ++k) {
      const CommTiming& sent = *sends[k];
      const CommTiming& received = *receives[k];
      flows.push_back({&sent, sent.start_ns, &received,
                       std::max(received.start_ns, std::min(sent.start_ns, received.end_ns))});
    }
  }
  return flows;
}

uint64_t origin_of(const std::vector<CommTiming>& timings) {
  uint64_t origin = UINT64_MAX;
  for (const CommTiming& t : timings) origin = std::min(origin, t.start_ns);
  return origin == UINT64_MAX ? 0 : origin - origin % 1000000000;  // a whole second
}

}  // namespace

std::string write_cluster_trace(const std::vector<CommTiming>& timings,
                                const std::vector<analysis::ClusterPathSegment>& critical_path,
                                const std::map<int, std::string>& hosts, const OutputPath& path) {
  TraceWriter w(path, origin_of(timings));
  for (const auto& [rank, host] : hosts) {
    w.metadata(rank, "process_name", "rank " + std::to_string(rank) + " (" + host + ")");
    w.metadata(rank, "thread_name", "Communication");
  }
  std::set<int> on_path;
  for (const analysis::ClusterPathSegment& s : critical_path) {
    if (on_path.insert(s.rank).second) w.metadata(s.rank, "thread_name", "Critical path", kPathTid);
  }
  for (const CommTiming& t : timings) w.slice(t);
  for (const Flow& f : cluster_flows(timings)) w.flow(*f.from, f.from_ns, *f.to, f.to_ns);
  for (size_t i = 0; i < critical_path.size(); ++i)
    w.path_segment(critical_path[i], i > 0 ? &critical_path[i - 1] : nullptr);
  return w.finish();
}

std::string write_cluster_perfetto_trace(const std::vector<CommTiming>& timings,
                                         const std::vector<analysis::ClusterPathSegment>& critical_path,
                                         const std::map<int, std::string>& hosts, const OutputPath& path) {
  using namespace perfetto_proto;  // NOLINT: the encoding and field numbers
  uint64_t origin = origin_of(timings);
  std::vector<Flow> flows = cluster_flows(timings);
  std::map<const CommTiming*, std::vector<uint64_t>> flows_out, flows_in;
  for (size_t i = 0; i < flows.size(); ++i) {
    flows_out[flows[i].from].push_back(i + 1);
    flows_in[flows[i].to].push_back(i + 1);
  }
  OutputFile file(path);
  std::string buffer;
  auto packet = [&](Message body) {
    append_packet(buffer, body.uint(packet::kSequenceId, 1));
    file.drain(buffer);
  };
  // A process track per rank; its communication on thread tracks, one lane
  // each where operations overlap (Perfetto's slices on a track nest).
  uint64_t next_uuid = 1;
  std::map<int, uint64_t> process;
  std::map<std::pair<int, size_t>, uint64_t> lane_track;
  std::map<int, std::vector<uint64_t>> lane_free;  // per rank: each lane's last end
  auto process_track = [&](int rank) {
    auto [it, added] = process.emplace(rank, next_uuid);
    if (added) {
      ++next_uuid;
      auto host = hosts.find(rank);
      Message p;
      p.uint(1, static_cast<uint64_t>(rank))
          .bytes(6, "rank " + std::to_string(rank) + (host != hosts.end() ? " (" + host->second + ")" : ""));
      packet(Message()
                 .uint(packet::kSequenceFlags, 1)
                 .message(packet::kTrackDescriptor, Message().uint(1, it->second).message(3, p)));
    }
    return it->second;
  };
  for (const auto& [rank, host] : hosts) process_track(rank);
  for (const CommTiming& t : timings) {
    uint64_t end = std::max(t.end_ns, t.start_ns);
    std::vector<uint64_t>& free = lane_free[t.rank];
    size_t lane = 0;
    while (lane < free.size() && free[lane] > t.start_ns) ++lane;
    if (lane == free.size()) free.push_back(0);
    free[lane] = end;
    auto [it, added] = lane_track.emplace(std::make_pair(t.rank, lane), next_uuid);
    if (added) {
      ++next_uuid;
      Message thread;
      thread.uint(1, static_cast<uint64_t>(t.rank))
          .uint(2, 1 + lane)
          .bytes(5, lane == 0 ? std::string("Communication") : "Communication #" + std::to_string(lane + 1));
      packet(
          Message().message(packet::kTrackDescriptor,
                            Message().uint(1, it->second).uint(5, process_track(t.rank)).message(4, thread)));
    }
    uint64_t track = it->second;
    Message begin;
    begin.uint(event::kType, event::kSliceBegin).uint(event::kTrackUuid, track).bytes(23, t.operation);
    auto annotation = [&](const char* name, uint64_t v) {
      begin.message(event::kDebugAnnotations, Message().bytes(10, name).uint(3, v));
    };
    begin.message(event::kDebugAnnotations, Message().bytes(10, "Group").bytes(6, t.group));
    annotation("Sequence", static_cast<uint64_t>(t.sequence));
    annotation("Bytes", t.bytes);
    annotation("Wait(ns)", t.wait_ns);
    if (t.transfer) annotation("Peer", static_cast<uint64_t>(t.peer));
    for (uint64_t id : flows_out[&t]) begin.fixed64(event::kFlowIds, id);
    for (uint64_t id : flows_in[&t]) begin.fixed64(event::kTerminatingFlowIds, id);
    auto at = [&](uint64_t ns) { return ns - std::min(ns, origin); };
    packet(Message().uint(packet::kTimestamp, at(t.start_ns)).message(packet::kTrackEvent, begin));
    uint64_t wait = std::min(t.wait_ns, end - t.start_ns);
    if (wait > 0) {
      Message child;
      child.uint(event::kType, event::kSliceBegin).uint(event::kTrackUuid, track).bytes(23, "wait");
      packet(Message().uint(packet::kTimestamp, at(t.start_ns)).message(packet::kTrackEvent, child));
      packet(Message()
                 .uint(packet::kTimestamp, at(t.start_ns + wait))
                 .message(packet::kTrackEvent,
                          Message().uint(event::kType, event::kSliceEnd).uint(event::kTrackUuid, track)));
    }
    packet(Message()
               .uint(packet::kTimestamp, at(end))
               .message(packet::kTrackEvent,
                        Message().uint(event::kType, event::kSliceEnd).uint(event::kTrackUuid, track)));
  }
  // The job's critical path: a "Critical path" thread track on each rank it
  // passes through; a flow where it moves from one rank to the next.
  std::map<int, uint64_t> path_track;
  for (size_t i = 0; i < critical_path.size(); ++i) {
    const analysis::ClusterPathSegment& seg = critical_path[i];
    auto [it, added] = path_track.emplace(seg.rank, next_uuid);
    if (added) {
      ++next_uuid;
      Message thread;
      thread.uint(1, static_cast<uint64_t>(seg.rank)).uint(2, 1000).bytes(5, "Critical path");
      packet(Message().message(
          packet::kTrackDescriptor,
          Message().uint(1, it->second).uint(5, process_track(seg.rank)).message(4, thread)));
    }
    auto moves = [&](size_t j) {  // the path goes to another rank of the same step at segment j
      return j > 0 && j < critical_path.size() && critical_path[j].step == critical_path[j - 1].step &&
             critical_path[j].rank != critical_path[j - 1].rank;
    };
    uint64_t flow_base = flows.size();  // path flows are numbered after the communication's
    Message begin;
    begin.uint(event::kType, event::kSliceBegin).uint(event::kTrackUuid, it->second).bytes(23, seg.name);
    begin.message(event::kDebugAnnotations,
                  Message().bytes(10, "Step").uint(3, static_cast<uint64_t>(seg.step)));
    if (moves(i + 1)) begin.fixed64(event::kFlowIds, flow_base + i + 2);
    if (moves(i)) begin.fixed64(event::kTerminatingFlowIds, flow_base + i + 1);
    auto at = [&](uint64_t ns) { return ns - std::min(ns, origin); };
    packet(Message().uint(packet::kTimestamp, at(seg.start_ns)).message(packet::kTrackEvent, begin));
    packet(Message()
               .uint(packet::kTimestamp, at(seg.start_ns + seg.dur_ns))
               .message(packet::kTrackEvent,
                        Message().uint(event::kType, event::kSliceEnd).uint(event::kTrackUuid, it->second)));
  }
  file.commit(buffer);
  return file.error();
}

}  // namespace trainprof::exporter
