// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/rank_summary.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/json_limits.h"
#include "base/run_directory.h"
#include "raw/format.h"

namespace trainprof::analysis {
namespace {

using nlohmann::json;

// The reference rank's wall clock at `t` (monotonic): this rank's, less its
// measured offset, interpolated between the measurements (the drift), the
// nearest one outside them.
int64_t offset_at(const TraceModel& m, uint64_t realtime_ns) {
  const std::vector<ClockOffset>& p = m.clock_offsets;
  if (p.empty()) return 0;
  if (realtime_ns <= p.front().realtime_ns) return p.front().offset_ns;
  if (realtime_ns >= p.back().realtime_ns) return p.back().offset_ns;
  auto next = std::upper_bound(p.begin(), p.end(), realtime_ns,
                               [](uint64_t t, const ClockOffset& o) { return t < o.realtime_ns; });
  auto prev = next - 1;
  double f = static_cast<double>(realtime_ns - prev->realtime_ns) /
             static_cast<double>(next->realtime_ns - prev->realtime_ns);
  return prev->offset_ns + static_cast<int64_t>(f * static_cast<double>(next->offset_ns - prev->offset_ns));
}

uint64_t wall(const TraceModel& m, uint64_t monotonic_ns) {
  uint64_t local = monotonic_ns + static_cast<uint64_t>(m.realtime_offset_ns);
  return local - static_cast<uint64_t>(offset_at(m, local));
}

// The step whose window holds `t` (monotonic), -1: none.
int64_t step_at(const TraceModel& m, uint64_t t) {
  for (const StepWindow& w : m.steps) {
    if (t >= w.start_ns && t < w.end_ns) return w.number;
  }
  return -1;
}

// Time inside communication calls in [start, end): blocking calls, posts and
// waits (a nonblocking operation's in-flight span is not time spent in MPI).
uint64_t time_in_comm(const TraceModel& m, uint64_t start, uint64_t end) {
  UnionLength u;
  for (const CommCall& c : m.comm_calls) {  // in start order
    if (!is_host_call(c)) continue;
    uint64_t s = std::max(c.start_ns, start), e = std::min(c.end_ns, end);
    if (e > s) u.add(s, e);
  }
  return u.total();
}

// Integers read only from integer JSON numbers: nlohmann's get<> converts a
// float that does not fit with undefined behaviour (found by fuzzing).
uint64_t u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  throw std::invalid_argument("a non-negative integer was expected, not " + v.dump());
}
int64_t i64(const json& v) {
  if (v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= INT64_MAX))
    return v.get<int64_t>();
  throw std::invalid_argument("an integer was expected, not " + v.dump());
}
int32_t i32(const json& v) {
  int64_t x = i64(v);
  if (x < INT32_MIN || x > INT32_MAX)
    throw std::invalid_argument("a 32-bit integer was expected, not " + v.dump());
  return static_cast<int32_t>(x);
}

// A group's members as JSON: each run of consecutive ranks as [first,
// last], a rank alone as itself (version 5).
json members_json(const GroupMembers& members) {
  json out = json::array();
  for (const MemberRun& run : members.runs()) {
    if (run.first == run.last) {
      out.push_back(run.first);
    } else {
      out.push_back(json::array({run.first, run.last}));
    }
  }
  return out;
}

// members_json's form, or the plain list of ranks before version 5.
std::string read_members(const json& runs, GroupMembers* members) {
  if (!runs.is_array()) return "a group's ranks are not an array";
  std::vector<MemberRun> read;
  for (const json& r : runs) {
    if (!r.is_array()) {
      read.push_back({i32(r), i32(r)});
    } else if (r.size() == 2) {
      read.push_back({i32(r[0]), i32(r[1])});
    } else {
      return "a group's run of ranks is not [first, last]";
    }
  }
  return GroupMembers::from_runs(std::move(read), members);
}

}  // namespace

