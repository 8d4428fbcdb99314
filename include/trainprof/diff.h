// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Two runs compared: what changed in the step time and which operators, ranges
// and kernels changed it.
//
//   trainprof::DiffReport d = trainprof::diff_runs("./before_trainprof", "./after_trainprof");
//   if (!d.ok()) std::cerr << d.error << "\n";
//   std::cout << d.text;
//
// Both runs are analysed first when they are not. Either may also be a
// job's directory (one run per rank, as `trainprof cluster` reads it). Everything is per step
// (each run's total over its steps), so runs of different lengths compare.
// Host operators and ranges are compared by self time (nested ones are not
// counted twice), GPU kernels, copies and sets by their time; rows are
// ranked by how much their change moved the step, largest first.
#ifndef TRAINPROF_DIFF_H_
#define TRAINPROF_DIFF_H_

#include <string>
#include <vector>

namespace trainprof {

struct DiffRow {
  std::string name;
  std::string where;  // "host" or "gpu"
  // Per step: calls and time (host: self time) in run A and run B, us.
  double calls_a = 0, calls_b = 0;
  double us_a = 0, us_b = 0;
  std::string status;  // "both", "added" (only in B) or "removed" (only in A)
  // Input shapes seen in one run only ("" when the same, or none recorded).
  std::string shapes_only_a, shapes_only_b;
  double delta_us() const { return us_b - us_a; }
};

struct DiffReport {
  std::string error;  // nothing could be compared (a run missing, not analysable)
  std::string run_a, run_b;
  int steps_a = 0, steps_b = 0;  // over every rank
  // A side may be a job's directory, one run per rank: its steps and rows
  // are summed over the ranks, so "per step" is per rank and step.
  int ranks_a = 1, ranks_b = 1;
  // A job's straggler, from its cluster analysis: "rank 2 (compute)",
  // "none", or "" (one run, or no cluster analysis).
  std::string straggler_a, straggler_b;
  // The mean step and its parts, us: computing, communication not
  // overlapped, data wait, free (step_trace_time.csv's columns).
  double step_us_a = 0, step_us_b = 0;
  std::vector<std::pair<std::string, std::pair<double, double>>> parts;  // name, (A, B)
  std::vector<DiffRow> rows;  // ranked: largest |change| per step first
  std::string text;           // what `trainprof diff` prints
  std::string csv;            // diff.csv's text
  bool ok() const { return error.empty(); }
};

// `csv_file`: where the rows go as CSV too ("": nowhere), written atomically.
DiffReport diff_runs(const std::string& run_a, const std::string& run_b, const std::string& csv_file = "");

}  // namespace trainprof

#endif  // TRAINPROF_DIFF_H_
