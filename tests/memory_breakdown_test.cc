// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The memory at each step's peak by class and site, and the sites that grow
// from step to step (analysis/ memory_breakdown.h), on reports and tags made by
// hand: exact answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/memory_breakdown.h"
#include "analysis/trace_model.h"
#include "raw/format.h"

namespace trainprof::analysis {
namespace {

enum Name : uint32_t {
  kStep0 = 1,
  kStep1,
  kStep2,
  kMm,
  kMmBackward,
  kRandn,
  kParameter,
  kGradient,
  kInput,
  kBogus,
};

size_t cls(MemoryClass c) {
  return static_cast<size_t>(c);
}

// Three steps of [0, 1000) ns each on thread 1. A parameter of 400 bytes
// allocated before the run (a tag, no report). In step s (base B = 1000 s):
// a batch of 100 bytes [B+10, B+950) tagged input; aten::mm allocates 200
// bytes at B+100 that the backward pass (its first node at B+500) frees at
// B+600: an activation; a temporary of 50 bytes [B+150, B+200); a gradient
// of 400 bytes [B+550, B+990) tagged at B+700; aten::randn keeps 30 bytes
// from B+800 on, never freed (a leak).
struct ReportedRun {
  TraceModel m;
  std::vector<uint32_t> keys;  // per report: operator key + 1
};

ReportedRun three_steps() {
  ReportedRun r;
  TraceModel& m = r.m;
  m.strings = {"",         "ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2",
               "aten::mm", "MmBackward0",    "aten::randn",    "parameter",
               "gradient", "input",          "bogus"};
  uint32_t mm = m.key_of({.tid = 1, .name = kMm, .is_op = true}) + 1;
  uint32_t randn = m.key_of({.tid = 1, .name = kRandn, .is_op = true}) + 1;
  uint32_t backward =
      m.key_of({.tid = 1, .name = kMmBackward, .is_op = true, .op_flags = raw::kOperatorBackward});
  uint64_t total = 400;  // the parameter
  struct Report {
    uint64_t ts, address;
    int64_t bytes;
    uint32_t key;
  };
  std::vector<Report> reports;
  for (uint64_t s = 0; s < 3; ++s) {
    uint64_t b = 1000 * s;
    m.steps.push_back({static_cast<int64_t>(s), b, b + 1000});
    reports.push_back({b + 10, 0x2000 + 0x100 * s, 100, 0});
    reports.push_back({b + 100, 0x3000, 200, mm});
    reports.push_back({b + 150, 0x4000, 50, 0});
    reports.push_back({b + 200, 0x4000, -50, 0});
    reports.push_back({b + 550, 0x5000, 400, 0});
    reports.push_back({b + 600, 0x3000, -200, 0});
    reports.push_back({b + 800, 0x6000 + 0x10 * s, 30, randn});
    reports.push_back({b + 950, 0x2000 + 0x100 * s, -100, 0});
    reports.push_back({b + 990, 0x5000, -400, 0});
    m.memory_tags.push_back({b + 20, 0x2000 + 0x100 * s, 100, 0, kInput});
    m.memory_tags.push_back({b + 700, 0x5000, 400, 0, kGradient});
    m.memory_tags.push_back({b + 710, 0x5000, 400, 0, kBogus});  // no front end's category: ignored
    m.op_links.push_back({b + 500, backward, 1, static_cast<int64_t>(s)});
  }
  // Tagged once the run is under way, it stands for the whole run.
  m.memory_tags.push_back(MemoryTag{900, 0x1000, 400, 0, kParameter});
  std::stable_sort(m.memory_tags.begin(), m.memory_tags.end(),
                   [](const MemoryTag& a, const MemoryTag& b) { return a.ts_ns < b.ts_ns; });
  for (const Report& rep : reports) {
    total += static_cast<uint64_t>(rep.bytes);  // wraps back on frees
    m.memory.push_back({rep.ts, rep.address, rep.bytes, total, total, 1, 0});
    r.keys.push_back(rep.key);
  }
  return r;
}

TEST(MemoryBreakdown, EachStepsPeakIsSplitByClassExactly) {
  ReportedRun r = three_steps();
  MemoryBreakdown b = memory_breakdown(r.m, r.keys);
  ASSERT_EQ(b.peaks.size(), 3u);
  EXPECT_EQ(b.tagged_before_run, 1u);
  for (uint64_t s = 0; s < 3; ++s) {
    const StepPeakBreakdown& p = b.peaks[s];
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(p.step, static_cast<int64_t>(s));
    // The peak is at B+550 (the gradient's allocation): the parameter, the
    // batch, the activation, the gradient and the earlier steps' leaks.
    EXPECT_EQ(p.peak_ns, 1000 * s + 550);
    EXPECT_EQ(p.peak_bytes, 1100 + 30 * s);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kParameter)], 400u);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kGradient)], 400u);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kActivation)], 200u);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kInput)], 100u);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kTemporary)], 0u);  // freed before the peak
    EXPECT_EQ(p.by_class[cls(MemoryClass::kOptimizerState)], 0u);
    EXPECT_EQ(p.by_class[cls(MemoryClass::kUnknown)], 30 * s);  // kept across a step's end, untagged
    ASSERT_FALSE(p.sites.empty());
    EXPECT_EQ(b.sites[p.sites[0].site], "(no operator)");  // the batch and the gradient: 500 bytes
    EXPECT_EQ(p.sites[0].bytes, 500u);
  }
  // The site of the activation.
  bool mm = false;
  for (const SiteBytes& s : b.peaks[0].sites) mm = mm || (b.sites[s.site] == "aten::mm" && s.bytes == 200);
  EXPECT_TRUE(mm);
}

