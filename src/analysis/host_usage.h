// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The host_sys counters of a run (the host sampler,
// src/collectors/system/host_sampler.h) as the four tables of
// host_cpu_usage.csv, host_mem_usage.csv, host_disk_usage.csv and
// host_network_usage.csv, and the steps in which the host was the bottleneck.
#ifndef TRAINPROF_ANALYSIS_HOST_USAGE_H_
#define TRAINPROF_ANALYSIS_HOST_USAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// One file: a row per sample (all counters of a sample share its
// timestamp), a column per counter in the order first seen, per-core CPU
// columns in core order. A value missing from a sample is NaN.
struct HostUsageTable {
  const char* file;
  std::vector<std::string> columns;
  std::vector<uint64_t> ts_ns;
  std::vector<std::vector<double>> values;  // [row][column]
};

// The four tables, in the order above; a table without rows is a part the
// run did not sample (its file is not written).
std::vector<HostUsageTable> host_usage_tables(const TraceModel& model);

// Steps whose mean host CPU use was at least kSaturatedCpuPercent, or whose
// host memory in use reached kMemoryPressurePercent of the total.
inline constexpr double kSaturatedCpuPercent = 90;
inline constexpr double kMemoryPressurePercent = 95;
struct HostBottlenecks {
  uint64_t samples = 0;  // of Host CPU (%)
  std::vector<int64_t> cpu_saturated_steps;
  std::vector<double> cpu_saturated_percent;  // their mean host CPU use
  // The time the training loop waited for data in each of them (data
  // stages "wait", data_process): a host too busy to feed the step.
  std::vector<uint64_t> cpu_saturated_data_wait_ns;
  std::vector<int64_t> memory_pressure_steps;
};
// From the tables of host_usage_tables(model) (their rows are the samples).
HostBottlenecks host_bottlenecks(const TraceModel& model, const std::vector<HostUsageTable>& tables);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_HOST_USAGE_H_
