// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The terminal report of an analysed run, read back from its CSV outputs (so it
// works on any analysed run, old or new).
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_limits.h"
#include "base/safe_file.h"
#include "base/shell_quote.h"
#include "base/string_format.h"
#include "exporter/csv_reader.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

double number(const std::string& s) {
  return std::strtod(s.c_str(), nullptr);
}

std::string shorten(const std::string& s, size_t width) {
  std::string one_line = s;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  return one_line.size() <= width ? one_line : one_line.substr(0, width - 3) + "...";
}

using base::append_format;

struct NameTotal {
  std::string name;
  double self_us = 0, total_us = 0;
  uint64_t calls = 0;
};

// operator_details.csv has a row per (name, input shapes): one per name here.
std::vector<NameTotal> totals_by_name(const std::vector<std::vector<std::string>>& details) {
  std::map<std::string, NameTotal> by_name;
  for (size_t i = 1; i < details.size(); ++i) {
    const auto& r = details[i];
    if (r.size() < 8) continue;
    NameTotal& t = by_name[r[0]];
    t.name = r[0];
    t.self_us += number(r[3]);
    t.total_us += number(r[4]);
    t.calls += std::strtoull(r[7].c_str(), nullptr, 10);
  }
  std::vector<NameTotal> rows;
  for (auto& [name, t] : by_name) rows.push_back(std::move(t));
  std::sort(rows.begin(), rows.end(), [](const NameTotal& a, const NameTotal& b) {
    return a.self_us != b.self_us ? a.self_us > b.self_us : a.name < b.name;
  });
  return rows;
}

// Peak allocated memory per step (the largest over devices), from the
// output's profiler_info.json (`info`, read from `file`), when the run recorded memory. The file is
// checked, not trusted: what is malformed in it gives `problem` (naming the
// file and the field) and no peaks.
std::map<std::string, double> peak_memory_mb(const nlohmann::json& info, const std::string& file,
                                             std::string* problem) {
  using nlohmann::json;
  std::map<std::string, double> peaks;
  if (!info.is_object()) {
    *problem = "'" + file + "' is not a JSON object";
    return peaks;
  }
  auto bad = [&](const std::string& field, const char* wanted) {
    *problem = "'" + file + "': field \"" + field + "\" is not " + wanted;
    return std::map<std::string, double>{};
  };
  auto analysis = info.find("analysis");
  if (analysis == info.end()) return peaks;
  if (!analysis->is_object()) return bad("analysis", "an object");
  auto memory = analysis->find("memory");
  if (memory == analysis->end()) return peaks;
  if (!memory->is_object()) return bad("analysis.memory", "an object");
  auto steps = memory->find("steps");
  if (steps == memory->end()) return peaks;
  if (!steps->is_array()) return bad("analysis.memory.steps", "an array");
  for (const json& s : *steps) {
    auto step = s.is_object() ? s.find("Step") : s.end();
    auto mb = s.is_object() ? s.find("Peak Memory(MB)") : s.end();
    if (step == s.end() || !step->is_number_integer() || mb == s.end() || !mb->is_number()) {
      return bad("analysis.memory.steps", "a list of {\"Step\": integer, \"Peak Memory(MB)\": number}");
    }
    std::string key = std::to_string(step->get<int64_t>());
    peaks[key] = std::max(peaks[key], mb->get<double>());
  }
  return peaks;
}

// Integers of a JSON array as "3, 4, 7", at most 12 of them; "" for anything else.
std::string step_list(const nlohmann::json& steps) {
  std::string out;
  if (!steps.is_array()) return out;
  size_t shown = 0;
  for (const nlohmann::json& s : steps) {
    if (!s.is_number_integer()) return "";
    if (shown++ == 12) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(s.get<int64_t>());
  }
  return out;
}

// What made a flight recorder write the run, from the output's
// profiler_info.json: said first, it is why the run exists.
void append_trigger(std::string& text, const nlohmann::json& info) {
  if (!info.is_object()) return;  // said with the peaks
  auto flight = info.find("flight_recorder");
  if (flight == info.end() || !flight->is_object()) return;
  auto reason = flight->find("reason");
  if (reason == flight->end() || !reason->is_string()) return;
  text += "  flight recorder: " + reason->get<std::string>() + "\n";
}

