// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/run_advice.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "analysis/memory.h"
#include "trainprof/dataset.h"

namespace trainprof::pipeline {
namespace {

using nlohmann::json;

void add_steps(const std::vector<analysis::StepTraceRow>& rows, analysis::AdviceFacts* f) {
  std::vector<double> lengths;
  for (const analysis::StepTraceRow& r : rows) lengths.push_back(static_cast<double>(r.step_ns));
  std::vector<double> ms;
  for (size_t i = 0; i < analysis::whole_steps(lengths); ++i) {
    const analysis::StepTraceRow* r = &rows[i];
    ms.push_back(r->step_ns / 1e6);
    f->total_step_ms += r->step_ns / 1e6;
    f->data_wait_ms += r->data_wait_ns / 1e6;
    f->exposed_comm_ms += r->communication_not_overlapped_ns / 1e6;
    f->device_idle_ms += r->free_ns / 1e6;
    f->preparing_ms += r->preparing_ns / 1e6;
    if (r->data_wait_ns * 100 >= r->step_ns && r->data_wait_ns > 0) ++f->data_wait_steps;
  }
  f->steps = static_cast<int64_t>(ms.size());
  if (!ms.empty()) {
    std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
    f->median_step_ms = ms[ms.size() / 2];
  }
}

// The longest data stage other than the loop's own wait, per step.
std::string slowest_data_stage(const analysis::TraceModel& m, int64_t steps) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> by_stage;
  for (const analysis::DataStageSlice& d : m.data_stages) {
    if (m.name(d.stage) == kStageLoaderWait) continue;
    by_stage[{d.operation, d.stage}] += d.dur_ns;
  }
  auto longest = std::max_element(by_stage.begin(), by_stage.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  if (longest == by_stage.end() || steps <= 0) return "";
  char ms[64];
  std::snprintf(ms, sizeof(ms), "%.3f", longest->second / 1e6 / static_cast<double>(steps));
  return m.name(longest->first.first) + " (" + m.name(longest->first.second) + "), " + ms +
         " ms per step (dataset.csv)";
}

}  // namespace

std::vector<analysis::NameFacts> name_facts(const analysis::TraceModel& m, const analysis::KeyTotals& in) {
  std::map<std::pair<uint32_t, bool>, analysis::NameFacts> by_name;
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    const analysis::SliceKey& key = m.keys[k];
    if (key.is_step || in.at(in.calls, k) == 0) continue;
    // About one operator call in N was recorded: the estimate of all calls.
    uint64_t scale = key.is_op ? std::max<uint32_t>(m.operator_sampling, 1) : 1;
    analysis::NameFacts& n = by_name[{key.name, key.is_op}];
    n.is_op = key.is_op;
    n.calls += in.at(in.calls, k) * scale;
    n.total_ns += in.at(in.total_ns, k) * scale;
    n.self_ns += in.at(in.self_ns, k) * scale;
    n.child_calls += in.at(in.child_calls, k) * scale;
    n.optimizer_calls += in.at(in.optimizer_calls, k) * scale;
    n.optimizer_self_ns += in.at(in.optimizer_self_ns, k) * scale;
  }
  std::vector<analysis::NameFacts> out;
  for (auto& [id, n] : by_name) {
    n.name = m.name(id.first);
    out.push_back(std::move(n));
  }
  return out;
}

