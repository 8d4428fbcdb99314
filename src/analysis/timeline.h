// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Timeline order: how slices are laid out for every pass and exporter that
// needs time order.
//
// A slice comes before another when it starts earlier; on equal starts the
// longer one (the parent) first, so that viewers see parents before their
// children. Two slices of one thread with the same start and duration (a
// range and its only child, equal at the clock's resolution) keep the order
// that makes the parent first: the one recorded later, since ranges are
// recorded as they end. Across threads, such ties go by key, so that
// re-analysis writes identical bytes.
#ifndef TRAINPROF_ANALYSIS_TIMELINE_H_
#define TRAINPROF_ANALYSIS_TIMELINE_H_

#include <span>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// Start, then longer first. Slices of equal extent compare equal.
struct TimelineOrder {
  const TraceModel& m;
  // Inlined into the sort and merge loops: nearly every pair differs in start.
  bool operator()(const Slice& a, const Slice& b) const {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.dur32 != kLongDuration && b.dur32 != kLongDuration) return a.dur32 > b.dur32;
    return m.duration(a) > m.duration(b);
  }
};

// TimelineOrder, then key: a total order between slices of different threads.
struct MergeOrder {
  TimelineOrder timeline;
  bool operator()(const Slice& a, const Slice& b) const {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;  // nearly always decides
    if (timeline(a, b)) return true;
    return !timeline(b, a) && a.key < b.key;
  }
};

// Puts one thread's slices, given in the order they were recorded, in
// timeline order. Ranges are recorded when they end, so a thread's slices
// arrive with each parent right after its descendants: moving each slice
// back past the ones that belong after it costs its number of descendants,
// about n x nesting depth 16-byte moves in all, where a comparison sort
// costs n log n comparisons. Input of another shape (ranges that do not
// nest, files of one thread out of order) is still ordered: past a budget of
// moves the rest is done by a stable sort of the reversed input.
void order_thread_slices(const TraceModel& m, std::vector<Slice>& slices);

// Orders every thread's slices and sorts the threads by tid.
void order_timeline(TraceModel& m);

// Walks the slices of several ordered spans (one per thread) in timeline
// order: a k-way merge over a small heap, nothing copied.
class TimelineMerge {
 public:
  // Every slice of the model.
  explicit TimelineMerge(const TraceModel& m);
  TimelineMerge(const TraceModel& m, const std::vector<std::span<const Slice>>& spans);

  // The next slice in timeline order, nullptr at the end.
  const Slice* peek() const { return heap_.empty() ? nullptr : heap_.front().at; }
  const Slice* next();

 private:
  struct Cursor {
    const Slice* at;
    const Slice* end;
  };
  void sift_down();

  MergeOrder before_;
  std::vector<Cursor> heap_;  // min-heap by the cursors' current slice
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_TIMELINE_H_
