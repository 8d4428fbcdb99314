// Copyright trainprof authors. Self time: what a range spent outside its children.
#include <algorithm>
#include <string>
#include <unordered_map>

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
  // One global order serves every later pass: time, then longer (the parent)
  // first, then key. Each thread keeps its own stack of open ancestors.
  std::sort(m.slices.begin(), m.slices.end(), [&m](const Slice& a, const Slice& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.dur32 != b.dur32) {
      if (a.dur32 != kLongDuration && b.dur32 != kLongDuration) return a.dur32 > b.dur32;
      return m.duration(a) > m.duration(b);
    }
    if (a.dur32 == kLongDuration && m.duration(a) != m.duration(b)) return m.duration(a) > m.duration(b);
    return a.key < b.key;
  });
  m.self_by_key.assign(m.keys.size(), 0);
  std::unordered_map<uint32_t, std::vector<Open>> stacks;  // tid -> open slices
  auto close = [&m](const Open& o) { m.self_by_key[o.key] += o.self_ns; };
  uint32_t cached_tid = ~0u;
  std::vector<Open>* stack = nullptr;
  uint64_t crossings = 0;
  std::string example;
  for (const Slice& s : m.slices) {
    uint32_t tid = m.tid(s);
    if (tid != cached_tid) {
      stack = &stacks[tid];
      cached_tid = tid;
    }
    uint64_t end = m.end(s);
    while (!stack->empty() && stack->back().end_ns <= s.start_ns) {
      close(stack->back());
      stack->pop_back();
    }
    if (!stack->empty()) {
      Open& parent = stack->back();
      // A child that outlives its parent (ranges ended out of order) only
      // takes the part that overlaps.
      uint64_t overlap = std::min(parent.end_ns, end) - s.start_ns;
      parent.self_ns -= std::min(parent.self_ns, overlap);
      if (end > parent.end_ns && crossings++ == 0) {
        example = "'" + m.name(m.keys[s.key].name) + "' ends after '" + m.name(m.keys[parent.key].name) +
                  "' that encloses its start";
      }
    }
    stack->push_back(Open{end, end - s.start_ns, s.key});
  }
  for (auto& [tid, open] : stacks) {
    for (const Open& o : open) close(o);
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
