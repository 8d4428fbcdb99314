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

void UnionLength::add(uint64_t start, uint64_t end) {
  if (open_ && start <= end_) {
    end_ = std::max(end_, end);
    return;
  }
  if (open_) total_ += end_ - start_;
  start_ = start;
  end_ = end;
  open_ = true;
}

std::vector<StepTraceRow> step_trace(const TraceModel& m) {
  // m.slices is in start order (compute_self_times): each window scans only
  // the slices that start within `longest` before it, so the pass is about
  // O(n log n) and copies nothing. Clipping to the window keeps the start
  // order (starts before the window all become the window's start), so the
  // union is swept as the slices go by.
  uint64_t longest = 0;
  for (const Slice& s : m.slices) {
    if (!m.is_step(s)) longest = std::max(longest, m.duration(s));
  }
  auto starts_before = [](const Slice& s, uint64_t t) { return s.start_ns < t; };
  std::vector<StepTraceRow> rows;
  for (const StepWindow& w : m.steps) {
    StepTraceRow row;
    row.step = w.number;
    row.step_ns = w.end_ns - w.start_ns;
    UnionLength computing;
    uint64_t first_start = w.end_ns;
    uint64_t from = w.start_ns > longest ? w.start_ns - longest : 0;
    auto it = std::lower_bound(m.slices.begin(), m.slices.end(), from, starts_before);
    for (; it != m.slices.end() && it->start_ns < w.end_ns; ++it) {
      uint64_t end = m.end(*it);
      if (m.is_step(*it) || end <= w.start_ns) continue;
      uint64_t cs = std::max(it->start_ns, w.start_ns), ce = std::min(end, w.end_ns);
      if (ce > cs) {
        computing.add(cs, ce);
        first_start = std::min(first_start, cs);
      }
    }
    row.computing_ns = computing.total();
    row.free_ns = row.step_ns - row.computing_ns;
    row.preparing_ns = first_start == w.end_ns ? 0 : first_start - w.start_ns;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace trainprof::analysis
