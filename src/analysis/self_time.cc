// Copyright trainprof authors. Self time: what a range spent outside its children.
#include <algorithm>

#include "analysis/passes.h"

namespace trainprof::analysis {

void compute_self_times(TraceModel& m) {
  // Parents first on equal start: longer first.
  std::sort(m.slices.begin(), m.slices.end(), [](const Slice& a, const Slice& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<size_t> stack;  // indices of open ancestors on the current thread
  for (size_t i = 0; i < m.slices.size(); ++i) {
    Slice& s = m.slices[i];
    s.self_ns = s.duration();
    if (i == 0 || m.slices[i - 1].tid != s.tid) stack.clear();
    while (!stack.empty() && m.slices[stack.back()].end_ns <= s.start_ns) stack.pop_back();
    if (!stack.empty()) {
      Slice& parent = m.slices[stack.back()];
      // A child that outlives its parent (ranges ended out of order) only
      // takes the part that overlaps.
      uint64_t overlap = std::min(parent.end_ns, s.end_ns) - s.start_ns;
      parent.self_ns -= std::min(parent.self_ns, overlap);
    }
    stack.push_back(i);
  }
}

}  // namespace trainprof::analysis