RankSummary rank_summary(const TraceModel& m, const std::vector<StepTraceRow>& rows,
                         const OutsideOperators* outside) {
  RankSummary s;
  s.rank = m.rank;
  s.world_size = m.world_size;
  s.host = m.host;
  s.job = m.job;
  s.end = !m.closed_cleanly ? "killed" : m.stop_reason == "signal" ? "signal" : "normal";
  s.clock_aligned = !m.clock_offsets.empty();
  s.clock_problem = m.clock_problem;
  s.data_wait_separate = true;
  for (const ClockOffset& o : m.clock_offsets) {
    s.clock_error_ns = std::max(s.clock_error_ns, o.error_ns);
    s.clock_offset_ns = std::max<uint64_t>(s.clock_offset_ns, static_cast<uint64_t>(std::llabs(o.offset_ns)));
  }
  std::map<int64_t, const StepTraceRow*> row_of;
  for (const StepTraceRow& r : rows) row_of[r.step] = &r;
  for (const StepWindow& w : m.steps) {
    RankStep step;
    if (auto it = row_of.find(w.number); it != row_of.end()) step.row = *it->second;
    step.row.step = w.number;
    step.start_ns = wall(m, w.start_ns);
    step.end_ns = wall(m, w.end_ns);
    step.data_wait_ns = step.row.data_wait_ns;
    step.in_comm_ns = time_in_comm(m, w.start_ns, w.end_ns);
    s.steps.push_back(step);
  }
  if (outside != nullptr && outside->steps > 0) {
    std::map<int64_t, uint64_t> outside_of;
    for (const auto& [number, functions] : outside->by_step) {
      for (const OutsideFunction& f : functions) outside_of[number] += f.ns;
    }
    for (RankStep& st : s.steps) st.outside_ns = outside_of[st.row.step];
    for (size_t i = 0; i < outside->functions.size() && i < kRankOutsideFunctions; ++i) {
      const OutsideFunction& f = outside->functions[i];
      s.outside_functions.emplace_back(describe(f), f.ns / static_cast<uint64_t>(outside->steps));
    }
  }
  std::map<uint32_t, uint32_t> group_index;  // model string id -> index
  for (const CommGroup& g : m.comm_groups) {
    group_index[g.name] = static_cast<uint32_t>(s.groups.size());
    s.groups.push_back(RankGroup{m.name(g.name), g.world_ranks, g.origin});
  }
  for (const CommCall& c : m.comm_calls) {
    // A collective's call, or a nonblocking one from post to completion.
    if ((c.flags & raw::kCommCollective) == 0 || (c.flags & raw::kCommNonblocking) != 0) continue;
    auto g = group_index.find(c.group);
    if (g == group_index.end() || c.sequence < 0) continue;
    s.collectives.push_back(RankCollective{g->second, c.sequence, m.name(c.name), wall(m, c.start_ns),
                                           wall(m, c.end_ns), c.bytes, step_at(m, c.start_ns), 0,
                                           (c.flags & raw::kCommCompletion) != 0});
  }
  for (const CommCall& c : m.comm_calls) {
    // A blocking send or receive, or a nonblocking one's post-to-completion
    // span (its post is a separate, short call).
    if ((c.flags & (raw::kCommSend | raw::kCommRecv)) == 0 || (c.flags & raw::kCommNonblocking) != 0)
      continue;
    auto g = group_index.find(c.group);
    if (g == group_index.end()) continue;
    s.transfers.push_back(RankTransfer{g->second, m.name(c.name), wall(m, c.start_ns), wall(m, c.end_ns),
                                       c.bytes, step_at(m, c.start_ns), c.peer, c.tag,
                                       (c.flags & raw::kCommSend) != 0});
  }
  return s;
}

