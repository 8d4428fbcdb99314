// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Self time: what a range spent outside its children.
#include <algorithm>
#include <string>

#include "analysis/passes.h"

namespace trainprof::analysis {

namespace {

void add_at(std::vector<uint64_t>& v, uint32_t key, uint64_t value) {
  if (key >= v.size()) v.resize(key + 1, 0);
  v[key] += value;
}

}  // namespace

SelfTimeAccumulator::SelfTimeAccumulator(const TraceModel& m)
    : self_by_key_(m.keys.size(), 0),
      steps_(steps_by_start(m.steps)),
      start_up_(m.start_up),
      stacks_(m.threads.size()) {}

bool SelfTimeAccumulator::is_optimizer_step(const TraceModel& m, uint32_t key) {
  if (key >= optimizer_key_.size()) optimizer_key_.resize(m.keys.size(), 0);
  uint8_t& known = optimizer_key_[key];
  if (known == 0)
    known = m.name(m.keys[key].name).starts_with("Optimizer.step#") ? 2 : 1;  // a torch user scope
  return known == 2;
}

// A thread's slices come in start order: its cursor only moves forward.
SelfTimeAccumulator::Phase SelfTimeAccumulator::phase_of(size_t thread, uint64_t start_ns) {
  size_t& i = next_step_[thread];
  while (i < steps_.size() && steps_[i].end_ns <= start_ns) ++i;
  if (i < steps_.size() && steps_[i].start_ns <= start_ns) return kInStep;
  if (start_up_.number >= 0 && start_ns >= start_up_.start_ns && start_ns < start_up_.end_ns)
    return kInStartUp;
  return kOutside;
}

void SelfTimeAccumulator::add_window(const TraceModel& m) {
  if (stacks_.size() < m.threads.size()) stacks_.resize(m.threads.size());
  if (next_step_.size() < m.threads.size()) next_step_.resize(m.threads.size(), 0);
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
      Phase phase = m.is_step(s) ? kOutside : phase_of(t, s.start_ns);
      bool in_optimizer = !stack.empty() && (stack.back().in_optimizer || stack.back().optimizer);
      if (KeyTotals* in = totals_of(phase)) {
        add_at(in->calls, s.key, 1);
        add_at(in->total_ns, s.key, end - s.start_ns);
        if (in_optimizer) add_at(in->optimizer_calls, s.key, 1);
      }
      if (!stack.empty()) {
        Open& parent = stack.back();
        if (parent.key >= child_calls_by_key_.size()) child_calls_by_key_.resize(parent.key + 1, 0);
        ++child_calls_by_key_[parent.key];
        if (KeyTotals* in = totals_of(parent.phase)) add_at(in->child_calls, parent.key, 1);
        // A child that outlives its parent (ranges ended out of order) only
        // takes the part that overlaps.
        uint64_t overlap = std::min(parent.end_ns, end) - s.start_ns;
        parent.self_ns -= std::min(parent.self_ns, overlap);
        if (end > parent.end_ns && crossings_++ == 0) {
          example_ = "'" + m.name(m.keys[s.key].name) + "' ends after '" + m.name(m.keys[parent.key].name) +
                     "' that encloses its start";
        }
      }
      stack.push_back(Open{end, end - s.start_ns, s.key, phase, in_optimizer, is_optimizer_step(m, s.key)});
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
  m.in_steps = std::move(in_steps_);
  m.in_start_up = std::move(in_start_up_);
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
  if (KeyTotals* in = totals_of(o.phase)) {
    add_at(in->self_ns, o.key, o.self_ns);
    if (o.in_optimizer) add_at(in->optimizer_self_ns, o.key, o.self_ns);
  }
  stack.pop_back();
}

void compute_self_times(TraceModel& m) {
  SelfTimeAccumulator self(m);
  self.add_window(m);
  self.finish(m);
}

}  // namespace trainprof::analysis
