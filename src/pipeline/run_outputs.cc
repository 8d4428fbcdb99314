// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/run_outputs.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/gpu_kernels.h"
#include "analysis/gpu_launches.h"
#include "analysis/host_usage.h"
#include "analysis/memory.h"
#include "analysis/memory_breakdown.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/rank_summary.h"
#include "analysis/what_if.h"
#include "base/json_limits.h"
#include "base/parallel.h"
#include "base/safe_file.h"
#include "base/string_format.h"
#include "exporter/chrome_trace.h"
#include "exporter/csv_tables.h"
#include "exporter/database.h"
#include "exporter/memory_snapshot.h"
#include "exporter/perfetto_trace.h"
#include "pipeline/run_advice.h"
#include "pipeline/run_info.h"

namespace trainprof::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kDatabaseName = "trainprof.db";

// Sets `*errors` to `e` unless an error came first: the outputs go on being
// written after one fails, and the first failure is the one reported.
void keep_first_error(std::string* errors, const std::string& e) {
  if (!e.empty() && errors->empty()) *errors = e;
}

// The "memory" object of the output's profiler_info.json: counts, and the
// peak allocated per step and device.
json memory_summary(const analysis::TraceModel& model, const analysis::MemoryMatch& match) {
  uint64_t allocations = model.memory.size() - match.frees;
  json steps = json::array();
  for (const analysis::StepMemoryPeak& p : analysis::step_memory_peaks(model)) {
    steps.push_back({{"Step", p.step},
                     {"Device Type", analysis::memory_device_name(p.device)},
                     {"Peak Memory(MB)", static_cast<double>(p.peak_allocated) / (1024.0 * 1024.0)},
                     {"Peak Memory(bytes)", p.peak_allocated}});
  }
  return {{"reports", model.memory.size()},
          {"allocations", allocations},
          {"frees", match.frees},
          {"frees_matched", match.frees_matched},
          {"steps", steps}};
}

// Bytes per class, by the classes' names.
json classes_json(const std::array<uint64_t, analysis::kMemoryClasses>& by_class) {
  json classes = json::object();
  for (size_t c = 0; c < analysis::kMemoryClasses; ++c)
    classes[analysis::memory_class_name(static_cast<analysis::MemoryClass>(c))] = by_class[c];
  return classes;
}

// profiler_info.json's memory "breakdown": per device, the largest of the
// steps' peaks and what was alive then (bytes by class, the top sites);
// and "leaks".
void add_breakdown_summary(const analysis::TraceModel& model, const analysis::MemoryBreakdown& b,
                           json* summary) {
  std::map<uint32_t, const analysis::StepPeakBreakdown*> highest;
  for (const analysis::StepPeakBreakdown& p : b.peaks) {
    const analysis::StepPeakBreakdown*& h = highest[p.device];
    if (h == nullptr || p.peak_bytes > h->peak_bytes) h = &p;
  }
  json peaks = json::array();
  for (const auto& [device, p] : highest) {
    json sites = json::array();
    for (const analysis::SiteBytes& s : p->sites)
      sites.push_back({{"site", b.sites[s.site]}, {"bytes", s.bytes}});
    peaks.push_back({{"device", analysis::memory_device_name(device)},
                     {"step", p->step},
                     {"peak_bytes", p->peak_bytes},
                     {"operator", model.name(p->operator_name)},
                     {"classes", classes_json(p->by_class)},
                     {"sites", sites}});
  }
  json leaks = json::array();
  for (const analysis::MemoryLeak& l : b.leaks) {
    leaks.push_back({{"device", analysis::memory_device_name(l.device)},
                     {"site", b.sites[l.site]},
                     {"growth_per_step_bytes", l.growth_per_step},
                     {"first_step", l.first_step},
                     {"live_at_end_bytes", l.live_at_end},
                     {"steps", l.steps}});
  }
  (*summary)["breakdown"] = peaks;
  (*summary)["leaks"] = leaks;
  (*summary)["tagged_before_run"] = b.tagged_before_run;
}

