// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Run directories as the analysis handles them: found below a path without
// following symbolic links, locked for one analysis at a time, their raw data
// removed (--simplify), their trace linked where TensorBoard's plugin and HTA
// look for it.
#ifndef TRAINPROF_PIPELINE_RUN_DIRECTORIES_H_
#define TRAINPROF_PIPELINE_RUN_DIRECTORIES_H_

#include <filesystem>
#include <string>
#include <vector>

#include "base/safe_file.h"

namespace trainprof::pipeline {

// "a/b/" and "a/./b" name the same directory as "a/b".
std::filesystem::path normalized(const std::string& path);

// Takes the run's analysis lock without waiting; invalid, with `error`
// saying why (another analysis holds it), when it cannot.
base::UniqueFd take_analysis_lock(int run_fd, const std::string& run_path, std::string* error);

// Removes raw/ of the run `run_fd`, following no symlink. "" or what could
// not be removed.
std::string remove_raw_data(int run_fd);

// Links PROFILER_OUTPUT/trace_view.json (open as `out_fd`) as
// "{parent}/{worker}.{stamp}.pt.trace.json". "" or a warning.
std::string link_trace_for_peers(const std::filesystem::path& run, int out_fd);

// Whether the run has been analysed (its PROFILER_OUTPUT holds
// operator_details.csv, as `trainprof summary` looks).
bool is_analysed(const std::string& run);

// Analyses those of `runs` that are not, at once (one worker process per
// core): "" or the first failure.
std::string analyse_missing(const std::vector<std::string>& runs);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_RUN_DIRECTORIES_H_