TEST(MemoryBreakdown, AnAllocatorCountingOnlySinceTheRunBeganStillGivesAllThatWasAlive) {
  // c10's CPU reporter counts the bytes it saw allocated: not the parameter.
  ReportedRun r = three_steps();
  for (MemoryRecord& rec : r.m.memory) rec.total_allocated -= 400;
  MemoryBreakdown b = memory_breakdown(r.m, r.keys);
  ASSERT_EQ(b.peaks.size(), 3u);
  EXPECT_EQ(b.peaks[2].peak_bytes, 1160u);
  EXPECT_EQ(b.peaks[2].allocator_bytes, 760u);
  EXPECT_EQ(b.peaks[2].by_class[cls(MemoryClass::kParameter)], 400u);
  EXPECT_EQ(b.peaks[2].by_class[cls(MemoryClass::kUnknown)], 60u);
}

TEST(MemoryBreakdown, TheTimelineKeepsEachIntervalsPeakAndTheEnd) {
  ReportedRun r = three_steps();
  std::vector<MemoryClassSample> series = memory_class_series(r.m, 3);
  ASSERT_EQ(series.size(), 4u);  // one per third of the run, and the end
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(series[i].ts_ns, 1000 * i + 550);  // each step's peak
    EXPECT_EQ(series[i].by_class[cls(MemoryClass::kActivation)], 200u);
    EXPECT_EQ(series[i].by_class[cls(MemoryClass::kGradient)], 400u);
    EXPECT_EQ(series[i].by_class[cls(MemoryClass::kParameter)], 400u);
  }
  EXPECT_EQ(series[3].ts_ns, 2990u);
  EXPECT_EQ(series[3].by_class[cls(MemoryClass::kParameter)], 400u);
  EXPECT_EQ(series[3].by_class[cls(MemoryClass::kUnknown)], 90u);  // the leak
  EXPECT_EQ(series[3].by_class[cls(MemoryClass::kGradient)], 0u);
  // As counters (2,000 intervals: each of the 27 reports its own sample): a
  // track per class, in MB, time order kept.
  r.m.counters.push_back({5, 1, 0, 1.0});
  EXPECT_EQ(add_memory_class_counters(r.m, memory_class_series(r.m)), r.m.memory.size() * kMemoryClasses);
  EXPECT_EQ(r.m.counters[0].ts_ns, 5u);
  double activation_at_1550 = -1;
  for (size_t i = 1; i < r.m.counters.size(); ++i) {
    const CounterSample& c = r.m.counters[i];
    EXPECT_LE(r.m.counters[i - 1].ts_ns, c.ts_ns);
    if (c.ts_ns == 1550 && r.m.name(c.name) == "Memory: activation (CPU)") activation_at_1550 = c.value;
  }
  EXPECT_DOUBLE_EQ(activation_at_1550, 200.0 / (1024 * 1024));
}

