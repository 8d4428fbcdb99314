// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The CSV deliverables (docs/OUTPUTS.md).
#ifndef TRAINPROF_EXPORTER_CSV_TABLES_H_
#define TRAINPROF_EXPORTER_CSV_TABLES_H_

#include <string>
#include <vector>

#include "analysis/cluster_path.h"
#include "analysis/critical_path.h"
#include "analysis/gpu_kernels.h"
#include "analysis/host_usage.h"
#include "analysis/memory.h"
#include "analysis/memory_breakdown.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/rank_summary.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

// Each returns "" or an error naming the file.
std::string write_op_statistic(const std::vector<analysis::OpStatisticRow>& rows, const OutputPath& path);
std::string write_operator_details(const std::vector<analysis::OperatorDetailRow>& rows,
                                   const OutputPath& path);
std::string write_dataset(const std::vector<analysis::DatasetRow>& rows, const OutputPath& path);
// kernel_details.csv: one row per GPU kernel (times: realtime us).
std::string write_kernel_details(const std::vector<analysis::KernelRow>& rows, int64_t realtime_offset_ns,
                                 const OutputPath& path);
std::string write_step_trace_time(const std::vector<analysis::StepTraceRow>& rows, const OutputPath& path);
// critical_path.csv: each step's path, a row per segment in time order
// (start: realtime us; share: of the step's length).
std::string write_critical_path(const analysis::TraceModel& model,
                                const std::vector<analysis::PathSegment>& path, const OutputPath& path_file);
// python_outside_operators.csv: per counted step, the functions the stack
// samples found outside operators and ranges on the step's thread.
std::string write_python_outside_operators(const analysis::OutsideOperators& outside, const OutputPath& path);
// memory_record.csv and operator_memory.csv (profile_memory).
std::string write_memory_record(const analysis::TraceModel& model, const OutputPath& path);
std::string write_operator_memory(const analysis::TraceModel& model, const analysis::MemoryMatch& match,
                                  const OutputPath& path);
// memory_breakdown.csv: per step and device, the peak and what was alive
// then, a row per class then per site; memory_leaks.csv: the sites whose
// bytes at the steps' ends kept growing.
std::string write_memory_breakdown(const analysis::TraceModel& model,
                                   const analysis::MemoryBreakdown& breakdown, const OutputPath& path);
std::string write_memory_leaks(const analysis::MemoryBreakdown& breakdown, const OutputPath& path);
// memory_timeline.csv: the bytes alive by class over time
// (analysis::memory_class_series), a row per sample and device.
std::string write_memory_timeline(const analysis::TraceModel& model,
                                  const std::vector<analysis::MemoryClassSample>& series,
                                  const OutputPath& path);
// One of the host_*_usage.csv (host_sys): "Timestamp(us)" (realtime, as
// memory_record.csv) and a column per counter, 3 decimals, empty where a
// sample lacks the value. `realtime_offset_ns`: the model's.
std::string write_host_usage(const analysis::HostUsageTable& table, int64_t realtime_offset_ns,
                             const OutputPath& path);

// cluster_step_trace_time.csv: a row per (step, rank), the step trace's
// columns after "Step,Type,Index" ("rank", the rank).
std::string cluster_step_trace_csv(const std::vector<analysis::RankSummary>& ranks);
// cluster_critical_path.csv: the job's critical path across ranks per step
// (analysis/cluster_path.h), wall-clock times in us, each segment's share of
// its step's path.
std::string cluster_critical_path_csv(const std::vector<analysis::ClusterPathSegment>& segments);
// A rank's step_trace_time.csv in msprof-analyze's layout: "Device_id" (the
// rank) first.
std::string msprof_step_trace_csv(const analysis::RankSummary& summary);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CSV_TABLES_H_
