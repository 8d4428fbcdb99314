// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The advisor's findings for one analysed run: its facts gathered from what the
// analysis computed (analysis/advisor.h), as the "advice" array of the output's
// profiler_info.json.
#ifndef TRAINPROF_PIPELINE_RUN_ADVICE_H_
#define TRAINPROF_PIPELINE_RUN_ADVICE_H_

#include <nlohmann/json.hpp>
#include <vector>

#include "analysis/advisor.h"
#include "analysis/critical_path.h"
#include "analysis/host_usage.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/trace_model.h"
#include "analysis/what_if.h"

namespace trainprof::pipeline {

struct RunAdviceInput {
  const analysis::TraceModel* model;  // its in_steps: the host facts
  const std::vector<analysis::StepTraceRow>* steps;
  const std::vector<analysis::WhatIfObserver>* what_ifs;    // the default ones (run_outputs.cc)
  const std::vector<analysis::PathSegment>* critical_path;  // every step's
  const analysis::HostBottlenecks* host;      // the host sampler's verdict, null when not sampled
  const nlohmann::json* run_info;             // the run's own profiler_info.json: "memory"
  const analysis::OutsideOperators* outside;  // the stack samples' functions, by time
};

analysis::AdviceFacts advice_facts(const RunAdviceInput& in);

// Every thread's keys of a name as one row, from per-key totals (the
// counted steps', TraceModel::in_steps, or the start-up's); operators'
// counts and times scaled by the run's operator sampling.
std::vector<analysis::NameFacts> name_facts(const analysis::TraceModel& m, const analysis::KeyTotals& totals);

nlohmann::json findings_json(const std::vector<analysis::Finding>& findings);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_RUN_ADVICE_H_
