// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof::estimate_what_if (include/trainprof/what_if.h): the run's raw data
// loaded window by window into the critical path's accumulator (with the named
// operator as its focus, so that one inside other ranges counts), then every
// step re-timed.
#include <sys/stat.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "analysis/critical_path.h"
#include "analysis/run_loader.h"
#include "analysis/what_if.h"
#include "base/close_names.h"
#include "trainprof/analyse.h"
#include "trainprof/what_if.h"

namespace trainprof {
namespace {

std::string report_text(const std::string& run_dir, const WhatIfReport& r) {
  std::string out = "what if " + r.change + ": " + run_dir + "\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-8s %14s %14s %9s\n", "step", "recorded ms", "estimated ms",
                "change");
  out += line;
  for (const WhatIfStep& s : r.steps) {
    double change = s.recorded_ms > 0 ? 100.0 * (s.estimated_ms - s.recorded_ms) / s.recorded_ms : 0.0;
    std::snprintf(line, sizeof(line), "  %-8lld %14.3f %14.3f %+8.1f%%\n", static_cast<long long>(s.step),
                  s.recorded_ms, s.estimated_ms, change);
    out += line;
  }
  double change =
      r.median_step_ms > 0 ? 100.0 * (r.estimated_step_ms - r.median_step_ms) / r.median_step_ms : 0.0;
  std::snprintf(line, sizeof(line), "median step (%zu steps): %.3f ms -> %.3f ms (%+.1f %%)\n",
                r.steps_counted, r.median_step_ms, r.estimated_step_ms, change);
  out += line;
  return out;
}

}  // namespace

WhatIfReport estimate_what_if(const std::string& run_dir, const WhatIfRequest& request) {
  WhatIfReport out;
  analysis::WhatIf change;
  change.hide_data_wait = request.hide_data_wait;
  change.overlap_communication = request.overlap_communication;
  change.faster = request.faster;
  change.speedup = request.speedup;
  out.change = analysis::what_if_label(change);
  if (!request.faster.empty() && !(request.speedup > 0)) {
    out.error = "the speedup must be a number above 0 (2: twice as fast)";
    return out;
  }
  struct stat st {};
  if (stat((std::filesystem::path(run_dir) / "raw").c_str(), &st) != 0) {
    out.error = "'" + run_dir +
                "' holds no raw data (not a run directory, or its raw data was removed by --simplify)";
    return out;
  }
  analysis::TraceModel model;
  analysis::RunLoader loader;
  if (!loader.scan(run_dir, &model, &out.error)) return out;
  analysis::CriticalPathAccumulator paths;
  paths.set_focus(request.faster);
  analysis::WhatIfObserver observer(change, false, !request.faster.empty());
  paths.add_observer(&observer);
  auto add = [&paths](analysis::TraceModel& m, const analysis::Window& w) { paths.add_window(m, w.end_ns); };
  if (!loader.load(&model, loader.plan_windows(AnalyseOptions{}.window_slices), add, &out.error)) return out;
  paths.finish(model);
  if (!request.faster.empty() &&
      std::find(model.strings.begin(), model.strings.end(), request.faster) == model.strings.end()) {
    out.error = "nothing named '" + request.faster + "' was recorded in '" + run_dir + "'" +
                base::did_you_mean(request.faster, model.strings) +
                " (names as op_statistic.csv and kernel_details.csv write them)";
    return out;
  }
  std::vector<analysis::StepEstimate> steps = observer.estimates();
  std::stable_sort(
      steps.begin(), steps.end(),
      [](const analysis::StepEstimate& a, const analysis::StepEstimate& b) { return a.step < b.step; });
  if (steps.empty()) {
    out.error = "'" + run_dir + "' recorded no step (call Profiler::step() once per training step)";
    return out;
  }
  for (const analysis::StepEstimate& s : steps) {
    out.steps.push_back(
        {s.step, static_cast<double>(s.recorded_ns) / 1e6, static_cast<double>(s.estimated_ns) / 1e6});
  }
  analysis::WhatIfSummary summary = analysis::summarize_what_if(steps);
  out.steps_counted = summary.steps;
  out.median_step_ms = summary.recorded_ms;
  out.estimated_step_ms = summary.estimated_ms;
  out.text = report_text(run_dir, out);
  return out;
}

}  // namespace trainprof