std::string rank_summary_json(const RankSummary& s) {
  json steps = json::array();
  for (const RankStep& st : s.steps) {
    const StepTraceRow& r = st.row;
    steps.push_back({{"step", r.step},
                     {"start_ns", st.start_ns},
                     {"end_ns", st.end_ns},
                     {"computing_ns", r.computing_ns},
                     {"communication_not_overlapped_ns", r.communication_not_overlapped_ns},
                     {"overlapped_ns", r.overlapped_ns},
                     {"communication_ns", r.communication_ns},
                     {"free_ns", r.free_ns},
                     {"stage_ns", r.stage_ns},
                     {"bubble_ns", r.bubble_ns},
                     {"communication_not_overlapped_exclude_receive_ns",
                      r.communication_not_overlapped_exclude_receive_ns},
                     {"preparing_ns", r.preparing_ns},
                     {"data_wait_ns", st.data_wait_ns},
                     {"in_comm_ns", st.in_comm_ns},
                     {"outside_ns", st.outside_ns}});
  }
  json groups = json::array();
  for (const RankGroup& g : s.groups)
    groups.push_back({{"name", g.name}, {"ranks", members_json(g.world_ranks)}, {"origin", g.origin}});
  // Collectives are the bulk: one array each, [group, sequence, operation,
  // start_ns, end_ns, bytes, step, in flight (1) or not (0)] (version 3; 7
  // elements before).
  json collectives = json::array();
  for (const RankCollective& c : s.collectives) {
    collectives.push_back(json::array(
        {c.group, c.sequence, c.operation, c.start_ns, c.end_ns, c.bytes, c.step, c.in_flight ? 1 : 0}));
  }
  // Transfers likewise: [group, operation, start_ns, end_ns, bytes, step,
  // peer, tag, send (1) or receive (0)].
  json transfers = json::array();
  for (const RankTransfer& t : s.transfers) {
    transfers.push_back(json::array(
        {t.group, t.operation, t.start_ns, t.end_ns, t.bytes, t.step, t.peer, t.tag, t.send ? 1 : 0}));
  }
  json out = {{"version", 5},
              {"rank", s.rank},
              {"world_size", s.world_size},
              {"host", s.host},
              {"end", s.end},
              {"clock_aligned", s.clock_aligned},
              {"clock_offset_ns", s.clock_offset_ns},
              {"clock_error_ns", s.clock_error_ns},
              {"clock_problem", s.clock_problem},
              {"data_wait_separate", s.data_wait_separate},
              {"steps", steps},
              {"groups", groups},
              {"collectives", collectives},
              {"transfers", transfers}};
  if (!s.job.empty()) out["job"] = s.job;  // absent: no launcher named one
  if (!s.outside_functions.empty()) {
    json functions = json::array();
    for (const auto& [name, ns] : s.outside_functions) functions.push_back(json::array({name, ns}));
    out["outside_functions"] = functions;  // absent: no stack samples
  }
  return base::json_text(out) + "\n";
}

