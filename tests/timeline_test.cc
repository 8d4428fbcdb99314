// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Timeline order: the per-thread ordering and the merge must give exactly the
// order's definition, whatever the input.
#include "analysis/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

namespace trainprof::analysis {
namespace {

bool same(const Slice& a, const Slice& b) {
  return a.start_ns == b.start_ns && a.dur32 == b.dur32 && a.key == b.key;
}

// The definition: start, longer first, and among equal extents the one
// recorded later first.
std::vector<Slice> by_definition(const TraceModel& m, std::vector<Slice> recorded) {
  std::reverse(recorded.begin(), recorded.end());
  std::stable_sort(recorded.begin(), recorded.end(), TimelineOrder{m});
  return recorded;
}

void expect_ordered_by_definition(const TraceModel& m, std::vector<Slice> input) {
  std::vector<Slice> expected = by_definition(m, input);
  order_thread_slices(m, input);
  ASSERT_EQ(input.size(), expected.size());
  for (size_t i = 0; i < input.size(); ++i) {
    ASSERT_TRUE(same(input[i], expected[i])) << "first difference at " << i;
  }
}

// Ranges as a recorder sees them: nested scopes of random depth and width,
// each written when it ends (children before their parent).
void nested(std::mt19937_64& rng, uint64_t start, uint64_t dur, int depth, uint32_t keys,
            std::vector<Slice>* out) {
  if (depth > 0 && dur > 8) {
    uint64_t t = start + rng() % 3;
    int children = static_cast<int>(rng() % 5);
    for (int c = 0; c < children && t < start + dur; ++c) {
      uint64_t len = std::min<uint64_t>(1 + rng() % (dur / 2 + 1), start + dur - t);
      nested(rng, t, len, depth - 1, keys, out);
      t += len + rng() % 2;  // siblings may touch (equal end and start)
    }
  }
  out->push_back(Slice{start, static_cast<uint32_t>(dur), static_cast<uint32_t>(rng() % keys)});
}

TraceModel model_with_keys(uint32_t n) {
  TraceModel m;
  m.strings = {"", "x"};
  for (uint32_t k = 0; k < n; ++k) m.key_of({.tid = k, .name = 1});
  return m;
}

TEST(Timeline, EndOrderedNestedRangesComeOutInTimelineOrder) {
  TraceModel m = model_with_keys(4);
  std::mt19937_64 rng(7);
  std::vector<Slice> slices;
  uint64_t t = 1000;
  for (int top = 0; top < 300; ++top) {
    nested(rng, t, 200 + rng() % 2000, 6, 4, &slices);
    t += 3000;
  }
  ASSERT_GT(slices.size(), 1000u);
  expect_ordered_by_definition(m, slices);
}

TEST(Timeline, EqualStartsPutTheParentFirst) {
  TraceModel m = model_with_keys(4);
  // Recorded at their ends: child [10, 20), then parent [10, 40); then a
  // chain of three ranges of equal extent at the clock's resolution (inner
  // first, whatever their keys), then a sibling.
  std::vector<Slice> v = {{10, 10, 2}, {10, 30, 1}, {50, 5, 0}, {50, 5, 3}, {50, 5, 1}, {55, 1, 0}};
  order_thread_slices(m, v);
  EXPECT_TRUE(same(v[0], Slice{10, 30, 1}));
  EXPECT_TRUE(same(v[1], Slice{10, 10, 2}));
  EXPECT_TRUE(same(v[2], Slice{50, 5, 1}));  // the outermost: recorded last
  EXPECT_TRUE(same(v[3], Slice{50, 5, 3}));
  EXPECT_TRUE(same(v[4], Slice{50, 5, 0}));
  EXPECT_TRUE(same(v[5], Slice{55, 1, 0}));
}

TEST(Timeline, ArbitraryOrderFallsBackToASortWithTheSameRule) {
  // Reversed and shuffled input is not end order: the move budget runs out
  // mid-way and the result must still be exact, ties included (few distinct
  // values make many).
  TraceModel m = model_with_keys(5);
  std::mt19937_64 rng(11);
  std::vector<Slice> v;
  for (int i = 0; i < 20000; ++i) {
    v.push_back(Slice{rng() % 500, static_cast<uint32_t>(rng() % 10), static_cast<uint32_t>(rng() % 5)});
  }
  expect_ordered_by_definition(m, v);
  std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) { return a.start_ns > b.start_ns; });
  expect_ordered_by_definition(m, v);
}