// Operators sampled (sample_operators): their statistics are estimates.
void append_sampling(std::string& text, const nlohmann::json& info) {
  if (!info.is_object()) return;  // said with the peaks
  auto options = info.find("options");
  if (options == info.end() || !options->is_object()) return;
  uint64_t n = options->value("sample_operators", uint64_t{1});
  if (n <= 1) return;
  text += "  operators sampled: about 1 call in " + std::to_string(n) + " recorded; their counts and times " +
          "below are the recorded ones x " + std::to_string(n) +
          "; without GPU activity a step's Computing is its time outside communication and data waits\n";
}

// The host sampler's verdict (host_sys), from the output's profiler_info.json.
void append_host(std::string& text, const nlohmann::json& info) {
  if (!info.is_object()) return;  // said with the peaks
  const nlohmann::json* host = nullptr;
  if (auto a = info.find("analysis"); a != info.end() && a->is_object()) {
    if (auto h = a->find("host"); h != a->end() && h->is_object()) host = &*h;
  }
  if (host == nullptr) return;
  std::string cpu = step_list(host->value("cpu_saturated_steps", nlohmann::json()));
  std::string memory = step_list(host->value("memory_pressure_steps", nlohmann::json()));
  if (cpu.empty() && memory.empty()) {
    append_format(text, "  host: CPU under 90 %% and memory under 95 %% in every step (host_*_usage.csv)\n");
    return;
  }
  if (!cpu.empty()) {
    uint64_t wait_ns = 0;
    for (const nlohmann::json& w : host->value("cpu_saturated_data_wait_ns", nlohmann::json::array()))
      if (w.is_number_unsigned()) wait_ns += w.get<uint64_t>();
    std::string waited;
    if (wait_ns > 0) {
      char ms[64];
      std::snprintf(ms, sizeof(ms), "%.3f", static_cast<double>(wait_ns) / 1e6);
      waited = std::string(", while the training loop waited ") + ms + " ms on data in them (dataset.csv)";
    }
    text += "  host: CPU at 90 % or more in step(s) " + cpu + ": the host was the bottleneck there" + waited +
            " (host_cpu_usage.csv)\n";
  }
  if (!memory.empty()) {
    text +=
        "  host: memory in use at 95 % or more of the total in step(s) " + memory + " (host_mem_usage.csv)\n";
  }
}

// The data pipeline's stages (dataset.csv), when the run recorded them.
void append_data_pipeline(std::string& text, const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out / "dataset.csv", ec)) return;
  auto rows = exporter::read_csv_file((out / "dataset.csv").string());
  append_format(text,
                "  data pipeline: stage     operation                  count      avg ms    total ms\n");
  for (size_t i = 1; i < rows.size() && i <= 8; ++i) {
    const auto& r = rows[i];
    if (r.size() < 6) continue;
    append_format(text, "                 %-9s %-24s %7s %11.3f %11.3f\n", shorten(r[1], 9).c_str(),
                  shorten(r[0], 24).c_str(), r[2].c_str(), number(r[3]) / 1e3, number(r[5]) / 1e3);
  }
}

// The GPU rows of op_statistic.csv (kernels, copies and sets by name), the
// ten longest in total. Returns whether the run has any.
bool append_gpu_top(std::string& text, const fs::path& out) {
  auto ops = exporter::read_csv_file((out / "op_statistic.csv").string());
  std::vector<const std::vector<std::string>*> rows;
  for (size_t i = 1; i < ops.size(); ++i) {
    if (ops[i].size() >= 8 && ops[i][1] == "GPU") rows.push_back(&ops[i]);
  }
  if (rows.empty()) return false;
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto* a, const auto* b) { return number((*a)[3]) > number((*b)[3]); });
  append_format(text, "  top on the GPU (kernels, copies)      count    total ms      avg us   time %%\n");
  for (size_t i = 0; i < rows.size() && i < 10; ++i) {
    const std::vector<std::string>& r = *rows[i];
    append_format(text, "  %-34s %8s %11.3f %11.3f %7.1f%%\n", shorten(r[0], 34).c_str(), r[2].c_str(),
                  number(r[3]) / 1e3, number(r[4]), number(r[7]));
  }
  return true;
}