// Writes memory_record.csv and operator_memory.csv when the run has memory
// reports (`operators`: memory_operators of each); returns the first error and
// fills `summary`.
// oom_report.txt: each failed allocation, what was alive on its device then
// by class, by site and the largest blocks.
std::string out_of_memory_text(const analysis::TraceModel& model, const analysis::MemoryBreakdown& b) {
  auto mb = [](uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::string text;
  for (const analysis::OutOfMemoryReport& o : b.out_of_memory) {
    base::append_format(text, "Out of memory on %s: an allocation of %llu bytes (%.3f MB) failed",
                        analysis::memory_device_name(o.device).c_str(),
                        static_cast<unsigned long long>(o.requested_bytes), mb(o.requested_bytes));
    if (o.step >= 0) base::append_format(text, " in step %lld", static_cast<long long>(o.step));
    if (o.operator_name != 0) text += " in " + model.name(o.operator_name);
    base::append_format(text, " (thread %u).\n", o.tid);
    if (model.memory.empty()) {
      text += "No allocation was recorded (profile_memory was off): what was alive is not known.\n\n";
      continue;
    }
    base::append_format(text, "Alive then: %.3f MB in %zu blocks", mb(o.alive_bytes), o.live_blocks);
    if (o.allocator_bytes > 0)
      base::append_format(text, " (the allocator counted %.3f MB)", mb(o.allocator_bytes));
    text += ".\n  by class:";
    for (size_t c = 0; c < analysis::kMemoryClasses; ++c) {
      if (o.by_class[c] > 0)
        base::append_format(text, " %s %.3f MB;",
                            analysis::memory_class_name(static_cast<analysis::MemoryClass>(c)),
                            mb(o.by_class[c]));
    }
    text += "\n  by allocation site:\n";
    for (const analysis::SiteBytes& s : o.sites)
      base::append_format(text, "    %12.3f MB  %s\n", mb(s.bytes), b.sites[s.site].c_str());
    text += "  largest blocks (size, class, age, site):\n";
    for (const analysis::LiveBlock& l : o.largest) {
      std::string age =
          l.age_ns < 0 ? "from before the run" : base::format("%.3f ms", static_cast<double>(l.age_ns) / 1e6);
      base::append_format(text, "    %12.3f MB  %-15s  %-20s  %s\n", mb(l.bytes),
                          analysis::memory_class_name(l.cls), age.c_str(), b.sites[l.site].c_str());
    }
    text += "\n";
  }
  return text;
}

json out_of_memory_json(const analysis::TraceModel& model, const analysis::MemoryBreakdown& b) {
  json out = json::array();
  for (const analysis::OutOfMemoryReport& o : b.out_of_memory) {
    json largest = json::array();
    for (const analysis::LiveBlock& l : o.largest) {
      largest.push_back({{"bytes", l.bytes},
                         {"class", analysis::memory_class_name(l.cls)},
                         {"site", b.sites[l.site]},
                         {"age_ns", l.age_ns}});
    }
    out.push_back({{"device", analysis::memory_device_name(o.device)},
                   {"requested_bytes", o.requested_bytes},
                   {"step", o.step},
                   {"operator", model.name(o.operator_name)},
                   {"thread", o.tid},
                   {"alive_bytes", o.alive_bytes},
                   {"allocator_bytes", o.allocator_bytes},
                   {"live_blocks", o.live_blocks},
                   {"classes", classes_json(o.by_class)},
                   {"largest", largest}});
  }
  return out;
}

// Writes memory_record.csv, operator_memory.csv, memory_breakdown.csv,
// memory_leaks.csv and memory_timeline.csv when the run has memory reports
// (`operators`, `operator_keys`: memory_operators of each), and
// oom_report.txt when an allocation failed; returns the first error and
// fills `summary`.
std::string write_memory_outputs(const analysis::TraceModel& model, const std::vector<uint32_t>& operators,
                                 const std::vector<uint32_t>& operator_keys,
                                 const std::vector<uint32_t>& failed_keys,
                                 const std::vector<analysis::MemoryClassSample>& series, const OutputDir& out,
                                 json* summary) {
  // Files of an earlier analysis of other steps would be stale.
  if (model.memory.empty()) {
    for (const char* name : {"memory_record.csv", "operator_memory.csv", "memory_breakdown.csv",
                             "memory_leaks.csv", "memory_timeline.csv", "memory_snapshot.pickle"})
      unlinkat(out.fd, name, 0);
  }
  if (model.failed_allocations.empty()) unlinkat(out.fd, "oom_report.txt", 0);
  if (model.memory.empty() && model.failed_allocations.empty()) return "";
  analysis::MemoryBreakdown breakdown = analysis::memory_breakdown(model, operator_keys, failed_keys);
  std::vector<std::string> errors;
  if (!model.memory.empty()) {
    analysis::MemoryMatch match = analysis::match_allocations(model, operators);
    *summary = memory_summary(model, match);
    add_breakdown_summary(model, breakdown, summary);
    errors = {
        exporter::write_memory_record(model, out.file("memory_record.csv")),
        exporter::write_operator_memory(model, match, out.file("operator_memory.csv")),
        exporter::write_memory_breakdown(model, breakdown, out.file("memory_breakdown.csv")),
        exporter::write_memory_leaks(breakdown, out.file("memory_leaks.csv")),
        exporter::write_memory_timeline(model, series, out.file("memory_timeline.csv")),
        exporter::write_memory_snapshot(model, breakdown, out.file("memory_snapshot.pickle")),
    };
  } else {
    *summary = json::object();
  }
  if (!breakdown.out_of_memory.empty()) {
    (*summary)["out_of_memory"] = out_of_memory_json(model, breakdown);
    exporter::OutputPath where = out.file("oom_report.txt");
    errors.push_back(base::write_file_atomically_at(out.fd, "oom_report.txt",
                                                    out_of_memory_text(model, breakdown), where.display()));
  }
  for (std::string& e : errors) {
    if (!e.empty()) return e;
  }
  return "";
}

// Writes the host_*_usage.csv of the parts the run sampled (host_sys) and
// sets (*extra)["host"] and `*bottlenecks`: the samples and the steps the
// host was the bottleneck of (the summary and the advisor name them).
std::string write_host_outputs(const analysis::TraceModel& model, const OutputDir& out, json* extra,
                               std::optional<analysis::HostBottlenecks>* bottlenecks) {
  std::string errors;
  bool any = false;
  std::vector<analysis::HostUsageTable> tables = analysis::host_usage_tables(model);
  for (const analysis::HostUsageTable& table : tables) {
    if (table.ts_ns.empty()) {
      unlinkat(out.fd, table.file, 0);  // of an earlier analysis
      continue;
    }
    any = true;
    keep_first_error(&errors,
                     exporter::write_host_usage(table, model.realtime_offset_ns, out.file(table.file)));
  }
  if (!any) return errors;
  const analysis::HostBottlenecks& b = bottlenecks->emplace(analysis::host_bottlenecks(model, tables));
  (*extra)["host"] = {{"cpu_samples", b.samples},
                      {"saturated_cpu_percent", analysis::kSaturatedCpuPercent},
                      {"cpu_saturated_steps", b.cpu_saturated_steps},
                      {"cpu_saturated_mean_percent", b.cpu_saturated_percent},
                      {"cpu_saturated_data_wait_ns", b.cpu_saturated_data_wait_ns},
                      {"memory_pressure_percent", analysis::kMemoryPressurePercent},
                      {"memory_pressure_steps", b.memory_pressure_steps}};
  return errors;
}

// The start-up phase (analysis.start_up) and the open tail (analysis.tail):
// how long each was and, for the start-up, what it held. Neither counts
// in the step statistics; a reader is told where those seconds went.
void add_phases(const analysis::TraceModel& m, json* extra) {
  json& out = *extra;
  if (m.start_up.number >= 0) {
    uint64_t gc_calls = 0, gc_ns = 0, op_calls = 0, op_self_ns = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_name;  // calls, self
    for (const analysis::NameFacts& n : name_facts(m, m.in_start_up)) {
      if (!n.is_op && analysis::is_gc_range(n.name)) {
        gc_calls += n.calls;
        gc_ns += n.total_ns;
      }
      if (n.is_op) {
        op_calls += n.calls;
        op_self_ns += n.self_ns;
      }
      auto& [calls, self] = by_name[n.name];
      calls += n.calls;
      self += n.self_ns;
    }
    std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> top(by_name.begin(), by_name.end());
    std::stable_sort(top.begin(), top.end(),
                     [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    json names = json::array();
    for (size_t i = 0; i < top.size() && i < 5; ++i)
      names.push_back(
          {{"name", top[i].first}, {"calls", top[i].second.first}, {"self_ms", top[i].second.second / 1e6}});
    out["start_up"] = {{"recorded_as_step", m.start_up.number},
                       {"ms", (m.start_up.end_ns - m.start_up.start_ns) / 1e6},
                       {"gc_collections", gc_calls},
                       {"gc_ms", gc_ns / 1e6},
                       {"operator_calls", op_calls},
                       {"operators_self_ms", op_self_ns / 1e6},
                       {"top_by_self_time", names}};
  }
  if (m.tail.number >= 0)
    out["tail"] = {{"recorded_as_step", m.tail.number}, {"ms", (m.tail.end_ns - m.tail.start_ns) / 1e6}};
}

// analysis.in_steps: per name, what ran inside the counted steps (host:
// calls and self time; GPU: calls and time), for `trainprof diff`'s per-step
// figures; the CSV tables count the whole run, start-up and tail included.
json in_steps_json(const analysis::TraceModel& m) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> host, gpu;
  for (const analysis::NameFacts& n : name_facts(m, m.in_steps)) {
    auto& [calls, self] = host[n.name];
    calls += n.calls;
    self += n.self_ns;
  }
  std::vector<analysis::StepWindow> by_start = analysis::steps_by_start(m.steps);
  for (const analysis::GpuActivity& a : m.gpu) {
    if (!analysis::is_device_activity(a) || analysis::step_at(by_start, a.start_ns) < 0) continue;
    auto& [c, ns] = gpu[m.name(a.name)];
    ++c;
    ns += a.end_ns > a.start_ns ? a.end_ns - a.start_ns : 0;
  }
  auto rows = [](const std::map<std::string, std::pair<uint64_t, uint64_t>>& by_name) {
    json out = json::array();
    for (const auto& [name, v] : by_name) out.push_back({name, v.first, v.second / 1e3});
    return out;
  };
  return {{"host", rows(host)}, {"gpu", rows(gpu)}};
}

// analysis.python_outside_operators: the stack samples' verdict over the
// counted steps, the functions with the most time first.
json outside_json(const analysis::TraceModel& m, const analysis::OutsideOperators& o) {
  json functions = json::array();
  double steps = static_cast<double>(std::max<int64_t>(o.steps, 1));
  for (size_t i = 0; i < o.functions.size() && i < 10; ++i) {
    const analysis::OutsideFunction& f = o.functions[i];
    functions.push_back({{"function", f.function},
                         {"file", f.file},
                         {"line", f.line},
                         {"input", f.input},
                         {"ms_per_step", f.ns / 1e6 / steps},
                         {"name", analysis::describe(f)}});
  }
  return {{"samples", m.stack_samples.size()},
          {"samples_in_steps", o.samples},
          {"steps", o.steps},
          {"outside_ms_per_step", o.outside_ns / 1e6 / steps},
          {"glue_gap_ms", analysis::kGlueGapNs / 1e6},
          {"functions", functions},
          {"not_attributed", o.not_attributed}};
}

// The what-if estimates every analysis makes (analysis/what_if.h): the
// loop's data waits hidden, its communication overlapped, and the longest
// named range or device activity on the first step's critical path twice as
// fast. The "what_if" array of profiler_info.json's analysis: those whose
// kind is on the path.
json what_if_estimates(const std::vector<analysis::WhatIfObserver>& observers,
                       const std::vector<analysis::PathSegment>& path) {
  auto on_path = [&path](analysis::PathKind kind) {
    return std::any_of(path.begin(), path.end(),
                       [kind](const analysis::PathSegment& s) { return s.kind == kind; });
  };
  json out = json::array();
  for (const analysis::WhatIfObserver& o : observers) {
    if (o.change().hide_data_wait && !on_path(analysis::PathKind::kDataWait)) continue;
    if (o.change().overlap_communication && !on_path(analysis::PathKind::kCommunication)) continue;
    analysis::WhatIfSummary s = analysis::summarize_what_if(o.estimates());
    if (s.steps == 0) continue;
    out.push_back({{"change", analysis::what_if_label(o.change())},
                   {"steps", s.steps},
                   {"median_step_ms", s.recorded_ms},
                   {"estimated_step_ms", s.estimated_ms}});
  }
  return out;
}

// The default changes, in the order the summary gives them.
std::vector<analysis::WhatIfObserver> default_what_ifs() {
  std::vector<analysis::WhatIfObserver> out;
  analysis::WhatIf change;
  change.hide_data_wait = true;
  out.emplace_back(change);
  change = analysis::WhatIf();
  change.overlap_communication = true;
  out.emplace_back(change);
  out.emplace_back(analysis::WhatIf(), /*pick_longest=*/true);
  return out;
}

// What the passes collect over the windows of a run (analysis/run_loader.h).
class WindowPasses {
 public:
  // `trace`, `database`: the outputs fed window by window; null: not written.
  // `critical_path`: the critical path's accumulator runs.
  WindowPasses(analysis::TraceModel& m, exporter::ChromeTraceWriter* trace,
               exporter::PerfettoTraceWriter* perfetto, exporter::DatabaseWriter* database,
               bool critical_path, int threads)
      : threads_(threads),
        critical_path_(critical_path),
        what_ifs_(default_what_ifs()),
        self_(m),
        outside_(m),
        launches_(m),
        steps_(m),
        trace_(trace),
        perfetto_(perfetto),
        database_(database),
        memory_names_(m.memory.size(), 0),
        memory_keys_(m.memory.size(), 0),
        failed_names_(m.failed_allocations.size(), 0),
        failed_keys_(m.failed_allocations.size(), 0) {
    for (analysis::WhatIfObserver& o : what_ifs_) path_.add_observer(&o);
  }

  // The window's passes side by side on up to `threads_` threads: each reads
  // the model and writes only its own state, so the outputs are those of
  // one thread.
  void add(analysis::TraceModel& m, const analysis::Window& w) {
    outside_.add_window(m);  // sets the samples' outside times: before the others read them
    const analysis::TraceModel& model = m;
    std::vector<std::function<void()>> tasks;  // the longest first, for an even spread
    if (perfetto_ != nullptr) tasks.emplace_back([&] { perfetto_->add_window(model, w.end_ns); });
    if (critical_path_) tasks.emplace_back([&] { path_.add_window(model, w.end_ns); });
    if (trace_ != nullptr) tasks.emplace_back([&] { trace_->add_window(model, w.end_ns); });
    tasks.emplace_back([&] { add_tables(model, w); });
    if (database_ != nullptr) tasks.emplace_back([&] { database_->add_window(model); });
    base::run_in_parallel(tasks, threads_);
  }

  // Self times, totals and step rows complete.
  void finish(analysis::TraceModel& m) {
    self_.finish(m);
    outside_.finish(m);
    launches_.finish(m);
    analysis::finish_totals(m, &totals_);
    steps_.use_device_time(m);
    step_rows_ = steps_.finish();
    if (critical_path_) path_segments_ = path_.finish(m);
  }

  const std::vector<analysis::SliceTotals>& totals() const { return totals_; }
  const std::vector<analysis::StepTraceRow>& step_rows() const { return step_rows_; }
  const std::vector<uint32_t>& memory_names() const { return memory_names_; }
  const std::vector<uint32_t>& memory_keys() const { return memory_keys_; }
  const std::vector<uint32_t>& failed_keys() const { return failed_keys_; }
  const std::vector<analysis::PathSegment>& critical_path() const { return path_segments_; }
  const std::vector<analysis::WhatIfObserver>& what_ifs() const { return what_ifs_; }

 private:
  // The tables' passes over one window: self times, totals, launches, the
  // step breakdown, each memory report's operator.
  void add_tables(const analysis::TraceModel& m, const analysis::Window& w) {
    self_.add_window(m);
    launches_.add_window(m);
    analysis::add_totals(m, &totals_);
    steps_.add_window(m, w.start_ns, w.end_ns);
    size_t first_report = next_report_;
    while (next_report_ < m.memory.size() && m.memory[next_report_].ts_ns < w.end_ns) ++next_report_;
    analysis::memory_operators(m, first_report, next_report_, &memory_names_, &memory_keys_);
    size_t first_failed = next_failed_;
    while (next_failed_ < m.failed_allocations.size() && m.failed_allocations[next_failed_].ts_ns < w.end_ns)
      ++next_failed_;
    analysis::memory_operators(m, m.failed_allocations, first_failed, next_failed_, &failed_names_,
                               &failed_keys_);
  }

  int threads_;
  bool critical_path_;
  std::vector<analysis::WhatIfObserver> what_ifs_;  // told of each step by path_
  analysis::SelfTimeAccumulator self_;
  analysis::OutsideOperatorsAccumulator outside_;
  analysis::LaunchAttribution launches_;
  analysis::StepTraceAccumulator steps_;
  analysis::CriticalPathAccumulator path_;
  std::vector<analysis::PathSegment> path_segments_;
  exporter::ChromeTraceWriter* trace_;
  exporter::PerfettoTraceWriter* perfetto_;
  exporter::DatabaseWriter* database_;
  std::vector<analysis::SliceTotals> totals_;
  std::vector<analysis::StepTraceRow> step_rows_;
  std::vector<uint32_t> memory_names_;  // per memory report: its operator
  std::vector<uint32_t> memory_keys_;   // per memory report: its operator's key + 1 (0: none)
  std::vector<uint32_t> failed_names_;  // per failed allocation: its operator
  std::vector<uint32_t> failed_keys_;   // and its key + 1
  size_t next_failed_ = 0;
  size_t next_report_ = 0;
};

}  // namespace

int analysis_threads(const AnalyseOptions& options) {
  return options.threads > 0 ? options.threads : base::usable_cores();
}

namespace {

// The outputs written window by window; unset: not asked for.
struct Writers {
  std::optional<exporter::ChromeTraceWriter> trace;
  std::optional<exporter::PerfettoTraceWriter> perfetto;
  std::optional<exporter::DatabaseWriter> database;
};

// Opens the writers asked for, and removes an earlier analysis's outputs
// that will not be written again.
void open_writers(const analysis::TraceModel& model, const analysis::RunLoader& loader, const RunWrite& w,
                  Writers* writers) {
  const AnalyseOptions& options = w.options;
  if (options.export_text && options.trace_json) {
    writers->trace.emplace(model, w.out.file("trace_view.json"), w.run.filename().string(), options.pretty,
                           options.trace_size_limit_bytes, loader.earliest_slice_ns());
  } else {
    unlinkat(w.out.fd, "trace_view.json", 0);
  }
  if (options.export_text && options.trace_perfetto) {
    writers->perfetto.emplace(model, w.out.file("trace_view.pftrace"), loader.earliest_slice_ns(),
                              /*compress=*/true);
  } else {
    unlinkat(w.out.fd, "trace_view.pftrace", 0);
  }
  if (options.export_db) {
    writers->database.emplace(w.out.file(kDatabaseName));
  } else {
    unlinkat(w.out.fd, kDatabaseName, 0);
  }
}

// What the passes left for the outputs written after the windows.
struct PassResults {
  const analysis::TraceModel& model;
  const WindowPasses& passes;
  const std::vector<analysis::OpStatisticRow>& operators;
  const analysis::OutsideOperators& outside;
  const std::string& run_info_text;  // the run's own profiler_info.json
};

// Closes the window-by-window writers; returns the first error.
std::string finish_writers(const PassResults& p, Writers& writers, RunAnalysis& r) {
  std::string errors;
  if (writers.database) {
    keep_first_error(&errors, writers.database->finish(p.model, p.passes.step_rows(), p.operators,
                                                       p.passes.memory_names(), p.run_info_text, &p.outside));
  }
  if (writers.perfetto) {
    exporter::PerfettoTraceResult result = writers.perfetto->finish(p.model, p.passes.critical_path());
    keep_first_error(&errors, result.error);
    if (result.clamped_slices > 0) {
      add_warning(
          r, "trace_view.pftrace: " + std::to_string(result.clamped_slices) +
                 " range(s) that crossed the end of an enclosing one end there (Perfetto's tracks nest)");
    }
  }
  if (writers.trace) {
    exporter::ChromeTraceResult trace_result = writers.trace->finish(p.passes.critical_path());
    if (!trace_result.cut_warning.empty()) add_warning(r, trace_result.cut_warning);
    keep_first_error(&errors, trace_result.error);
  }
  return errors;
}

// The CSV tables (export_text); returns the first error. A table with no
// rows is not written, and an earlier analysis's is removed.
std::string write_tables(const PassResults& p, const OutputDir& out) {
  const analysis::TraceModel& model = p.model;
  std::string errors;
  keep_first_error(&errors, exporter::write_op_statistic(p.operators, out.file("op_statistic.csv")));
  keep_first_error(&errors,
                   exporter::write_operator_details(analysis::operator_details(model, p.passes.totals()),
                                                    out.file("operator_details.csv")));
  keep_first_error(&errors,
                   exporter::write_step_trace_time(p.passes.step_rows(), out.file("step_trace_time.csv")));
  if (!p.passes.critical_path().empty()) {
    keep_first_error(&errors, exporter::write_critical_path(model, p.passes.critical_path(),
                                                            out.file("critical_path.csv")));
  } else {
    unlinkat(out.fd, "critical_path.csv", 0);
  }
  if (!p.outside.by_step.empty()) {
    keep_first_error(&errors, exporter::write_python_outside_operators(
                                  p.outside, out.file("python_outside_operators.csv")));
  } else {
    unlinkat(out.fd, "python_outside_operators.csv", 0);
  }
  if (!model.data_stages.empty()) {
    keep_first_error(&errors,
                     exporter::write_dataset(analysis::dataset_statistics(model), out.file("dataset.csv")));
  } else {
    unlinkat(out.fd, "dataset.csv", 0);
  }
  std::vector<analysis::KernelRow> kernels = analysis::kernel_rows(model);
  if (!kernels.empty()) {
    keep_first_error(&errors, exporter::write_kernel_details(kernels, model.realtime_offset_ns,
                                                             out.file("kernel_details.csv")));
  } else {
    unlinkat(out.fd, "kernel_details.csv", 0);
  }
  return errors;
}

// The memory and host outputs, rank_summary.json, and the output info's
// summaries (memory, host, phases, per-step names, what-if, advice);
// returns the first error.
std::string write_summaries(const PassResults& p, const RunWrite& w,
                            const std::vector<analysis::MemoryClassSample>& memory_series) {
  const analysis::TraceModel& model = p.model;
  const WindowPasses& passes = p.passes;
  json* extra = w.extra;
  std::string errors;
  json memory;
  if (w.options.export_text)
    keep_first_error(&errors, write_memory_outputs(model, passes.memory_names(), passes.memory_keys(),
                                                   passes.failed_keys(), memory_series, w.out, &memory));
  if (!memory.is_null()) (*extra)["memory"] = memory;
  std::optional<analysis::HostBottlenecks> host;
  if (w.options.export_text) keep_first_error(&errors, write_host_outputs(model, w.out, extra, &host));
  add_phases(model, extra);
  if (!model.steps.empty()) (*extra)["in_steps"] = in_steps_json(model);
  if (!passes.critical_path().empty())
    (*extra)["what_if"] = what_if_estimates(passes.what_ifs(), passes.critical_path());
  if (w.options.advise) {
    json run_info;
    base::parse_json_limited(p.run_info_text, &run_info);  // checked when the run was read
    analysis::AdviceFacts facts =
        advice_facts(RunAdviceInput{&model, &passes.step_rows(), &passes.what_ifs(), &passes.critical_path(),
                                    host ? &*host : nullptr, &run_info, &p.outside});
    (*extra)["advice"] = findings_json(analysis::advise(facts));
  }
  if (!model.comm_calls.empty()) {
    keep_first_error(&errors,
                     base::write_file_atomically_at(w.out.fd, "rank_summary.json",
                                                    analysis::rank_summary_json(analysis::rank_summary(
                                                        model, passes.step_rows(), &p.outside)),
                                                    w.out.path + "/rank_summary.json"));
  } else {
    unlinkat(w.out.fd, "rank_summary.json", 0);  // of an earlier analysis
  }
  return errors;
}

}  // namespace

std::string write_outputs(analysis::TraceModel& model, analysis::RunLoader& loader, const RunWrite& w) {
  // What the memory holds over time, as counter tracks the writers draw.
  std::vector<analysis::MemoryClassSample> memory_series;
  if (w.options.export_text) {
    memory_series = analysis::memory_class_series(model);
    analysis::add_memory_class_counters(model, memory_series);
  }
  Writers writers;
  open_writers(model, loader, w, &writers);
  WindowPasses passes(
      model, writers.trace ? &*writers.trace : nullptr, writers.perfetto ? &*writers.perfetto : nullptr,
      writers.database ? &*writers.database : nullptr, w.options.critical_path, analysis_threads(w.options));
  std::string error;
  uint64_t window = w.options.window_slices > 0 ? w.options.window_slices : UINT64_MAX;
  if (!loader.load(
          &model, loader.plan_windows(window),
          [&passes](analysis::TraceModel& m, const analysis::Window& win) { passes.add(m, win); }, &error)) {
    return error;
  }
  passes.finish(model);
  for (const std::string& warning : model.warnings) add_warning(w.r, warning);  // reading's and the passes'
  const analysis::OutsideOperators outside = analysis::outside_operators(model);
  if (!model.stack_samples.empty()) (*w.extra)["python_outside_operators"] = outside_json(model, outside);
  std::vector<analysis::OpStatisticRow> operators = analysis::op_statistics(model, passes.totals());
  std::string run_info_text =
      base::read_regular_file_at(AT_FDCWD, (w.run / "profiler_info.json").string(), false);
  PassResults results{model, passes, operators, outside, run_info_text};
  std::string errors = finish_writers(results, writers, w.r);
  if (w.options.export_text) keep_first_error(&errors, write_tables(results, w.out));
  keep_first_error(&errors, write_summaries(results, w, memory_series));
  return errors;
}

}  // namespace trainprof::pipeline
