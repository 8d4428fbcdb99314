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

// Timeline order: start, then longer (the parent) first, then key.
struct TimelineOrder {
  const TraceModel& m;
  bool operator()(const Slice& a, const Slice& b) const {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.dur32 != b.dur32) {
      if (a.dur32 != kLongDuration && b.dur32 != kLongDuration) return a.dur32 > b.dur32;
      return m.duration(a) > m.duration(b);
    }
    if (a.dur32 == kLongDuration && m.duration(a) != m.duration(b)) return m.duration(a) > m.duration(b);
    return a.key < b.key;
  }
};

}  // namespace

void compute_self_times(TraceModel& m) {
  // One global order serves every later pass. (An in-place radix pass on the
  // start time was tried: its random-access permutation cost what it saved.)
  std::sort(m.slices.begin(), m.slices.end(), TimelineOrder{m});
  m.self_by_key.assign(m.keys.size(), 0);
  // One stack of open slices per thread, found through the slice's key.
  std::unordered_map<uint32_t, uint32_t> thread_index;
  std::vector<uint32_t> stack_of_key(m.keys.size());
  for (size_t k = 0; k < m.keys.size(); ++k) {
    stack_of_key[k] =
        thread_index.emplace(m.keys[k].tid, static_cast<uint32_t>(thread_index.size())).first->second;
  }
  std::vector<std::vector<Open>> stacks(thread_index.size());
  auto close = [&m](const Open& o) { m.self_by_key[o.key] += o.self_ns; };
  uint64_t crossings = 0;
  std::string example;
  for (const Slice& s : m.slices) {
    std::vector<Open>* stack = &stacks[stack_of_key[s.key]];
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
  for (const auto& open : stacks) {
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
