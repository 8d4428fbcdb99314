// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the memory at each step's peak is, and what grows from step to step
// (profile_memory; docs/OUTPUTS.md, memory_breakdown.csv and memory_leaks.csv).
//
// Every allocation the run reported gets a class. One tagged (raw
// MEMORY_TAG: the front end said what it holds) is a parameter, gradient,
// optimizer state or input, the first tag it got deciding; a tag on a block
// no report made (allocated before the run began) stands for that block,
// alive from the run's start to its free. An untagged one is classed by its
// lifetime against its step's backward pass (the first autograd node the
// step ran): made before the backward began and freed during it, an
// activation (kept for backward); made and freed in the same step otherwise,
// a temporary; anything else (kept across a step's end, or a step without
// steps) is unknown, as is the memory the allocator counts that no report
// or tag accounts for.
#ifndef TRAINPROF_ANALYSIS_MEMORY_BREAKDOWN_H_
#define TRAINPROF_ANALYSIS_MEMORY_BREAKDOWN_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

enum class MemoryClass : uint8_t {
  kParameter,
  kGradient,
  kOptimizerState,
  kActivation,
  kInput,
  kTemporary,
  kUnknown,
};
inline constexpr size_t kMemoryClasses = 7;
// "parameter", "gradient", "optimizer state", "activation", "input",
// "temporary", "unknown".
const char* memory_class_name(MemoryClass c);

// Bytes alive at one moment from one allocation site: the operator that
// allocated ("aten::empty"), with the innermost Python frame outside torch
// when the run recorded stacks ("aten::empty at train.py(42): step").
struct SiteBytes {
  uint32_t site = 0;  // MemoryBreakdown::sites index
  uint64_t bytes = 0;
};

// One step's peak on one device, and what was alive then. The memory alive
// at a moment is what the blocks known here add up to (reported, and tagged
// from before the run), or what the allocator counts when that is more (it
// may count blocks from before the run that nothing tagged: unknown); the
// peak is the step's largest, or what was alive at its start if more.
struct StepPeakBreakdown {
  int64_t step = 0;
  uint32_t device = 0;      // raw::memory_device
  uint64_t peak_ns = 0;     // when it was reached (the step's start when carried in)
  uint64_t peak_bytes = 0;  // alive then: by_class sums to it
  uint64_t allocator_bytes =
      0;  // the allocator's total then (c10's CPU reporter counts only since the run began)
  uint32_t operator_name = 0;  // string id of the operator that made the peak's report (0: none)
  std::array<uint64_t, kMemoryClasses> by_class{};
  std::vector<SiteBytes> sites;  // largest first, at most kPeakSites
};
inline constexpr size_t kPeakSites = 10;

// A site whose bytes alive at the steps' ends grew: in more than half of
// the steps after the first and in at least two, never falling.
struct MemoryLeak {
  uint32_t site = 0;
  uint32_t device = 0;
  double growth_per_step = 0;  // bytes: (last - first) / (steps - 1)
  int64_t first_step = 0;      // the first step at whose end it had grown
  uint64_t live_at_end = 0;    // at the last step's end
  size_t steps = 0;            // step ends seen
};

// An allocation that failed (out of memory), and what was alive then on
// its device.
struct LiveBlock {
  uint64_t bytes = 0;
  MemoryClass cls = MemoryClass::kUnknown;
  uint32_t site = 0;
  int64_t age_ns = -1;  // since its allocation; -1: allocated before the run
};
struct OutOfMemoryReport {
  uint64_t ts_ns = 0;
  uint32_t device = 0;
  uint32_t tid = 0;
  uint64_t requested_bytes = 0;
  uint64_t allocator_bytes = 0;  // the allocator's total then (0: it did not say)
  uint32_t operator_name = 0;    // string id of the operator running on its thread (0: none)
  int64_t step = -1;             // -1: outside every step
  uint64_t alive_bytes = 0;      // by_class sums to it
  std::array<uint64_t, kMemoryClasses> by_class{};
  size_t live_blocks = 0;
  std::vector<LiveBlock> largest;  // at most kOomBlocks, largest first
  std::vector<SiteBytes> sites;    // at most kPeakSites, largest first
};
inline constexpr size_t kOomBlocks = 20;

// A block for the allocator-snapshot export (exporter/memory_snapshot.h).
struct SnapshotBlock {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint32_t device = 0;
  uint64_t start_ns = 0;  // 0: before the run
  uint64_t end_ns = 0;    // 0: alive at the end
  MemoryClass cls = MemoryClass::kUnknown;
  uint32_t site = 0;
  bool in_trace = false;  // among the recent allocations whose events are exported
};
// At most this many reported allocations per device are exported as events
// (the latest), as torch's allocator keeps its last entries.
inline constexpr size_t kSnapshotBlocks = 100000;

struct MemoryBreakdown {
  std::vector<std::string> sites;                // site names
  std::vector<StepPeakBreakdown> peaks;          // by step, then device
  std::vector<MemoryLeak> leaks;                 // fastest growth first
  uint64_t tagged_before_run = 0;                // tags on blocks allocated before the run began
  std::vector<OutOfMemoryReport> out_of_memory;  // per TraceModel::failed_allocations
  std::vector<SnapshotBlock> blocks;             // by start: the recent ones and those alive at the end
};

// `keys`: per TraceModel::memory report, its operator's key + 1 (0: none),
// memory_operators; `failed_keys` the same per failed allocation.
MemoryBreakdown memory_breakdown(const TraceModel& model, const std::vector<uint32_t>& keys,
                                 const std::vector<uint32_t>& failed_keys = {});

// The bytes alive by class on each device over the run, for the timeline:
// at most one sample per device in each of `intervals` equal parts of the
// reports' span, the one with the most alive (a peak is never smoothed
// away), and the last state. Classed as memory_breakdown does; the unknown
// class holds only reported blocks (not the allocator's remainder).
struct MemoryClassSample {
  uint64_t ts_ns = 0;
  uint32_t device = 0;
  std::array<uint64_t, kMemoryClasses> by_class{};
};
std::vector<MemoryClassSample> memory_class_series(const TraceModel& model, size_t intervals = 2000);

// The series as counters of the model (one track per device and class,
// "Memory: activation (CPU)", MB), for the timeline writers; returns how
// many samples were added. Counters stay in time order.
size_t add_memory_class_counters(TraceModel& model, const std::vector<MemoryClassSample>& series);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_MEMORY_BREAKDOWN_H_
