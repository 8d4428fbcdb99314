// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/timeline.h"

#include <algorithm>
#include <cstring>

namespace trainprof::analysis {

void order_thread_slices(const TraceModel& m, std::vector<Slice>& v) {
  TimelineOrder before{m};
  // Nested ranges move each slice once per enclosing range; far more than
  // that means the input is not in end order and a sort is cheaper.
  const uint64_t budget = 64 * static_cast<uint64_t>(v.size()) + 65536;
  uint64_t moved = 0;
  Slice* d = v.data();
  for (size_t i = 1; i < v.size(); ++i) {
    if (before(d[i - 1], d[i])) continue;  // a leaf, or a sibling after its predecessor
    // v[0, i) is ordered and v[i] belongs before v[i - 1] (or is equal to
    // it and, recorded later, encloses it): gallop back to bracket its
    // place, then search the bracket (cost: log of the distance).
    const Slice s = d[i];
    size_t hi = i - 1;  // s belongs before d[hi]
    size_t lo = 0;
    for (size_t step = 1; hi >= step; step *= 2) {
      if (before(d[hi - step], s)) {
        lo = hi - step + 1;
        break;
      }
      hi -= step;
    }
    // Before every slice it does not follow: the first of equals.
    size_t at = static_cast<size_t>(std::lower_bound(d + lo, d + hi, s, before) - d);
    std::memmove(d + at + 1, d + at, (i - at) * sizeof(Slice));
    d[at] = s;
    moved += i - at;
    if (moved > budget) {
      // Sort the rest with the same rule (equals latest-recorded first:
      // reversed, then stable), and merge it in ahead of equals already placed.
      auto rest = v.begin() + static_cast<std::ptrdiff_t>(i + 1);
      std::ptrdiff_t rest_size = v.end() - rest;
      std::reverse(rest, v.end());
      std::stable_sort(rest, v.end(), before);
      std::rotate(v.begin(), rest, v.end());
      std::inplace_merge(v.begin(), v.begin() + rest_size, v.end(), before);
      return;
    }
  }
}

void order_timeline(TraceModel& m) {
  for (ThreadSlices& t : m.threads) order_thread_slices(m, t.slices);
  m.sort_threads();
}

namespace {

std::vector<std::span<const Slice>> every_thread(const TraceModel& m) {
  std::vector<std::span<const Slice>> spans;
  for (const ThreadSlices& t : m.threads) spans.emplace_back(t.slices);
  return spans;
}

}  // namespace

TimelineMerge::TimelineMerge(const TraceModel& m) : TimelineMerge(m, every_thread(m)) {}

TimelineMerge::TimelineMerge(const TraceModel& m, const std::vector<std::span<const Slice>>& spans)
    : before_{m} {
  for (std::span<const Slice> span : spans) {
    if (!span.empty()) heap_.push_back(Cursor{span.data(), span.data() + span.size()});
  }
  // std heaps put the largest first: "larger" here is earlier.
  std::make_heap(heap_.begin(), heap_.end(),
                 [this](const Cursor& a, const Cursor& b) { return before_(*b.at, *a.at); });
}

const Slice* TimelineMerge::next() {
  if (heap_.empty()) return nullptr;
  Cursor& top = heap_.front();
  const Slice* s = top.at++;
  if (top.at == top.end) {
    top = heap_.back();
    heap_.pop_back();
  }
  if (heap_.size() == 2) {
    // Two busy threads interleave finely: choose without a branch.
    size_t second_first = before_(*heap_[1].at, *heap_[0].at);
    Cursor c0 = heap_[second_first], c1 = heap_[1 - second_first];
    heap_[0] = c0;
    heap_[1] = c1;
  } else {
    sift_down();
  }
  return s;
}

// Restores the heap after its top cursor advanced (one path, root to leaf).
void TimelineMerge::sift_down() {
  size_t n = heap_.size();
  size_t i = 0;
  for (;;) {
    size_t first = 2 * i + 1;
    if (first >= n) return;
    size_t child = first + 1 < n && before_(*heap_[first + 1].at, *heap_[first].at) ? first + 1 : first;
    if (!before_(*heap_[child].at, *heap_[i].at)) return;
    std::swap(heap_[i], heap_[child]);
    i = child;
  }
}

}  // namespace trainprof::analysis