// A step of step_trace_time.csv, in ms.
struct StepRow {
  std::string step;
  double total = 0, computing = 0, data_wait = 0, free = 0, preparing = 0;
};

// The step table: every step, or, past kAllStepsShown steps, the median
// step and the slowest ones (a long run's table would bury them).
constexpr size_t kAllStepsShown = 20;
constexpr size_t kSlowestShown = 8;

void append_step_table(std::string& text, const std::vector<std::vector<std::string>>& steps,
                       const std::map<std::string, double>& peaks) {
  std::vector<StepRow> rows;
  for (size_t i = 1; i < steps.size(); ++i) {
    const auto& r = steps[i];
    if (r.size() < 10) continue;
    // Data Wait (column 10) is absent from tables written before it.
    StepRow row{r[0],
                0,
                number(r[1]) / 1e3,
                r.size() > 10 ? number(r[10]) / 1e3 : 0,
                number(r[5]) / 1e3,
                number(r[9]) / 1e3};
    row.total = row.computing + number(r[2]) / 1e3 + row.data_wait + row.free;
    rows.push_back(row);
  }
  std::vector<StepRow> shown = rows;
  if (rows.size() > kAllStepsShown) {
    std::vector<StepRow> by_time = rows;
    std::sort(by_time.begin(), by_time.end(),
              [](const StepRow& a, const StepRow& b) { return a.total < b.total; });
    StepRow median = by_time[by_time.size() / 2];
    median.step = "median";
    shown.assign(by_time.end() - kSlowestShown, by_time.end());
    std::sort(shown.begin(), shown.end(),
              [](const StepRow& a, const StepRow& b) { return number(a.step) < number(b.step); });
    shown.insert(shown.begin(), median);
    append_format(text, "  the median and the %zu slowest of %zu steps (every step: step_trace_time.csv)\n",
                  kSlowestShown, rows.size());
  }
  append_format(text, "  step      step ms   computing ms   data wait ms    free ms   preparing ms%s\n",
                peaks.empty() ? "" : "   peak memory MB");
  for (const StepRow& r : shown) {
    append_format(text, "  %-6s %10.3f %14.3f %14.3f %10.3f %14.3f", r.step.c_str(), r.total, r.computing,
                  r.data_wait, r.free, r.preparing);
    if (auto peak = peaks.find(r.step); peak != peaks.end()) append_format(text, " %18.1f", peak->second);
    append_format(text, "\n");
  }
}

// What decided the steps' length: critical_path.csv summed over the steps,
// per kind and the longest names on it.
void append_critical_path(std::string& text, const fs::path& out) {
  auto rows = exporter::read_csv_file((out / "critical_path.csv").string());
  std::map<std::string, double> by_kind;
  std::map<std::pair<std::string, std::string>, double> by_name;
  double total = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].size() < 8) continue;
    double us = number(rows[i][7]);
    by_kind[rows[i][1]] += us;
    if (!rows[i][2].empty()) by_name[{rows[i][2], rows[i][1]}] += us;
    total += us;
  }
  if (total <= 0) return;
  auto largest_first = [](const auto& map) {
    std::vector<std::pair<double, typename std::decay_t<decltype(map)>::key_type>> v;
    for (const auto& [key, us] : map) v.emplace_back(us, key);
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return v;
  };
  std::string kinds;
  for (const auto& [us, kind] : largest_first(by_kind)) {
    char part[64];
    std::snprintf(part, sizeof(part), "%s%s %.1f %%", kinds.empty() ? "" : ", ", kind.c_str(),
                  100.0 * us / total);
    kinds += part;
  }
  append_format(text, "  critical path (what decided the steps' length, critical_path.csv): %s\n",
                kinds.c_str());
  std::string names;
  size_t shown = 0;
  for (const auto& [us, key] : largest_first(by_name)) {
    if (shown++ == 5) break;
    char part[160];
    std::snprintf(part, sizeof(part), "%s%s (%s) %.1f %%", names.empty() ? "" : ", ",
                  shorten(key.first, 48).c_str(), key.second.c_str(), 100.0 * us / total);
    names += part;
  }
  if (!names.empty()) append_format(text, "    longest on it: %s\n", names.c_str());
}