TEST(MemoryBreakdown, ASiteGrowingAtEveryStepsEndIsALeak) {
  ReportedRun r = three_steps();
  MemoryBreakdown b = memory_breakdown(r.m, r.keys);
  ASSERT_EQ(b.leaks.size(), 1u);
  const MemoryLeak& leak = b.leaks[0];
  EXPECT_EQ(b.sites[leak.site], "aten::randn");
  EXPECT_DOUBLE_EQ(leak.growth_per_step, 30.0);
  EXPECT_EQ(leak.first_step, 1);
  EXPECT_EQ(leak.live_at_end, 90u);
  EXPECT_EQ(leak.steps, 3u);
}

TEST(MemoryBreakdown, MemoryFreedAtEveryStepIsNoLeakAndTwoStepsAreTooFew) {
  ReportedRun r = three_steps();
  // The aten::randn blocks freed at their step's end: nothing grows.
  std::vector<MemoryRecord> kept = r.m.memory;
  r.m.memory.clear();
  std::vector<uint32_t> keys;
  for (size_t i = 0; i < kept.size(); ++i) {
    r.m.memory.push_back(kept[i]);
    keys.push_back(r.keys[i]);
    if (kept[i].bytes == 30) {
      MemoryRecord free = kept[i];
      free.ts_ns += 100;
      free.bytes = -30;
      r.m.memory.push_back(free);
      keys.push_back(0);
    }
  }
  std::stable_sort(r.m.memory.begin(), r.m.memory.end(),
                   [](const MemoryRecord& a, const MemoryRecord& b) { return a.ts_ns < b.ts_ns; });
  EXPECT_TRUE(memory_breakdown(r.m, keys).leaks.empty());
  ReportedRun two = three_steps();
  two.m.steps.pop_back();
  EXPECT_TRUE(memory_breakdown(two.m, two.keys).leaks.empty());
}

TEST(MemoryBreakdown, WithoutTagsOrStepsNothingIsGuessed) {
  ReportedRun r = three_steps();
  r.m.memory_tags.clear();
  r.m.steps.clear();
  MemoryBreakdown b = memory_breakdown(r.m, r.keys);
  EXPECT_TRUE(b.peaks.empty());
  EXPECT_TRUE(b.leaks.empty());
  // With steps, untagged: the parameter (no report) is unknown memory the
  // allocator counts; the batch and the gradient are freed in their step
  // without a backward pass in between: temporaries.
  r = three_steps();
  r.m.memory_tags.clear();
  b = memory_breakdown(r.m, r.keys);
  const StepPeakBreakdown& p = b.peaks[1];
  EXPECT_EQ(p.by_class[cls(MemoryClass::kParameter)], 0u);
  EXPECT_EQ(p.by_class[cls(MemoryClass::kUnknown)], 400u + 30u);
  EXPECT_EQ(p.by_class[cls(MemoryClass::kActivation)],
            200u + 100u);                                     // the batch outlives the backward's start
  EXPECT_EQ(p.by_class[cls(MemoryClass::kTemporary)], 400u);  // the gradient, made in the backward
}

}  // namespace
}  // namespace trainprof::analysis
