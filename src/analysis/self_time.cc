// Copyright trainprof authors. Self time: what a range spent outside its children.
#include <algorithm>
#include <string>

#include "analysis/passes.h"

namespace trainprof::analysis {
namespace {

struct Open {
  uint64_t end_ns;
  uint64_t self_ns;  // duration minus the children seen so far
  uint32_t key;
};

}  // namespace

void compute_self_times(TraceModel& m) {
  m.self_by_key.assign(m.keys.size(), 0);
  auto close = [&m](const Open& o) { m.self_by_key[o.key] += o.self_ns; };
  uint64_t crossings = 0;
  std::string example;
  std::vector<Open> stack;
  // A thread's slices are in timeline order: a parent comes before its
  // children, and a slice's parent is the innermost open one.
  for (const ThreadSlices& thread : m.threads) {
    for (const Slice& s : thread.slices) {
      uint64_t end = m.end(s);
      while (!stack.empty() && stack.back().end_ns <= s.start_ns) {
        close(stack.back());
        stack.pop_back();
      }
      if (!stack.empty()) {
        Open& parent = stack.back();
        // A child that outlives its parent (ranges ended out of order) only
        // takes the part that overlaps.
        uint64_t overlap = std::min(parent.end_ns, end) - s.start_ns;
        parent.self_ns -= std::min(parent.self_ns, overlap);
        if (end > parent.end_ns && crossings++ == 0) {
          example = "'" + m.name(m.keys[s.key].name) + "' ends after '" + m.name(m.keys[parent.key].name) +
                    "' that encloses its start";
        }
      }
      stack.push_back(Open{end, end - s.start_ns, s.key});
    }
    for (const Open& o : stack) close(o);
    stack.clear();
  }
  if (crossings > 0) {
    // Scoped ranges always nest; this happens with a range left open across
    // Profiler::step(), or with range objects destroyed out of order.
    m.warnings.push_back(std::to_string(crossings) +
                         " range(s) overlap their enclosing range without nesting (" + example +
                         "); timeline viewers may draw them apart");
  }
}

}  // namespace trainprof::analysis
