// Copyright trainprof authors. Step-time breakdown (step_trace_time.csv).
//
// Per step window: Computing is the union of operator and range intervals on
// every thread, clipped to the window; Free is the window minus Computing and
// Communication; Preparing is the gap from the step's start to its first
// computing activity. The communication columns stay 0 until communication
// data is collected.
#include <algorithm>
#include <span>

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

namespace {

// One thread's computing time in a step window as disjoint intervals in
// start order: its slices clipped to the window, overlapping ones joined
// (nested slices vanish into their parents). Threads are merged at this
// level, an interval per top-level slice, not per slice.
class ThreadIntervals {
 public:
  ThreadIntervals(const TraceModel& m, std::span<const Slice> slices, const StepWindow& w)
      : m_(&m), at_(slices.data()), end_(slices.data() + slices.size()), w_(&w) {
    advance();
  }
  bool done() const { return done_; }
  uint64_t start() const { return start_; }
  uint64_t end() const { return end_ns_; }

  void advance() {
    done_ = true;
    for (; at_ != end_; ++at_) {
      uint64_t cs, ce;
      if (!clip(*at_, &cs, &ce)) continue;
      if (!done_ && cs > end_ns_) return;  // the next interval starts here
      if (done_) start_ = cs;
      end_ns_ = done_ ? ce : std::max(end_ns_, ce);
      done_ = false;
    }
  }

 private:
  bool clip(const Slice& s, uint64_t* cs, uint64_t* ce) const {
    if (m_->is_step(s)) return false;
    *cs = std::max(s.start_ns, w_->start_ns);
    *ce = std::min(m_->end(s), w_->end_ns);
    return *ce > *cs;
  }

  const TraceModel* m_;
  const Slice* at_;
  const Slice* end_;
  const StepWindow* w_;
  bool done_ = true;
  uint64_t start_ = 0, end_ns_ = 0;
};

// The rows of `steps` from a window that holds every slice overlapping them.
std::vector<StepTraceRow> step_rows(const TraceModel& m, std::span<const StepWindow> steps) {
  // Each thread's slices are in start order: a window looks only at the
  // slices that start within `longest` before it, so the pass is about
  // O(n log n) and copies nothing. Clipping to the window keeps the start
  // order (starts before the window all become the window's start), so the
  // union is swept as the threads' intervals go by.
  uint64_t longest = 0;
  for (const ThreadSlices& t : m.threads) {
    for (const Slice& s : t.slices) {
      if (!m.is_step(s)) longest = std::max(longest, m.duration(s));
    }
  }
  auto starts_before = [](const Slice& s, uint64_t t) { return s.start_ns < t; };
  std::vector<StepTraceRow> rows;
  std::vector<ThreadIntervals> threads;
  for (const StepWindow& w : steps) {
    StepTraceRow row;
    row.step = w.number;
    row.step_ns = w.end_ns - w.start_ns;
    uint64_t from = w.start_ns > longest ? w.start_ns - longest : 0;
    threads.clear();
    for (const ThreadSlices& t : m.threads) {
      auto begin = std::lower_bound(t.slices.begin(), t.slices.end(), from, starts_before);
      auto end = std::lower_bound(begin, t.slices.end(), w.end_ns, starts_before);
      ThreadIntervals intervals(m, {begin, end}, w);
      if (!intervals.done()) threads.push_back(intervals);
    }
    UnionLength computing;
    uint64_t first_start = w.end_ns;
    while (!threads.empty()) {
      auto next = std::min_element(threads.begin(), threads.end(),
                                   [](const auto& a, const auto& b) { return a.start() < b.start(); });
      computing.add(next->start(), next->end());
      first_start = std::min(first_start, next->start());
      next->advance();
      if (next->done()) threads.erase(next);
    }
    row.computing_ns = computing.total();
    row.free_ns = row.step_ns - row.computing_ns;
    row.preparing_ns = first_start == w.end_ns ? 0 : first_start - w.start_ns;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

StepTraceAccumulator::StepTraceAccumulator(const TraceModel& m) : steps_(m.steps) {
  std::sort(steps_.begin(), steps_.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.start_ns < b.start_ns; });
}

void StepTraceAccumulator::add_window(const TraceModel& m, uint64_t start_ns, uint64_t end_ns) {
  while (next_ < steps_.size() && steps_[next_].start_ns < end_ns) ++next_;
  std::vector<StepWindow> parts;
  std::vector<size_t> of;
  for (size_t i = first_open_; i < next_; ++i) {
    const StepWindow& s = steps_[i];
    if (s.end_ns <= start_ns) continue;
    parts.push_back({s.number, std::max(s.start_ns, start_ns), std::min(s.end_ns, end_ns)});
    of.push_back(i);
  }
  std::vector<StepTraceRow> rows = step_rows(m, parts);
  for (size_t k = 0; k < rows.size(); ++k) {
    Parts& p = parts_[of[k]];
    p.row.computing_ns += rows[k].computing_ns;
    if (!p.active && rows[k].computing_ns > 0) {
      p.row.preparing_ns = parts[k].start_ns - steps_[of[k]].start_ns + rows[k].preparing_ns;
      p.active = true;
    }
  }
  while (first_open_ < next_ && steps_[first_open_].end_ns <= end_ns) ++first_open_;
}

std::vector<StepTraceRow> StepTraceAccumulator::finish() const {
  std::vector<StepTraceRow> rows;
  for (size_t i = 0; i < steps_.size(); ++i) {
    StepTraceRow row = parts_[i].row;
    row.step = steps_[i].number;
    row.step_ns = steps_[i].end_ns - steps_[i].start_ns;
    row.free_ns = row.step_ns - row.computing_ns;
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const StepTraceRow& a, const StepTraceRow& b) { return a.step < b.step; });
  return rows;
}

std::vector<StepTraceRow> step_trace(const TraceModel& m) {
  StepTraceAccumulator steps(m);
  steps.add_window(m, 0, UINT64_MAX);
  return steps.finish();
}

}  // namespace trainprof::analysis
