// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The memory passes (profile_memory): which operator made each allocation, when
// it was freed, and the peak per step. docs/OUTPUTS.md describes the outputs
// they feed.
#ifndef TRAINPROF_ANALYSIS_MEMORY_H_
#define TRAINPROF_ANALYSIS_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// Per TraceModel::memory entry, the name (string id) of the innermost
// operator running on the reporting thread at that time; 0 when none. One
// walk per thread over its slices (timeline order) and its reports.
std::vector<uint32_t> memory_operators(const TraceModel& model);
// The same for the reports [first, last) of TraceModel::memory, from a window
// that holds the slices open at their times (its own and the carried ones).
// `keys`, when given: that operator's TraceModel::keys index + 1 (0: none),
// which tells its inputs and call stack too.
void memory_operators(const TraceModel& model, size_t first, size_t last, std::vector<uint32_t>* names,
                      std::vector<uint32_t>* keys = nullptr);
// The same for `memory` (in time order) instead of the model's reports:
// its failed allocations.
void memory_operators(const TraceModel& model, const std::vector<MemoryRecord>& memory, size_t first,
                      size_t last, std::vector<uint32_t>* names, std::vector<uint32_t>* keys);

// operator_memory.csv: one row per allocation, with its free when the free
// was reported in the same window.
struct OperatorMemoryRow {
  uint32_t name = 0;  // operator string id (0: none)
  uint32_t device = 0;
  uint64_t bytes = 0;
  uint64_t alloc_ns = 0;
  uint64_t alloc_total_allocated = 0;
  uint64_t alloc_total_reserved = 0;
  bool released = false;
  uint64_t release_ns = 0;
  uint64_t release_total_allocated = 0;
  uint64_t release_total_reserved = 0;
};
struct MemoryMatch {
  std::vector<OperatorMemoryRow> rows;  // in allocation order
  uint64_t frees = 0;
  uint64_t frees_matched = 0;  // frees whose allocation is in the window
};
// Matches frees to allocations by (device, address) in one pass over the
// reports in time order: a hash map of the open allocations, O(reports).
MemoryMatch match_allocations(const TraceModel& model, const std::vector<uint32_t>& operators);

// The largest total allocated per step window and device, counting the
// total carried into the step from the last report before it.
struct StepMemoryPeak {
  int64_t step = 0;
  uint32_t device = 0;
  uint64_t peak_allocated = 0;
};
std::vector<StepMemoryPeak> step_memory_peaks(const TraceModel& model);

// "CPU", "CUDA:0", ... for a raw::memory_device code (the collectors name
// devices the same way).
using raw::memory_device_name;

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_MEMORY_H_