TEST(Timeline, LongDurationsOrderByTheirFullLength) {
  TraceModel m = model_with_keys(2);
  // Two slices too long for dur32 at the same start: the longer is the parent.
  m.long_durations[{100, 0}] = 5'000'000'000ull;
  m.long_durations[{100, 1}] = 6'000'000'000ull;
  std::vector<Slice> v = {{100, kLongDuration, 0}, {100, 7, 0}, {100, kLongDuration, 1}};
  order_thread_slices(m, v);
  EXPECT_EQ(v[0].key, 1u);
  EXPECT_EQ(v[1].key, 0u);
  EXPECT_EQ(v[1].dur32, kLongDuration);
  EXPECT_EQ(v[2].dur32, 7u);
}

// The merge of per-thread orders equals a global stable sort of them (keys
// differ between threads), for one, two (the branch-free path) and many
// threads (the heap), with empty threads too.
TEST(Timeline, MergeOfThreadsEqualsOneGlobalSort) {
  for (uint32_t threads : {1u, 2u, 3u, 7u}) {
    TraceModel m = model_with_keys(threads + 1);
    std::mt19937_64 rng(threads);
    for (uint32_t t = 0; t < threads; ++t) {
      uint64_t at = rng() % 50;
      for (int top = 0; top < 60; ++top) {
        std::vector<Slice> tree;
        nested(rng, at, 100 + rng() % 400, 4, 1, &tree);
        for (Slice s : tree) m.add_slice(Slice{s.start_ns, s.dur32, t});  // key t lives on thread t
        at += 500 + rng() % 50;
      }
    }
    m.thread_of(1000);  // a thread without slices
    std::vector<Slice> all;
    for (const ThreadSlices& t : m.threads) {
      std::vector<Slice> ordered = by_definition(m, t.slices);
      all.insert(all.end(), ordered.begin(), ordered.end());
    }
    std::stable_sort(all.begin(), all.end(), MergeOrder{TimelineOrder{m}});
    order_timeline(m);
    ASSERT_TRUE(std::is_sorted(m.threads.begin(), m.threads.end(),
                               [](const ThreadSlices& a, const ThreadSlices& b) { return a.tid < b.tid; }));
    TimelineMerge merge(m);
    size_t i = 0;
    while (const Slice* s = merge.next()) {
      ASSERT_LT(i, all.size());
      ASSERT_TRUE(same(*s, all[i])) << threads << " threads, first difference at " << i;
      ++i;
    }
    EXPECT_EQ(i, all.size()) << threads << " threads";
    EXPECT_EQ(merge.peek(), nullptr);
  }
}

TEST(Timeline, MergeOfSpansStaysInsideThem) {
  TraceModel m = model_with_keys(2);
  std::vector<Slice> a = {{1, 1, 0}, {3, 1, 0}, {5, 1, 0}}, b = {{2, 1, 1}, {4, 1, 1}, {6, 1, 1}};
  TimelineMerge merge(m, {std::span<const Slice>(a).subspan(1), std::span<const Slice>(b).first(2)});
  std::vector<uint64_t> starts;
  while (const Slice* s = merge.next()) starts.push_back(s->start_ns);
  EXPECT_EQ(starts, (std::vector<uint64_t>{2, 3, 4, 5}));
}

}  // namespace
}  // namespace trainprof::analysis