std::string parse_rank_summary(const std::string& text, RankSummary* out) {
  json j;
  std::string error = base::parse_json_limited(text, &j);
  if (!error.empty()) return error;
  try {
    // Version 1 (no transfers) is read as well: runs analysed before them.
    int version = j.is_object() && j.contains("version") && j["version"].is_number_integer()
                      ? j["version"].get<int>()
                      : 0;
    if (version < 1 || version > 5) return "not a version 1 to 5 rank summary";
    RankSummary s;
    s.rank = i32(j.at("rank"));
    s.world_size = i32(j.at("world_size"));
    s.host = j.at("host").get<std::string>();
    if (auto job = j.find("job"); job != j.end()) s.job = base::clean_job_id(job->get<std::string>());
    s.end = j.at("end").get<std::string>();
    if (s.end != "normal" && s.end != "signal" && s.end != "killed")
      return "end is not normal, signal or killed";
    if (!j.at("clock_aligned").is_boolean()) return "clock_aligned is not a boolean";
    s.clock_aligned = j.at("clock_aligned").get<bool>();
    s.clock_offset_ns = u64(j.at("clock_offset_ns"));
    s.clock_error_ns = u64(j.at("clock_error_ns"));
    if (auto p = j.find("clock_problem"); p != j.end())
      s.clock_problem = p->get<std::string>();  // absent before it existed
    if (version >= 4) {
      if (!j.at("data_wait_separate").is_boolean()) return "data_wait_separate is not a boolean";
      s.data_wait_separate = j.at("data_wait_separate").get<bool>();
    }
    if (s.rank < 0 || s.world_size <= s.rank) return "rank " + std::to_string(s.rank) + " outside the world";
    if (s.world_size > base::kMaxWorldSize)
      return "world size " + std::to_string(s.world_size) + " over 2^24";
    for (const json& st : j.at("steps")) {
      RankStep step;
      StepTraceRow& r = step.row;
      r.step = i64(st.at("step"));
      step.start_ns = u64(st.at("start_ns"));
      step.end_ns = u64(st.at("end_ns"));
      r.computing_ns = u64(st.at("computing_ns"));
      r.communication_not_overlapped_ns = u64(st.at("communication_not_overlapped_ns"));
      r.overlapped_ns = u64(st.at("overlapped_ns"));
      r.communication_ns = u64(st.at("communication_ns"));
      r.free_ns = u64(st.at("free_ns"));
      r.stage_ns = u64(st.at("stage_ns"));
      r.bubble_ns = u64(st.at("bubble_ns"));
      r.communication_not_overlapped_exclude_receive_ns =
          u64(st.at("communication_not_overlapped_exclude_receive_ns"));
      r.preparing_ns = u64(st.at("preparing_ns"));
      r.step_ns = step.end_ns > step.start_ns ? step.end_ns - step.start_ns : 0;
      step.data_wait_ns = u64(st.at("data_wait_ns"));
      if (s.data_wait_separate) r.data_wait_ns = step.data_wait_ns;
      step.in_comm_ns = u64(st.at("in_comm_ns"));
      if (auto o = st.find("outside_ns"); o != st.end())
        step.outside_ns = u64(*o);  // absent before it existed
      s.steps.push_back(step);
    }
    for (const json& g : j.at("groups")) {
      RankGroup group{g.at("name").get<std::string>(), {}, g.at("origin").get<std::string>()};
      std::string e = read_members(g.at("ranks"), &group.world_ranks);
      if (!e.empty()) return e;
      s.groups.push_back(std::move(group));
    }
    for (const json& c : j.at("collectives")) {
      size_t size = version >= 3 ? 8 : 7;
      if (!c.is_array() || c.size() != size) {
        return "a collective is not a " + std::to_string(size) + "-element array";
      }
      uint64_t group = u64(c[0]);
      if (group >= s.groups.size()) return "a collective names group " + std::to_string(group) + " of none";
      s.collectives.push_back(RankCollective{static_cast<uint32_t>(group), i64(c[1]), c[2].get<std::string>(),
                                             u64(c[3]), u64(c[4]), u64(c[5]), i64(c[6]), 0,
                                             version >= 3 && u64(c[7]) != 0});
    }
    if (version >= 2) {
      for (const json& t : j.at("transfers")) {
        if (!t.is_array() || t.size() != 9) return "a transfer is not a 9-element array";
        uint64_t group = u64(t[0]);
        if (group >= s.groups.size()) return "a transfer names group " + std::to_string(group) + " of none";
        uint64_t send = u64(t[8]);
        if (send > 1) return "a transfer's direction is not 0 or 1";
        s.transfers.push_back(RankTransfer{static_cast<uint32_t>(group), t[1].get<std::string>(), u64(t[2]),
                                           u64(t[3]), u64(t[4]), i64(t[5]), i32(t[6]), i32(t[7]), send == 1});
      }
    }
    if (auto f = j.find("outside_functions"); f != j.end()) {
      for (const json& e : *f) {
        if (!e.is_array() || e.size() != 2) return "an outside function is not a [name, ns] array";
        if (s.outside_functions.size() < kRankOutsideFunctions)
          s.outside_functions.emplace_back(e[0].get<std::string>(), u64(e[1]));
      }
    }
    *out = std::move(s);
    return "";
  } catch (const std::exception& e) {
    return std::string("malformed rank summary: ") + e.what();
  }
}

}  // namespace trainprof::analysis
