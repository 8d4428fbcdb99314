// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/cluster_path_spread.h"

#include <algorithm>
#include <utility>

#include "analysis/rank_summary_bytes.h"
#include "base/byte_buffer.h"

namespace trainprof::pipeline {
namespace {

using analysis::ClusterPath;
using analysis::ClusterPathSegment;
using analysis::RankSummary;
using analysis::StepEstimate;

// Each of `mine`'s steps and blocking collectives in a step, in a summary
// of its rank per step owner (what cluster_critical_path reads: the rank,
// its groups, the steps' spans, the collectives' group, sequence,
// operation, times and step), appended to that owner's message.
void send_steps(const std::vector<const RankSummary*>& mine, int processes, std::vector<std::string>* out) {
  std::vector<RankSummary> pieces(static_cast<size_t>(processes));
  for (const RankSummary* s : mine) {
    for (RankSummary& piece : pieces) {
      piece.rank = s->rank;
      piece.world_size = s->world_size;
      piece.groups = s->groups;
      piece.steps.clear();
      piece.collectives.clear();
    }
    for (const analysis::RankStep& st : s->steps)
      pieces[static_cast<size_t>(step_owner(st.row.step, processes))].steps.push_back(st);
    for (const analysis::RankCollective& c : s->collectives) {
      if (c.in_flight || c.step < 0 || c.group >= s->groups.size()) continue;  // never on the path
      pieces[static_cast<size_t>(step_owner(c.step, processes))].collectives.push_back(c);
    }
    for (size_t p = 0; p < pieces.size(); ++p) {
      if (!pieces[p].steps.empty()) analysis::append_rank_summary_bytes(pieces[p], &(*out)[p]);
    }
  }
}

void put_path(const ClusterPath& path, std::string* out) {
  base::ByteWriter w(out);
  w.put<uint64_t>(path.segments.size());
  for (const ClusterPathSegment& s : path.segments) {
    w.put(s.step);
    w.put<uint8_t>(s.communication);
    w.put<int32_t>(s.rank);
    w.put(s.name);
    w.put(s.start_ns);
    w.put(s.dur_ns);
  }
  w.put<uint64_t>(path.straggler_at_median.size());
  for (const StepEstimate& e : path.straggler_at_median) {
    w.put(e.step);
    w.put(e.recorded_ns);
    w.put(e.estimated_ns);
  }
}

bool read_path(std::string_view in, ClusterPath* path) {
  base::ByteReader r(in);
  uint64_t n = 0;
  if (!r.count(8 + 1 + 4 + 8 + 8 + 8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    ClusterPathSegment s;
    uint8_t communication = 0;
    int32_t rank = 0;
    if (!r.get(&s.step) || !r.get(&communication) || !r.get(&rank) || !r.get(&s.name) ||
        !r.get(&s.start_ns) || !r.get(&s.dur_ns))
      return false;
    s.communication = communication != 0;
    s.rank = rank;
    path->segments.push_back(std::move(s));
  }
  if (!r.count(3 * 8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    StepEstimate e{};
    if (!r.get(&e.step) || !r.get(&e.recorded_ns) || !r.get(&e.estimated_ns)) return false;
    path->straggler_at_median.push_back(e);
  }
  return r.empty();
}

}  // namespace

ClusterPath spread_critical_path(const std::vector<const RankSummary*>& mine, int straggler,
                                 ClusterExchange& exchange, std::string* error) {
  const int processes = exchange.size();
  // 1. Each step's part of every rank to the step's owner; process 0's
  // messages say the straggler first (the others' the same place, unread).
  std::vector<std::string> outgoing(static_cast<size_t>(processes));
  for (std::string& message : outgoing) base::ByteWriter(&message).put<int32_t>(straggler);
  send_steps(mine, processes, &outgoing);
  std::vector<std::string> incoming = exchange.all_to_all(std::move(outgoing));
  std::vector<RankSummary> steps_here;
  int32_t told_straggler = -1;
  for (size_t p = 0; p < incoming.size(); ++p) {
    std::string_view rest = incoming[p];
    base::ByteReader header(rest);
    int32_t said = -1;
    bool ok = header.get(&said);
    if (p == 0) told_straggler = said;
    rest = header.rest();
    while (ok && !rest.empty()) ok = analysis::read_rank_summary_bytes(&rest, &steps_here.emplace_back());
    if (!ok && error->empty())
      *error = "the steps process " + std::to_string(p) + " sent for the critical path arrived damaged";
  }
  std::vector<std::string>().swap(incoming);
  // In rank order, as the one-process pass reads them (a meeting's last
  // arrival among equal starts is the highest rank).
  std::stable_sort(steps_here.begin(), steps_here.end(),
                   [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  ClusterPath walked = analysis::cluster_critical_path(steps_here, told_straggler);
  std::vector<RankSummary>().swap(steps_here);

  // 2. Each owner's segments and estimates to process 0, put in step order.
  std::vector<std::string> results(static_cast<size_t>(processes));
  put_path(walked, &results[0]);
  std::vector<std::string> gathered = exchange.all_to_all(std::move(results));
  ClusterPath path;
  if (exchange.index() != 0) return path;
  for (size_t p = 0; p < gathered.size(); ++p) {
    if (!read_path(gathered[p], &path) && error->empty())
      *error = "the critical path process " + std::to_string(p) + " walked arrived damaged";
  }
  // Each step was walked by one process: its segments stay in their order.
  std::stable_sort(path.segments.begin(), path.segments.end(),
                   [](const ClusterPathSegment& a, const ClusterPathSegment& b) { return a.step < b.step; });
  std::stable_sort(path.straggler_at_median.begin(), path.straggler_at_median.end(),
                   [](const StepEstimate& a, const StepEstimate& b) { return a.step < b.step; });
  return path;
}

}  // namespace trainprof::pipeline
