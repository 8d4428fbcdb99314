// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/rank_summary_bytes.h"

#include "base/byte_buffer.h"

#include <cstdint>
#include <type_traits>

namespace trainprof::analysis {
namespace {

static_assert(std::is_trivially_copyable_v<RankStep>, "steps are copied as they are");
// The fixed part of a collective's or a transfer's bytes (each 57): a count
// of them is checked against the bytes left.
constexpr size_t kFixedCallBytes = 57;

using Writer = base::ByteWriter;
using Reader = base::ByteReader;

}  // namespace

void append_rank_summary_bytes(const RankSummary& s, std::string* out) {
  Writer w(out);
  w.put<int32_t>(s.rank);
  w.put<int32_t>(s.world_size);
  w.put(s.host);
  w.put(s.job);
  w.put<uint8_t>(s.clock_aligned);
  w.put(s.clock_offset_ns);
  w.put(s.clock_error_ns);
  w.put(s.clock_problem);
  w.put<uint8_t>(s.data_wait_separate);
  w.put(s.end);
  w.put<uint64_t>(s.run_dirs.size());
  for (const std::string& run : s.run_dirs) w.put(run);
  w.put<uint64_t>(s.steps.size());
  for (const RankStep& st : s.steps) w.put(st);
  w.put<uint64_t>(s.groups.size());
  for (const RankGroup& g : s.groups) {
    w.put(g.name);
    w.put<uint64_t>(g.world_ranks.runs().size());
    for (const MemberRun& run : g.world_ranks.runs()) {
      w.put(run.first);
      w.put(run.last);
    }
    w.put(g.origin);
  }
  w.put<uint64_t>(s.collectives.size());
  for (const RankCollective& c : s.collectives) {
    w.put(c.group);
    w.put(c.sequence);
    w.put(c.operation);
    w.put(c.start_ns);
    w.put(c.end_ns);
    w.put(c.bytes);
    w.put(c.step);
    w.put(c.run);
    w.put<uint8_t>(c.in_flight);
  }
  w.put<uint64_t>(s.transfers.size());
  for (const RankTransfer& t : s.transfers) {
    w.put(t.group);
    w.put(t.operation);
    w.put(t.start_ns);
    w.put(t.end_ns);
    w.put(t.bytes);
    w.put(t.step);
    w.put(t.peer);
    w.put(t.tag);
    w.put<uint8_t>(t.send);
    w.put(t.run);
  }
  w.put<uint64_t>(s.outside_functions.size());
  for (const auto& [name, ns] : s.outside_functions) {
    w.put(name);
    w.put(ns);
  }
}

bool read_rank_summary_bytes(std::string_view* in, RankSummary* out) {
  Reader r(*in);
  RankSummary s;
  int32_t rank = 0, world_size = 0;
  uint8_t aligned = 0, separate = 0;
  uint64_t n = 0;
  if (!r.get(&rank) || !r.get(&world_size) || !r.get(&s.host) || !r.get(&s.job) || !r.get(&aligned) ||
      !r.get(&s.clock_offset_ns) || !r.get(&s.clock_error_ns) || !r.get(&s.clock_problem) ||
      !r.get(&separate) || !r.get(&s.end) || !r.count(sizeof(uint64_t), &n)) {
    return false;
  }
  s.rank = rank;
  s.world_size = world_size;
  s.clock_aligned = aligned != 0;
  s.data_wait_separate = separate != 0;
  s.run_dirs.resize(n);
  for (std::string& run : s.run_dirs) {
    if (!r.get(&run)) return false;
  }
  if (!r.count(sizeof(RankStep), &n)) return false;
  s.steps.resize(n);
  for (RankStep& st : s.steps) {
    if (!r.get(&st)) return false;
  }
  if (!r.count(3 * sizeof(uint64_t), &n)) return false;
  s.groups.resize(n);
  for (RankGroup& g : s.groups) {
    if (!r.get(&g.name) || !r.count(2 * sizeof(int32_t), &n)) return false;
    std::vector<MemberRun> runs(n);
    for (MemberRun& run : runs) {
      if (!r.get(&run.first) || !r.get(&run.last)) return false;
    }
    if (!GroupMembers::from_runs(std::move(runs), &g.world_ranks).empty()) return false;
    if (!r.get(&g.origin)) return false;
  }
  if (!r.count(kFixedCallBytes, &n)) return false;
  s.collectives.resize(n);
  for (RankCollective& c : s.collectives) {
    uint8_t in_flight = 0;
    if (!r.get(&c.group) || !r.get(&c.sequence) || !r.get(&c.operation) || !r.get(&c.start_ns) ||
        !r.get(&c.end_ns) || !r.get(&c.bytes) || !r.get(&c.step) || !r.get(&c.run) || !r.get(&in_flight) ||
        c.group >= s.groups.size()) {
      return false;
    }
    c.in_flight = in_flight != 0;
  }
  if (!r.count(kFixedCallBytes, &n)) return false;
  s.transfers.resize(n);
  for (RankTransfer& t : s.transfers) {
    uint8_t send = 0;
    if (!r.get(&t.group) || !r.get(&t.operation) || !r.get(&t.start_ns) || !r.get(&t.end_ns) ||
        !r.get(&t.bytes) || !r.get(&t.step) || !r.get(&t.peer) || !r.get(&t.tag) || !r.get(&send) ||
        !r.get(&t.run) || t.group >= s.groups.size()) {
      return false;
    }
    t.send = send != 0;
  }
  if (!r.count(2 * sizeof(uint64_t), &n)) return false;
  s.outside_functions.resize(n);
  for (auto& [name, ns] : s.outside_functions) {
    if (!r.get(&name) || !r.get(&ns)) return false;
  }
  *in = r.rest();
  *out = std::move(s);
  return true;
}

}  // namespace trainprof::analysis