// profiler_info.json's analysis.`key`, nullptr when there is none (a
// malformed file is said with the peaks).
const nlohmann::json* analysis_entry(const nlohmann::json& info, const char* key) {
  if (!info.is_object()) return nullptr;
  auto a = info.find("analysis");
  if (a == info.end() || !a->is_object()) return nullptr;
  auto entry = a->find(key);
  return entry == a->end() ? nullptr : &*entry;
}

// The what-if estimates of the analysis (profiler_info.json's).
void append_what_if(std::string& text, const nlohmann::json& info) {
  const nlohmann::json* w = analysis_entry(info, "what_if");
  if (w == nullptr || !w->is_array() || w->empty()) return;
  for (const nlohmann::json& e : *w) {
    if (!e.is_object()) continue;
    double recorded = e.value("median_step_ms", 0.0), estimated = e.value("estimated_step_ms", 0.0);
    if (recorded <= 0) continue;
    append_format(text, "  what if %s: median step %.3f ms -> %.3f ms (%+.1f %%)\n",
                  shorten(e.value("change", std::string()), 80).c_str(), recorded, estimated,
                  100.0 * (estimated - recorded) / recorded);
  }
}

// What the memory held at its highest peak per device, and what grows from
// step to step (profiler_info.json's analysis.memory: breakdown, leaks).
void append_memory_breakdown(std::string& text, const nlohmann::json& info) try {
  const nlohmann::json* memory = analysis_entry(info, "memory");
  if (memory == nullptr || !memory->is_object()) return;
  auto peaks = memory->find("breakdown");
  for (const nlohmann::json& p :
       peaks != memory->end() && peaks->is_array() ? *peaks : nlohmann::json::array()) {
    auto classes = p.is_object() ? p.find("classes") : p.end();
    if (!p.is_object() || classes == p.end() || !classes->is_object()) continue;
    double total = static_cast<double>(p.value("peak_bytes", uint64_t{0}));
    if (total <= 0) continue;
    std::vector<std::pair<double, std::string>> parts;
    for (const auto& [name, bytes] : classes->items()) {
      if (bytes.is_number() && bytes.get<double>() > 0) parts.emplace_back(bytes.get<double>(), name);
    }
    std::sort(parts.rbegin(), parts.rend());
    std::string split;
    for (const auto& [bytes, name] : parts)
      append_format(split, "%s%s %.0f %%", split.empty() ? "" : ", ", name.c_str(), 100.0 * bytes / total);
    std::string op = p.value("operator", std::string());
    append_format(text, "  memory at the peak (%s, step %lld, %.3f MB%s%s): %s (memory_breakdown.csv)\n",
                  p.value("device", std::string()).c_str(),
                  static_cast<long long>(p.value("step", int64_t{0})), total / (1024.0 * 1024.0),
                  op.empty() ? "" : ", during ", shorten(op, 40).c_str(), split.c_str());
  }
  auto failed = memory->find("out_of_memory");
  for (const nlohmann::json& o :
       failed != memory->end() && failed->is_array() ? *failed : nlohmann::json::array()) {
    if (!o.is_object()) continue;
    std::string op = o.value("operator", std::string());
    append_format(
        text, "  OUT OF MEMORY on %s: %.3f MB asked for in step %lld%s%s, %.3f MB alive (oom_report.txt)\n",
        o.value("device", std::string()).c_str(),
        static_cast<double>(o.value("requested_bytes", uint64_t{0})) / (1024.0 * 1024.0),
        static_cast<long long>(o.value("step", int64_t{-1})), op.empty() ? "" : " during ",
        shorten(op, 40).c_str(),
        static_cast<double>(o.value("alive_bytes", uint64_t{0})) / (1024.0 * 1024.0));
  }
  auto leaks = memory->find("leaks");
  if (leaks == memory->end() || !leaks->is_array()) return;
  size_t shown = 0;
  for (const nlohmann::json& l : *leaks) {
    if (!l.is_object() || shown++ == 3) break;
    append_format(text, "  memory growing: %.3f MB per step from %s since step %lld (%s, memory_leaks.csv)\n",
                  l.value("growth_per_step_bytes", 0.0) / (1024.0 * 1024.0),
                  shorten(l.value("site", std::string()), 80).c_str(),
                  static_cast<long long>(l.value("first_step", int64_t{0})),
                  l.value("device", std::string()).c_str());
  }
} catch (const nlohmann::json::exception&) {  // an edited profiler_info.json: a field of another type
  text += "  warning: profiler_info.json's analysis.memory is malformed; the memory breakdown is not shown\n";
}

