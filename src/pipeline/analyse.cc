// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The analysis driver: finds runs, analyses each in a worker process (at most
// max_workers at once), collects the results. One run's analysis: under its
// lock, the scan, the outputs (pipeline/run_outputs.h), its profiler_info.json
// (pipeline/run_info.h).
#include "trainprof/analyse.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>

#include "analysis/passes.h"
#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "base/log.h"
#include "base/parallel.h"
#include "base/run_directory.h"
#include "base/safe_file.h"
#include "base/write_all.h"
#include "core/analysis_hook.h"
#include "pipeline/run_directories.h"
#include "pipeline/run_info.h"
#include "pipeline/run_outputs.h"
#include "raw/format.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pipeline::add_warning;
using pipeline::kOutputDirName;
using pipeline::output_info;
using pipeline::OutputDir;
using pipeline::read_clock_offsets;
using pipeline::read_run_end;
using pipeline::read_run_info;
using pipeline::run_info_object;
using pipeline::warn_about_gpu;
using pipeline::write_outputs;

// analyse_run without the exception guard.
RunAnalysis analyse_locked_run(const fs::path& run, int run_fd, const AnalyseOptions& options,
                               RunAnalysis r) {
  auto t0 = std::chrono::steady_clock::now();
  std::string dir = r.run_dir;
  OutputDir out{-1, (run / kOutputDirName).string()};
  struct stat st {};
  bool has_raw = fstatat(run_fd, raw::kRawDirName, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!has_raw && fstatat(run_fd, kOutputDirName, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    r.error = "the raw data of this run was removed by data simplification (--simplify); its outputs in '" +
              out.path + "' are what remains";
    return r;
  }
  // Checked before reading: a run closed meanwhile was still read as partial.
  bool recording = base::run_is_being_recorded(run_fd);
  if (recording) {
    add_warning(r,
                "this run is still being recorded (its recording lock is held): the outputs are partial, "
                "up to the recorder's last flush; analyse it again when it has stopped");
  }
  std::string error;
  analysis::TraceModel model;
  analysis::RunLoader loader;
  loader.use_threads(pipeline::analysis_threads(options));
  json run_end = run_info_object(run_fd);  // one read for how it ended and its clocks
  read_run_end(run_end, model);
  if (!loader.scan(dir, &model, &error)) {
    r.error = error;
    return r;
  }
  r.events = model.event_count;
  read_clock_offsets(run_end, model, r);
  error = analysis::select_steps(model, options.step_list);
  if (!error.empty()) {
    r.error = error;
    return r;
  }
  analysis::symbolize_call_stacks(model);
  auto t_scanned = std::chrono::steady_clock::now();

  base::UniqueFd out_fd(base::make_directory_at(run_fd, kOutputDirName, out.path, &error));
  if (!out_fd.valid()) {
    r.error = error;
    return r;
  }
  out.fd = out_fd.get();
  base::remove_temporaries_at(out.fd);  // of a killed analysis: this one holds the lock
  json extra = json::object();          // the output info's "memory" and "host"
  // The clock alignment used, which the run's own file may outgrow (an
  // exchange that ends after the analysis): `trainprof cluster` compares them.
  extra["clock_sync"] = run_end.contains("clock_sync") ? run_end["clock_sync"] : json(nullptr);
  std::string errors = write_outputs(model, loader, pipeline::RunWrite{run, out, options, r, &extra});
  auto note = [&](const std::string& e) {
    if (!e.empty() && errors.empty()) errors = e;
  };
  auto t_tables = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) {
    return std::to_string(std::chrono::duration<double, std::milli>(b - a).count());
  };
  base::log_debug(dir + ": scan " + ms(t0, t_scanned) + " ms, windows and outputs " +
                  ms(t_scanned, t_tables) + " ms");
  std::string metadata = base::read_regular_file_at(run_fd, "profiler_metadata.json", /*follow=*/false);
  note(base::write_file_atomically_at(out.fd, "profiler_metadata.json", metadata.empty() ? "{}\n" : metadata,
                                      out.path + "/profiler_metadata.json"));
  if (options.data_simplification && recording) {
    add_warning(
        r, "raw/ is kept: --simplify does not remove the raw data of a run that is still being recorded");
  }
  json run_info = read_run_info(run_fd, run.string(), r);
  warn_about_gpu(run_info, r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  note(base::write_file_atomically_at(out.fd, "profiler_info.json",
                                      output_info(run_info, model, loader, r, options, options.pretty, extra),
                                      out.path + "/profiler_info.json"));
  if (!errors.empty()) {
    r.error = errors;
    return r;
  }
  if (options.data_simplification && !recording) {
    std::string e = pipeline::remove_raw_data(run_fd);
    if (!e.empty()) add_warning(r, "could not remove raw data: " + e);
  }
  if (options.link_trace_for_peers && options.export_text) {
    std::string e = pipeline::link_trace_for_peers(run, out.fd);
    if (!e.empty()) add_warning(r, e);
  }
  r.ok = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

bool AnalyseReport::ok() const {
  if (!error.empty()) return false;
  return std::all_of(runs.begin(), runs.end(), [](const RunAnalysis& r) { return r.ok; });
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

// Analyses one run directory in this process: under the run's analysis lock,
// every file relative to the run directory's descriptor.
RunAnalysis analyse_run(const std::string& dir, const AnalyseOptions& options) {
  RunAnalysis r;
  r.run_dir = dir;
  fs::path run = pipeline::normalized(dir);
  try {
    // The run directory itself was named by the caller (or found without
    // following symlinks): below it nothing is followed.
    base::UniqueFd run_fd(::open(run.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!run_fd.valid()) {
      r.error = "cannot open run directory '" + run.string() + "': " + std::strerror(errno);
      return r;
    }
    base::UniqueFd lock = pipeline::take_analysis_lock(run_fd.get(), run.string(), &r.error);
    if (!lock.valid()) return r;
    return analyse_locked_run(run, run_fd.get(), options, std::move(r));
  } catch (const std::exception& e) {  // never take the caller (a training process) down
    RunAnalysis failed;
    failed.run_dir = dir;
    failed.error = std::string("analysis failed: ") + e.what();
    return failed;
  }
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
    base::write_all(fds[1], text.data(), text.size());
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
  std::vector<std::string> runs = find_run_directories(path);
  if (runs.empty()) {
    report.error = no_run_directory_error(path);
    return report;
  }
  if (options.shard_count > 1) {
    if (options.shard_index < 0 || options.shard_index >= options.shard_count) {
      report.error = "shard " + std::to_string(options.shard_index) + " of " +
                     std::to_string(options.shard_count) + " does not exist";
      return report;
    }
    std::vector<std::string> mine;
    for (size_t i = static_cast<size_t>(options.shard_index); i < runs.size();
         i += static_cast<size_t>(options.shard_count)) {
      mine.push_back(runs[i]);
    }
    runs = std::move(mine);
    if (runs.empty()) return report;
  }
  return analyse_runs(runs, options);
}

AnalyseReport analyse_runs(const std::vector<std::string>& runs, const AnalyseOptions& options) {
  AnalyseReport report;
  size_t total = runs.size();
  report.runs.resize(total);
  if (total == 0) return report;
  // max_workers, when given, is the cores the whole analysis may use: the
  // runs at once share them out.
  size_t cores = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                         : static_cast<size_t>(base::usable_cores());
  size_t workers = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                           : std::max<size_t>(1, std::thread::hardware_concurrency() / 2);
  workers = std::min(workers, total);
  AnalyseOptions per_run = options;
  if (per_run.threads <= 0) per_run.threads = static_cast<int>(std::max<size_t>(1, cores / workers));
  if (total == 1) {
    report.runs[0] = analyse_run(runs[0], per_run);
    if (options.on_progress) options.on_progress(1, 1);
    return report;
  }
  std::vector<Worker> active;
  size_t next = 0, done = 0;
  while (done < total) {
    while (next < total && active.size() < workers) {
      Worker w = start_worker(runs[next], next, per_run);
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

namespace {

// A profiler analyses its closed runs (Profiler::analyse, trace_handler)
// through this: collection calls the analysis without depending on it.
[[maybe_unused]] const bool kAnalysisRegistered = (core::register_analysis(&analyse), true);

}  // namespace

}  // namespace trainprof
