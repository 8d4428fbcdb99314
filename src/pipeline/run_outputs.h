// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Every output of one run's analysis: the run loaded window by window through
// the passes, the timeline writers and the database fed as the windows pass,
// then the tables.
#ifndef TRAINPROF_PIPELINE_RUN_OUTPUTS_H_
#define TRAINPROF_PIPELINE_RUN_OUTPUTS_H_

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "exporter/output_file.h"
#include "trainprof/analyse.h"

namespace trainprof::pipeline {

inline constexpr const char* kOutputDirName = "PROFILER_OUTPUT";

// PROFILER_OUTPUT, open: every output is created relative to `fd`.
struct OutputDir {
  int fd;
  std::string path;  // for messages
  exporter::OutputPath file(const char* name) const { return {fd, path, name}; }
};

// The threads one run's analysis uses: AnalyseOptions::threads, or every
// core this process may run on.
int analysis_threads(const AnalyseOptions& options);

// Loads the run window by window through the passes (side by side on
// analysis_threads(options) threads) and writes every output into `out`;
// returns the first error. Sets `extra`'s "memory" and
// "host" for the output's profiler_info.json.
// One run's analysis: its directory, where its outputs go, how, and what
// it reports (its warnings in `r`, profiler_info.json's extras in `extra`).
struct RunWrite {
  const std::filesystem::path& run;
  const OutputDir& out;
  const AnalyseOptions& options;
  RunAnalysis& r;
  nlohmann::json* extra;
};
std::string write_outputs(analysis::TraceModel& model, analysis::RunLoader& loader, const RunWrite& w);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_RUN_OUTPUTS_H_
