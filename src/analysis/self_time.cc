// Copyright trainprof authors. Self time: what a range spent outside its children.
#include <algorithm>
#include <unordered_map>

#include "analysis/passes.h"

namespace trainprof::analysis {

void compute_self_times(TraceModel& m) {
  // One global order serves every later pass: time, then longer (the parent)
  // first, then thread. Each thread keeps its own stack of open ancestors.
  std::sort(m.slices.begin(), m.slices.end(), [](const Slice& a, const Slice& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    if (a.tid != b.tid) return a.tid < b.tid;
    return a.name < b.name;
  });
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks;  // tid -> open slice indices
  uint32_t cached_tid = 0;
  std::vector<uint32_t>* stack = nullptr;
  for (size_t i = 0; i < m.slices.size(); ++i) {
    Slice& s = m.slices[i];
    s.self_ns = s.duration();
    if (stack == nullptr || s.tid != cached_tid) {
      stack = &stacks[s.tid];
      cached_tid = s.tid;
    }
    while (!stack->empty() && m.slices[stack->back()].end_ns <= s.start_ns) stack->pop_back();
    if (!stack->empty()) {
      Slice& parent = m.slices[stack->back()];
      // A child that outlives its parent (ranges ended out of order) only
      // takes the part that overlaps.
      uint64_t overlap = std::min(parent.end_ns, s.end_ns) - s.start_ns;
      parent.self_ns -= std::min(parent.self_ns, overlap);
    }
    stack->push_back(static_cast<uint32_t>(i));
  }
}

}  // namespace trainprof::analysis
