// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The merges of rows, each field given a known answer: a merge that keeps the
// last part's value instead of the largest (or drops a field) fails here,
// whatever the timings of a recorded run happen to be.
#include <gtest/gtest.h>

#include <string>

#include "analysis/passes.h"
#include "pipeline/key_average_merge.h"

namespace trainprof {
namespace {

// A field added to a row fails the build here until its merge and its
// known answer below are written.
static_assert(sizeof(analysis::SliceTotals) == 8 * sizeof(uint64_t),
              "SliceTotals changed: merge the new field in merge_into and test it here");
static_assert(sizeof(KeyAverage) == 4 * sizeof(std::string) + 12 * sizeof(uint64_t),
              "KeyAverage changed: merge the new field in merge_key_average and test it here");

analysis::SliceTotals totals(uint64_t count, uint64_t total, uint64_t min, uint64_t max, uint64_t self,
                             uint64_t flops, uint64_t device_self, uint64_t device_total) {
  return {count, total, min, max, self, flops, device_self, device_total};
}

void expect_totals(const analysis::SliceTotals& t, const analysis::SliceTotals& want) {
  EXPECT_EQ(t.count, want.count);
  EXPECT_EQ(t.total_ns, want.total_ns);
  EXPECT_EQ(t.min_ns, want.min_ns);
  EXPECT_EQ(t.max_ns, want.max_ns);
  EXPECT_EQ(t.self_ns, want.self_ns);
  EXPECT_EQ(t.flops, want.flops);
  EXPECT_EQ(t.device_self_ns, want.device_self_ns);
  EXPECT_EQ(t.device_total_ns, want.device_total_ns);
}

// Two threads' totals of one name, merged in either order: counts and times
// add up, the shortest call is the smaller minimum, the longest the larger
// maximum.
TEST(Merges, SliceTotalsEveryFieldInEitherOrder) {
  analysis::SliceTotals a = totals(3, 900, 100, 500, 700, 30, 40, 50);
  analysis::SliceTotals b = totals(2, 300, 120, 180, 200, 7, 11, 13);
  analysis::SliceTotals want = totals(5, 1200, 100, 500, 900, 37, 51, 63);
  for (bool a_first : {true, false}) {
    analysis::SliceTotals merged;
    analysis::merge_into(merged, a_first ? a : b);
    analysis::merge_into(merged, a_first ? b : a);
    expect_totals(merged, want);
  }
  // A part with a smaller minimum and a smaller maximum than the first.
  analysis::SliceTotals low = totals(1, 50, 50, 50, 50, 0, 0, 0);
  analysis::SliceTotals merged = a;
  analysis::merge_into(merged, low);
  expect_totals(merged, totals(4, 950, 50, 500, 750, 30, 40, 50));
  // Nothing merged changes nothing; the first part is taken whole.
  analysis::merge_into(merged, analysis::SliceTotals{});
  expect_totals(merged, totals(4, 950, 50, 500, 750, 30, 40, 50));
  analysis::SliceTotals empty;
  analysis::merge_into(empty, b);
  expect_totals(empty, b);
}

KeyAverage row(uint64_t count, uint64_t first_start, const std::string& parent, int64_t base) {
  KeyAverage r;
  r.name = "aten::mm";
  r.count = count;
  r.total_ns = 100 * static_cast<uint64_t>(base);
  r.self_ns = 60 * static_cast<uint64_t>(base);
  r.device_total_ns = 40 * static_cast<uint64_t>(base);
  r.device_self_ns = 30 * static_cast<uint64_t>(base);
  r.flops = 1000 * static_cast<uint64_t>(base);
  r.cpu_memory = 64 * base;
  r.self_cpu_memory = -32 * base;  // freed more than allocated
  r.device_memory = 512 * base;
  r.self_device_memory = 256 * base;
  r.first_start_ns = first_start;
  r.first_parent = parent;
  return r;
}

TEST(Merges, KeyAverageEveryFieldInEitherOrder) {
  KeyAverage early = row(2, 1000, "forward", 1), late = row(3, 5000, "", 2);
  for (bool early_first : {true, false}) {
    KeyAverage merged;
    merged.name = "aten::mm";
    pipeline::merge_key_average(merged, early_first ? early : late);
    pipeline::merge_key_average(merged, early_first ? late : early);
    EXPECT_EQ(merged.count, 5u);
    EXPECT_EQ(merged.total_ns, 300u);
    EXPECT_EQ(merged.self_ns, 180u);
    EXPECT_EQ(merged.device_total_ns, 120u);
    EXPECT_EQ(merged.device_self_ns, 90u);
    EXPECT_EQ(merged.flops, 3000u);
    EXPECT_EQ(merged.cpu_memory, 192);
    EXPECT_EQ(merged.self_cpu_memory, -96);
    EXPECT_EQ(merged.device_memory, 1536);
    EXPECT_EQ(merged.self_device_memory, 768);
    // The earliest call, whichever part held it.
    EXPECT_EQ(merged.first_start_ns, 1000u);
    EXPECT_EQ(merged.first_parent, "forward");
    // What identifies the row is the caller's.
    EXPECT_EQ(merged.name, "aten::mm");
    EXPECT_EQ(merged.input_shapes, "");
  }
}

}  // namespace
}  // namespace trainprof
