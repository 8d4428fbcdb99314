// Copyright trainprof authors. Self time: what a range spent outside its children.
#include <algorithm>
#include <string>

#include "analysis/passes.h"

namespace trainprof::analysis {

SelfTimeAccumulator::SelfTimeAccumulator(const TraceModel& m)
    : self_by_key_(m.keys.size(), 0), stacks_(m.threads.size()) {}

void SelfTimeAccumulator::add_window(const TraceModel& m) {
  if (stacks_.size() < m.threads.size()) stacks_.resize(m.threads.size());
  // A thread's slices are in timeline order: a parent comes before its
  // children, and a slice's parent is the innermost open one. Each thread's
  // stack goes on from the window before.
  for (size_t t = 0; t < m.threads.size(); ++t) {
    const ThreadSlices& thread = m.threads[t];
    std::vector<Open>& stack = stacks_[t];
    for (size_t i = thread.first_own; i < thread.slices.size(); ++i) {
      const Slice& s = thread.slices[i];
      uint64_t end = m.end(s);
      while (!stack.empty() && stack.back().end_ns <= s.start_ns) close(stack);
      if (!stack.empty()) {
        Open& parent = stack.back();
        if (parent.key >= child_calls_by_key_.size()) child_calls_by_key_.resize(parent.key + 1, 0);
        ++child_calls_by_key_[parent.key];
        // A child that outlives its parent (ranges ended out of order) only
        // takes the part that overlaps.
        uint64_t overlap = std::min(parent.end_ns, end) - s.start_ns;
        parent.self_ns -= std::min(parent.self_ns, overlap);
        if (end > parent.end_ns && crossings_++ == 0) {
          example_ = "'" + m.name(m.keys[s.key].name) + "' ends after '" + m.name(m.keys[parent.key].name) +
                     "' that encloses its start";
        }
      }
      stack.push_back(Open{end, end - s.start_ns, s.key});
    }
  }
}

void SelfTimeAccumulator::finish(TraceModel& m) {
  for (std::vector<Open>& stack : stacks_) {
    while (!stack.empty()) close(stack);
  }
  self_by_key_.resize(m.keys.size(), 0);
  m.self_by_key = std::move(self_by_key_);
  child_calls_by_key_.resize(m.keys.size(), 0);
  m.child_calls_by_key = std::move(child_calls_by_key_);
  if (crossings_ > 0) {
    // Scoped ranges always nest; this happens with a range left open across
    // Profiler::step(), or with range objects destroyed out of order.
    m.warnings.push_back(std::to_string(crossings_) +
                         " range(s) overlap their enclosing range without nesting (" + example_ +
                         "); timeline viewers may draw them apart");
  }
}

void SelfTimeAccumulator::close(std::vector<Open>& stack) {
  const Open& o = stack.back();
  if (o.key >= self_by_key_.size()) self_by_key_.resize(o.key + 1, 0);
  self_by_key_[o.key] += o.self_ns;
  stack.pop_back();
}

void compute_self_times(TraceModel& m) {
  SelfTimeAccumulator self(m);
  self.add_window(m);
  self.finish(m);
}

}  // namespace trainprof::analysis
