// Copyright trainprof authors. The analysis driver: finds runs, analyses each
// in a worker process (at most max_workers at once), collects the results.
#include "trainprof/analyse.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "analysis/memory.h"
#include "analysis/passes.h"
#include "analysis/trace_model.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/run_directory.h"
#include "core/write_all.h"
#include "export/chrome_trace.h"
#include "export/csv_tables.h"
#include "export/output_file.h"
#include "raw/format.h"
#include "raw/raw_reader.h"
#include "trainprof/profiler.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kOutputDirName = "PROFILER_OUTPUT";
constexpr size_t kMaxWarnings = 50;

// "a/b/" and "a/./b" name the same directory as "a/b".
fs::path normalized(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

bool is_run_directory(const fs::path& p) {
  std::error_code ec;
  std::string name = p.filename().string();
  if (name.size() <= 10 || !name.ends_with("_trainprof") || !fs::is_directory(p, ec)) return false;
  return fs::exists(p / "profiler_info.json", ec) || fs::exists(p / raw::kRawDirName, ec);
}

std::string read_small_file(const fs::path& p) {
  std::string text;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

void add_warning(RunAnalysis& r, std::string w) {
  if (r.warnings.size() < kMaxWarnings) r.warnings.push_back(std::move(w));
  if (r.warnings.size() == kMaxWarnings) r.warnings.back() = "(more warnings omitted)";
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

// Writes memory_record.csv and operator_memory.csv when the run has memory
// reports; returns the first error and fills `summary`.
std::string write_memory_outputs(const analysis::TraceModel& model, const fs::path& out_dir, json* summary) {
  if (model.memory.empty()) {
    std::error_code ec;  // files of an earlier analysis of other steps would be stale
    fs::remove(out_dir / "memory_record.csv", ec);
    fs::remove(out_dir / "operator_memory.csv", ec);
    return "";
  }
  analysis::MemoryMatch match = analysis::match_allocations(model, analysis::memory_operators(model));
  *summary = memory_summary(model, match);
  std::string e = exporter::write_memory_record(model, (out_dir / "memory_record.csv").string());
  std::string e2 = exporter::write_operator_memory(model, match, (out_dir / "operator_memory.csv").string());
  return e.empty() ? e2 : e;
}

// profiler_info.json of the output: the run's own, plus what the analysis did.
std::string output_info(const fs::path& run, const analysis::TraceModel& model, const RunAnalysis& r,
                        const AnalyseOptions& options, bool pretty, const json& memory) {
  json info;
  // A run killed before its info was written, or a damaged file: start afresh
  // (the depth limit keeps dump() below from recursing without bound).
  if (!detail::parse_json_limited(read_small_file(run / "profiler_info.json"), &info).empty() ||
      !info.is_object()) {
    info = json::object();
  }
  json steps = json::array();
  for (const auto& s : model.steps) steps.push_back(s.number);
  json warnings = r.warnings;
  info["analysis"] = {
      {"trainprof_version", std::string(version())},
      {"events", r.events},
      {"slices", model.slice_count()},
      {"steps", steps},
      {"step_list", options.step_list},
      {"analysis_seconds", r.seconds},
      {"analysed_at_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count()},
      {"warnings", warnings},
      // Raw chunks the reader's sequence check found duplicated (dropped),
      // missing or out of order (docs/FORMAT.md, "Damage").
      {"raw_chunks", {{"duplicated", model.chunks_duplicated},
                      {"missing", model.chunks_missing},
                      {"reordered", model.chunks_reordered}}},
  };
  if (!memory.is_null()) info["analysis"]["memory"] = memory;
  return info.dump(pretty ? 2 : -1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace

bool AnalyseReport::ok() const {
  if (!error.empty()) return false;
  return std::all_of(runs.begin(), runs.end(), [](const RunAnalysis& r) { return r.ok; });
}

std::vector<std::string> find_run_directories(const std::string& path) {
  std::vector<std::string> runs;
  std::error_code ec;
  fs::path root = normalized(path);
  if (is_run_directory(root)) return {root.string()};
  if (!fs::is_directory(root, ec)) return runs;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    if (is_run_directory(it->path())) {
      runs.push_back(it->path().lexically_normal().string());
      it.disable_recursion_pending();  // raw/ and PROFILER_OUTPUT/ hold no runs
    }
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::vector<int64_t> parse_step_list(const std::string& text) {
  auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15) {
      throw std::invalid_argument("bad step number '" + s + "' in step list '" + text +
                                  "' (expected N, A-B or A,B,C)");
    }
    return std::stoll(s);
  };
  std::vector<int64_t> steps;
  size_t dash = text.find('-');
  if (dash != std::string::npos) {
    int64_t a = number(text.substr(0, dash)), b = number(text.substr(dash + 1));
    if (b < a) throw std::invalid_argument("step range '" + text + "' ends before it starts");
    if (b - a > 10'000'000) throw std::invalid_argument("step range '" + text + "' is too long");
    for (int64_t s = a; s <= b; ++s) steps.push_back(s);
    return steps;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    steps.push_back(number(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return steps;
}

// Analyses one run directory in this process.
RunAnalysis analyse_run(const std::string& dir, const AnalyseOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  RunAnalysis r;
  r.run_dir = dir;
  fs::path run = normalized(dir);
  fs::path out_dir = run / kOutputDirName;
  std::error_code ec;
  if (!fs::exists(run / raw::kRawDirName, ec) && fs::exists(out_dir, ec)) {
    r.error = "the raw data of this run was removed by data simplification (--simplify); its outputs in '" +
              out_dir.string() + "' are what remains";
    return r;
  }
  std::string error;
  analysis::TraceModel model;
  if (!analysis::build_model(dir, &model, &error)) {
    r.error = error;
    return r;
  }
  r.events = model.event_count;
  error = analysis::select_steps(model, options.step_list);
  if (!error.empty()) {
    r.error = error;
    return r;
  }
  analysis::symbolize_call_stacks(model);
  auto t_read = std::chrono::steady_clock::now();
  analysis::compute_self_times(model);
  for (const std::string& w : model.warnings) add_warning(r, w);  // reading's and the passes'
  auto t_sorted = std::chrono::steady_clock::now();

  if (mkdir(out_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    r.error = "cannot create output directory '" + out_dir.string() + "': " + std::strerror(errno);
    return r;
  }
  auto trace =
      exporter::write_chrome_trace(model, (out_dir / "trace_view.json").string(), run.filename().string(),
                                   options.pretty, options.trace_size_limit_bytes);
  auto t_trace = std::chrono::steady_clock::now();
  if (!trace.cut_warning.empty()) add_warning(r, trace.cut_warning);
  std::string errors = trace.error;
  auto note = [&](const std::string& e) {
    if (!e.empty() && errors.empty()) errors = e;
  };
  std::vector<analysis::SliceTotals> totals = analysis::totals_by_key(model);  // one pass serves both tables
  note(exporter::write_op_statistic(analysis::op_statistics(model, totals),
                                    (out_dir / "op_statistic.csv").string()));
  note(exporter::write_operator_details(analysis::operator_details(model, totals),
                                        (out_dir / "operator_details.csv").string()));
  note(exporter::write_step_trace_time(analysis::step_trace(model),
                                       (out_dir / "step_trace_time.csv").string()));
  if (!model.data_stages.empty()) {
    note(exporter::write_dataset(analysis::dataset_statistics(model), (out_dir / "dataset.csv").string()));
  } else {
    fs::remove(out_dir / "dataset.csv", ec);  // from an earlier analysis of other steps
  }
  json memory;
  note(write_memory_outputs(model, out_dir, &memory));
  auto t_tables = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) {
    return std::to_string(std::chrono::duration<double, std::milli>(b - a).count());
  };
  detail::log_debug(dir + ": read " + ms(t0, t_read) + " ms, sort+self " + ms(t_read, t_sorted) +
                    " ms, trace " + ms(t_sorted, t_trace) + " ms, tables " + ms(t_trace, t_tables) + " ms");
  std::string metadata = read_small_file(run / "profiler_metadata.json");
  note(detail::write_file_atomically((out_dir / "profiler_metadata.json").string(),
                                     metadata.empty() ? "{}\n" : metadata));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  note(detail::write_file_atomically((out_dir / "profiler_info.json").string(),
                                     output_info(run, model, r, options, options.pretty, memory)));
  if (!errors.empty()) {
    r.error = errors;
    return r;
  }
  if (options.data_simplification) {
    fs::remove_all(run / raw::kRawDirName, ec);
    if (ec) add_warning(r, "could not remove raw data: " + ec.message());
  }
  r.ok = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

json to_json(const RunAnalysis& r) {
  return {{"run_dir", r.run_dir},   {"ok", r.ok},         {"error", r.error},
          {"warnings", r.warnings}, {"events", r.events}, {"seconds", r.seconds}};
}

RunAnalysis from_json(const std::string& text, const std::string& dir) {
  RunAnalysis r;
  r.run_dir = dir;
  try {
    json j = json::parse(text);
    r.ok = j.at("ok").get<bool>();
    r.error = j.at("error").get<std::string>();
    r.warnings = j.at("warnings").get<std::vector<std::string>>();
    r.events = j.at("events").get<uint64_t>();
    r.seconds = j.at("seconds").get<double>();
  } catch (const json::exception&) {
    r.ok = false;
    r.error = "analysis worker ended without a result";
  }
  return r;
}

struct Worker {
  pid_t pid;
  int fd;
  size_t index;
  std::string output;
};

// Runs analyse_run in a child process: a crash there fails one run only.
Worker start_worker(const std::string& dir, size_t index, const AnalyseOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) return Worker{-1, -1, index, {}};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    std::string text =
        to_json(analyse_run(dir, options)).dump(-1, ' ', false, json::error_handler_t::replace);
    detail::write_all(fds[1], text.data(), text.size());
    _exit(0);  // no atexit handlers: they belong to the parent
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return Worker{-1, -1, index, {}};
  }
  return Worker{pid, fds[0], index, {}};
}

RunAnalysis finish_worker(Worker& w, const std::string& dir) {
  // Read until EOF (the child closed its end by exiting), then reap it.
  char buf[65536];
  ssize_t n;
  while ((n = read(w.fd, buf, sizeof(buf))) > 0) w.output.append(buf, static_cast<size_t>(n));
  close(w.fd);
  int status = 0;
  waitpid(w.pid, &status, 0);
  if (WIFSIGNALED(status)) {
    RunAnalysis r;
    r.run_dir = dir;
    r.error = std::string("analysis worker was killed by signal ") + strsignal(WTERMSIG(status));
    return r;
  }
  return from_json(w.output, dir);
}

}  // namespace

AnalyseReport analyse(const std::string& path, const AnalyseOptions& options) {
  AnalyseReport report;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    report.error = "'" + path + "' does not exist";
    return report;
  }
  std::vector<std::string> runs = find_run_directories(path);
  if (runs.empty()) {
    report.error = "no trainprof run directory (*_trainprof) at or below '" + path + "'";
    return report;
  }
  size_t total = runs.size();
  report.runs.resize(total);
  if (total == 1) {
    report.runs[0] = analyse_run(runs[0], options);
    if (options.on_progress) options.on_progress(1, 1);
    return report;
  }
  size_t workers = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                           : std::max<size_t>(1, std::thread::hardware_concurrency() / 2);
  std::vector<Worker> active;
  size_t next = 0, done = 0;
  while (done < total) {
    while (next < total && active.size() < workers) {
      Worker w = start_worker(runs[next], next, options);
      if (w.pid < 0) {
        report.runs[next] =
            RunAnalysis{runs[next], false, "cannot start an analysis worker process", {}, 0, 0};
        ++done;
      } else {
        active.push_back(w);
      }
      ++next;
    }
    if (active.empty()) continue;
    // Wait for any worker's pipe to reach EOF.
    std::vector<pollfd> fds;
    for (const Worker& w : active) fds.push_back(pollfd{w.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), -1);
    for (size_t i = 0; i < active.size();) {
      if (fds[i].revents == 0) {
        ++i;
        continue;
      }
      char buf[65536];
      ssize_t n = read(active[i].fd, buf, sizeof(buf));
      if (n > 0) {
        active[i].output.append(buf, static_cast<size_t>(n));
        ++i;
        continue;
      }
      report.runs[active[i].index] = finish_worker(active[i], runs[active[i].index]);
      ++done;
      if (options.on_progress) options.on_progress(done, total);
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return report;
}

}  // namespace trainprof
