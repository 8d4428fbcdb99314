// Copyright trainprof authors.
#include "export/cluster_trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>

namespace trainprof::exporter {
namespace {

using analysis::CommTiming;

constexpr int kTrackTid = 1;

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

  void metadata(int pid, const char* name, const std::string& value) {
    event("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(kTrackTid) +
          ",\"name\":\"" + name + "\",\"args\":{\"name\":" + nlohmann::json(value).dump() + "}}");
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
    event("{\"ph\":\"X\",\"cat\":\"communication\",\"pid\":" + std::to_string(t.rank) + ",\"tid\":" +
          std::to_string(kTrackTid) + ",\"ts\":" + at(t.start_ns) + ",\"dur\":" + us(end - t.start_ns) +
          ",\"name\":" + nlohmann::json(t.operation).dump() + ",\"args\":" + args.dump() + "}");
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

std::string write_cluster_trace(const std::vector<CommTiming>& timings,
                                const std::map<int, std::string>& hosts, const OutputPath& path) {
  uint64_t origin = UINT64_MAX;
  for (const CommTiming& t : timings) origin = std::min(origin, t.start_ns);
  origin = origin == UINT64_MAX ? 0 : origin - origin % 1000000000;  // a whole second
  TraceWriter w(path, origin);
  for (const auto& [rank, host] : hosts) {
    w.metadata(rank, "process_name", "rank " + std::to_string(rank) + " (" + host + ")");
    w.metadata(rank, "thread_name", "Communication");
  }
  // Collectives by (group, sequence); transfers by channel and order, as
  // the cluster pass paired them (the wait it found is the other side's
  // arrival: own start + wait).
  std::map<std::pair<std::string, int64_t>, std::vector<const CommTiming*>> collectives;
  for (const CommTiming& t : timings) {
    w.slice(t);
    if (!t.transfer) collectives[{t.group, t.sequence}].push_back(&t);
  }
  for (const auto& [key, members] : collectives) {
    if (members.size() > kMaxFlowGroup) continue;
    const CommTiming* last =
        *std::max_element(members.begin(), members.end(),
                          [](const CommTiming* a, const CommTiming* b) { return a->start_ns < b->start_ns; });
    for (const CommTiming* m : members) {
      if (m != last) w.flow(*last, last->start_ns, *m, m->start_ns + m->wait_ns);
    }
  }
  // Transfers: the k-th send of (group, sender, receiver, tag) to the k-th
  // receive, as MPI delivers them (timings are in start order per rank).
  using Channel = std::tuple<std::string, int, int, int32_t>;
  std::map<Channel, std::pair<std::vector<const CommTiming*>, std::vector<const CommTiming*>>> channels;
  for (const CommTiming& t : timings) {
    if (!t.transfer || t.peer < 0 || t.tag < 0) continue;
    Channel c{t.group, t.sends ? t.rank : t.peer, t.sends ? t.peer : t.rank, t.tag};
    (t.sends ? channels[c].first : channels[c].second).push_back(&t);
  }
  for (auto& [channel, sides] : channels) {
    auto& [sends, receives] = sides;
    for (size_t k = 0; k < std::min(sends.size(), receives.size()); ++k) {
      const CommTiming& s = *sends[k];
      const CommTiming& r = *receives[k];
      w.flow(s, s.start_ns, r, std::max(r.start_ns, std::min(s.start_ns, r.end_ns)));
    }
  }
  return w.finish();
}

}  // namespace trainprof::exporter