namespace {

std::vector<analysis::NameFacts> gpu_names(const analysis::TraceModel& m) {
  std::map<uint32_t, analysis::NameFacts> by_name;
  for (const analysis::GpuActivity& a : m.gpu) {
    analysis::NameFacts& n = by_name[a.name];
    ++n.calls;
    n.total_ns += a.end_ns > a.start_ns ? a.end_ns - a.start_ns : 0;
  }
  std::vector<analysis::NameFacts> out;
  for (auto& [id, n] : by_name) {
    n.name = m.name(id);
    out.push_back(std::move(n));
  }
  return out;
}

// The what-if's median step with the data wait hidden (or communication
// overlapped), -1 when that kind is on no step's critical path: the
// replay then changes nothing (a wait the path does not see, such as a
// thread blocked on a collective another thread runs), and the advisor
// bounds the saving instead.
double what_if_step_ms(const std::vector<analysis::WhatIfObserver>& what_ifs,
                       const std::vector<analysis::PathSegment>& path, bool data_wait) {
  analysis::PathKind kind = data_wait ? analysis::PathKind::kDataWait : analysis::PathKind::kCommunication;
  if (std::none_of(path.begin(), path.end(),
                   [kind](const analysis::PathSegment& s) { return s.kind == kind; }))
    return -1;
  for (const analysis::WhatIfObserver& o : what_ifs) {
    bool wanted = data_wait ? o.change().hide_data_wait : o.change().overlap_communication;
    if (!wanted) continue;
    analysis::WhatIfSummary s = analysis::summarize_what_if(o.estimates());
    if (s.steps > 0) return s.estimated_ms;
  }
  return -1;
}

void add_host(const analysis::HostBottlenecks& host, analysis::AdviceFacts* f) {
  f->cpu_saturated_steps = host.cpu_saturated_steps;
  double sum = 0;
  for (double percent : host.cpu_saturated_percent) sum += percent;
  if (!host.cpu_saturated_percent.empty())
    f->cpu_saturated_mean_percent = sum / static_cast<double>(host.cpu_saturated_percent.size());
}

// The peaks: profile_memory's per device, and the process' resident set.
void add_memory(const analysis::TraceModel& m, const json& run_info, analysis::AdviceFacts* f) {
  for (const analysis::StepMemoryPeak& p : analysis::step_memory_peaks(m)) {
    bool cpu = analysis::memory_device_name(p.device) == "CPU";
    uint64_t& peak = cpu ? f->host_peak_bytes : f->device_peak_bytes;
    peak = std::max(peak, p.peak_allocated);
  }
  f->host_peak_source = "allocated (profile_memory)";
  auto memory = run_info.is_object() ? run_info.find("memory") : run_info.end();
  if (memory == run_info.end() || !memory->is_object()) return;
  uint64_t resident = memory->value("peak_resident_bytes", uint64_t{0});
  if (resident > f->host_peak_bytes) {
    f->host_peak_bytes = resident;
    f->host_peak_source = "the process' peak resident set";
  }
  f->host_limit_bytes = memory->value("limit_bytes", uint64_t{0});
  f->host_limit_source = memory->value("limit_source", std::string("memory limit"));
}

// The stack samples' functions and what of their time the critical path saw.
void add_outside(const analysis::OutsideOperators& o, const std::vector<analysis::PathSegment>& path,
                 const json& run_info, analysis::AdviceFacts* f) {
  for (const analysis::OutsideFunction& fn : o.functions)
    f->outside.push_back(analysis::OutsideFacts{analysis::describe(fn), fn.ns / 1e6, fn.input});
  f->outside_sampled_ms = o.outside_ns / 1e6;
  if (!path.empty()) {
    f->host_untracked_path_ms = 0;
    for (const analysis::PathSegment& s : path)
      if (s.kind == analysis::PathKind::kHostUntracked) f->host_untracked_path_ms += s.dur_ns / 1e6;
  }
  auto options = run_info.is_object() ? run_info.find("options") : run_info.end();
  if (options != run_info.end() && options->is_object())
    f->sampling_ms = options->value("python_stack_sampling_ms", 0u);
}

}  // namespace

analysis::AdviceFacts advice_facts(const RunAdviceInput& in) {
  analysis::AdviceFacts f;
  const analysis::TraceModel& m = *in.model;
  add_steps(*in.steps, &f);
  f.device_time = std::any_of(m.gpu.begin(), m.gpu.end(), analysis::is_device_activity);
  f.slowest_data_stage = slowest_data_stage(m, f.steps);
  f.hide_data_wait_step_ms = what_if_step_ms(*in.what_ifs, *in.critical_path, /*data_wait=*/true);
  f.overlap_comm_step_ms = what_if_step_ms(*in.what_ifs, *in.critical_path, /*data_wait=*/false);
  // What ran in the start-up (imports' collections, the first batch) or
  // after the last step is not the steps' problem.
  f.host = name_facts(m, m.in_steps);
  f.gpu = gpu_names(m);
  if (in.host != nullptr) add_host(*in.host, &f);
  if (in.outside != nullptr) add_outside(*in.outside, *in.critical_path, *in.run_info, &f);
  add_memory(m, *in.run_info, &f);
  return f;
}

json findings_json(const std::vector<analysis::Finding>& findings) {
  json out = json::array();
  for (const analysis::Finding& x : findings) {
    json one = {{"rule", x.rule},
                {"title", x.title},
                {"evidence", x.evidence},
                {"change", x.change},
                {"step_ms", x.step_ms},
                {"saving_ms", x.saving_ms},
                {"saving_basis", x.saving_basis}};
    if (x.rank >= 0) one["rank"] = x.rank;
    if (!x.cause.empty()) one["cause"] = x.cause;
    out.push_back(std::move(one));
  }
  return out;
}

}  // namespace trainprof::pipeline