// The start-up phase (profiler_info.json's analysis.start_up): how long
// the script ran before its first step, and what took that time, since
// the step statistics below leave it out.
void append_start_up(std::string& text, const nlohmann::json& info) try {
  const nlohmann::json* s = analysis_entry(info, "start_up");
  if (s == nullptr || !s->is_object()) return;
  append_format(text,
                "  start-up: %.3f s before the first step (recorded as ProfilerStep#%lld; not in the step "
                "statistics): %llu operator calls (%.3f ms), %llu garbage collections (%.3f ms)\n",
                base::number_field(*s, "ms", 0) / 1e3,
                static_cast<long long>(s->value("recorded_as_step", int64_t{0})),
                static_cast<unsigned long long>(s->value("operator_calls", uint64_t{0})),
                base::number_field(*s, "operators_self_ms", 0),
                static_cast<unsigned long long>(s->value("gc_collections", uint64_t{0})),
                base::number_field(*s, "gc_ms", 0));
} catch (const nlohmann::json::exception&) {  // an edited profiler_info.json
  text += "  warning: profiler_info.json's analysis.start_up is malformed; the start-up is not shown\n";
}

// Python outside operators (profiler_info.json's analysis.
// python_outside_operators): the functions the stack samples found where
// no operator or range was, per step.
void append_outside(std::string& text, const nlohmann::json& info) try {
  const nlohmann::json* o = analysis_entry(info, "python_outside_operators");
  if (o == nullptr) {
    // No samples: say why host time outside operators is not named.
    auto options = info.find("options");
    bool off = options != info.end() && options->is_object() &&
               options->value("python_stack_sampling_ms", uint64_t{1}) == 0;
    text +=
        off ? "  Python outside operators: not sampled (python_stack_sampling_ms is 0)\n"
            : "  Python outside operators: not available (no Python stack samples: a C++ program, or Python "
              "before 3.11, cannot name the functions that spend host time outside operators)\n";
    return;
  }
  if (!o->is_object()) return;
  if (std::string why = base::string_field(*o, "not_attributed"); !why.empty()) {
    text += "  Python outside operators: not attributed (" + why + ")\n";
    return;
  }
  auto functions = o->find("functions");
  if (functions == o->end() || !functions->is_array() || functions->empty()) return;
  std::string names;
  size_t shown = 0;
  for (const nlohmann::json& f : *functions) {
    if (!f.is_object() || shown++ == 3) break;
    char part[64];
    std::snprintf(part, sizeof(part), " %.3f ms%s", base::number_field(f, "ms_per_step", 0),
                  f.value("input", false) ? " (input)" : "");
    names += (names.empty() ? "" : ", ") + shorten(base::string_field(f, "name"), 60) + part;
  }
  append_format(text, "  Python outside operators: %.3f ms per step (python_outside_operators.csv): %s\n",
                base::number_field(*o, "outside_ms_per_step", 0), names.c_str());
} catch (const nlohmann::json::exception&) {  // an edited profiler_info.json
  text += "  warning: profiler_info.json's analysis.python_outside_operators is malformed; not shown\n";
}

