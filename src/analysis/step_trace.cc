// Copyright trainprof authors. Step-time breakdown (step_trace_time.csv).
//
// Per step window: Computing is the union of operator and range intervals on
// every thread, clipped to the window; Free is the window minus Computing and
// Communication; Preparing is the gap from the step's start to its first
// computing activity. The communication columns stay 0 until communication
// data is collected.
#include <algorithm>

#include "analysis/passes.h"

namespace trainprof::analysis {

uint64_t union_length(std::vector<std::pair<uint64_t, uint64_t>>& v) {
  std::sort(v.begin(), v.end());
  uint64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : v) {
    if (!open || s > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

std::vector<StepTraceRow> step_trace(const TraceModel& m) {
  // Computing intervals, sorted by start, scanned once per step window.
  std::vector<std::pair<uint64_t, uint64_t>> compute;
  for (const Slice& s : m.slices) {
    if (s.kind != SliceKind::kStep) compute.emplace_back(s.start_ns, s.end_ns);
  }
  std::sort(compute.begin(), compute.end());
  uint64_t longest = 0;
  for (const auto& [s, e] : compute) longest = std::max(longest, e - s);
  std::vector<StepTraceRow> rows;
  for (const StepWindow& w : m.steps) {
    StepTraceRow row;
    row.step = w.number;
    row.step_ns = w.end_ns - w.start_ns;
    std::vector<std::pair<uint64_t, uint64_t>> clipped;
    uint64_t first_start = w.end_ns;
    // Only intervals starting within `longest` before the window can reach
    // into it: start there, so the whole pass is about O(n log n).
    uint64_t from = w.start_ns > longest ? w.start_ns - longest : 0;
    auto first = std::lower_bound(compute.begin(), compute.end(), std::make_pair(from, uint64_t{0}));
    for (auto it = first; it != compute.end(); ++it) {
      auto [s, e] = *it;
      if (s >= w.end_ns) break;
      if (e <= w.start_ns) continue;
      uint64_t cs = std::max(s, w.start_ns), ce = std::min(e, w.end_ns);
      if (ce > cs) {
        clipped.emplace_back(cs, ce);
        first_start = std::min(first_start, cs);
      }
    }
    row.computing_ns = union_length(clipped);
    row.free_ns = row.step_ns - row.computing_ns;
    row.preparing_ns = clipped.empty() ? 0 : first_start - w.start_ns;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace trainprof::analysis
