// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A run's own profiler_info.json as the analysis reads it, field by field (a
// wrong field is a warning naming it, never a failure: the raw data is what is
// analysed), and the output's profiler_info.json: the run's own plus what the
// analysis did.
#ifndef TRAINPROF_PIPELINE_RUN_INFO_H_
#define TRAINPROF_PIPELINE_RUN_INFO_H_

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "trainprof/analyse.h"

namespace trainprof::pipeline {

// Adds a warning to the run's analysis; past 50, one says more were left out.
void add_warning(RunAnalysis& r, std::string w);

// The run's profiler_info.json, checked; the output keeps the right fields.
nlohmann::json read_run_info(int run_fd, const std::string& run_path, RunAnalysis& r);
// Warnings for GPU activity asked for and not recorded, or dropped.
void warn_about_gpu(const nlohmann::json& info, RunAnalysis& r);
// The run's profiler_info.json as an object ({} when missing or not one).
nlohmann::json run_info_object(int run_fd);
// How the run ended: why it stopped, a write the disk refused.
void read_run_end(const nlohmann::json& info, analysis::TraceModel& model);
// The clock offsets measured against the reference rank, checked.
void read_clock_offsets(const nlohmann::json& info, analysis::TraceModel& model, RunAnalysis& r);
// The output's profiler_info.json text: the run's own `run_info`, plus
// "analysis" (what was read and done, `extra`: memory, host, clock_sync).
std::string output_info(const nlohmann::json& run_info, const analysis::TraceModel& model,
                        const analysis::RunLoader& loader, const RunAnalysis& r,
                        const AnalyseOptions& options, bool pretty, const nlohmann::json& extra);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_RUN_INFO_H_