// The advisor's findings (profiler_info.json's), first: what to change.
void append_advice(std::string& text, const nlohmann::json& info, const std::string& run_dir) {
  const nlohmann::json* advice = analysis_entry(info, "advice");
  if (advice == nullptr || !advice->is_array()) return;
  if (advice->empty()) {
    text += "  advice: none of the advisor's rules fired (trainprof advise)\n";
    return;
  }
  append_format(text, "  advice (evidence and changes: trainprof advise %s):\n",
                base::shell_quote(run_dir).c_str());
  size_t shown = 0;
  for (const nlohmann::json& f : *advice) {
    if (!f.is_object()) continue;
    if (shown++ == 3) {
      append_format(text, "    and %zu more\n", advice->size() - 3);
      break;
    }
    double saving = base::number_field(f, "saving_ms", -1), step = base::number_field(f, "step_ms", 0);
    std::string worth;
    if (saving >= 0 && step > 0) {
      char part[96];
      std::snprintf(part, sizeof(part), ": worth %.3f ms per step (%.1f %%)", saving, 100.0 * saving / step);
      worth = part;
    }
    append_format(text, "    %zu. %s%s\n", shown,
                  shorten(base::string_field(f, "title", base::string_field(f, "rule")), 80).c_str(),
                  worth.c_str());
    append_format(text, "       change: %s\n", shorten(base::string_field(f, "change"), 160).c_str());
  }
}

}  // namespace

std::string summarize_run(const std::string& run_dir) {
  fs::path run(run_dir);
  fs::path out = run / "PROFILER_OUTPUT";
  std::string text;
  append_format(text, "run %s\n", run.c_str());
  std::error_code ec;
  if (!fs::exists(out / "operator_details.csv", ec)) {
    append_format(text, "  not analysed yet: trainprof analyse %s\n", base::shell_quote(run_dir).c_str());
    return text;
  }
  std::string info_file = (out / "profiler_info.json").string();
  nlohmann::json info = base::read_json_object(info_file);
  append_trigger(text, info);
  append_sampling(text, info);
  append_start_up(text, info);
  append_outside(text, info);
  append_advice(text, info, run_dir);
  std::vector<NameTotal> rows =
      totals_by_name(exporter::read_csv_file((out / "operator_details.csv").string()));
  double self_sum = 0;
  for (const NameTotal& t : rows) self_sum += t.self_us;
  append_format(text, "  top by self time (host)              calls     self ms    total ms   self %%\n");
  for (size_t i = 0; i < rows.size() && i < 10; ++i) {
    const NameTotal& t = rows[i];
    append_format(text, "  %-34s %8llu %11.3f %11.3f %7.1f%%\n", shorten(t.name, 34).c_str(),
                  static_cast<unsigned long long>(t.calls), t.self_us / 1e3, t.total_us / 1e3,
                  self_sum > 0 ? 100.0 * t.self_us / self_sum : 0.0);
  }
  bool gpu = append_gpu_top(text, out);
  auto steps = exporter::read_csv_file((out / "step_trace_time.csv").string());
  std::string info_problem;
  std::map<std::string, double> peaks = peak_memory_mb(info, info_file, &info_problem);
  if (!info_problem.empty()) text += "  warning: " + info_problem + "; peak memory is not shown\n";
  if (steps.size() > 1) {
    if (gpu) append_format(text, "  (computing and free: the GPU's busy and idle time)\n");
    append_step_table(text, steps, peaks);
    append_critical_path(text, out);
    append_what_if(text, info);
  } else {
    append_format(text, "  no steps recorded (call Profiler::step() once per training step)\n");
  }
  append_memory_breakdown(text, info);
  append_data_pipeline(text, out);
  append_host(text, info);
  std::string outputs;
  for (const char* f : {"trace_view.json",
                        "trace_view.pftrace",
                        "op_statistic.csv",
                        "operator_details.csv",
                        "step_trace_time.csv",
                        "critical_path.csv",
                        "dataset.csv",
                        "memory_record.csv",
                        "operator_memory.csv",
                        "memory_breakdown.csv",
                        "memory_leaks.csv",
                        "memory_timeline.csv",
                        "memory_snapshot.pickle",
                        "oom_report.txt",
                        "host_cpu_usage.csv",
                        "host_mem_usage.csv",
                        "host_disk_usage.csv",
                        "host_network_usage.csv",
                        "kernel_details.csv",
                        "trainprof.db",
                        "report.html"}) {
    if (fs::exists(out / f, ec)) outputs += std::string(outputs.empty() ? "" : ", ") + f;
  }
  append_format(text, "  outputs: %s/{%s}\n", out.c_str(), outputs.c_str());
  if (!fs::exists(out / "report.html", ec)) {
    append_format(text, "  the same on one page: trainprof report %s\n", base::shell_quote(run_dir).c_str());
  }
  return text;
}

}  // namespace trainprof
