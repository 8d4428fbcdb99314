// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Profiler: the control state machine.
//
// Transitions follow torch.profiler's schedule actions: a run directory is open
// while the schedule's action is Record or RecordAndSave; leaving a recording
// action, or finishing a RecordAndSave step, closes it and calls
// on_trace_ready, and a following recording step opens a new one.
#include "trainprof/profiler.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "base/json_limits.h"
#include "base/log.h"
#include "base/run_directory.h"
#include "base/shell_quote.h"
#include "core/analysis_hook.h"
#include "core/clock.h"
#include "core/session.h"
#include "core/trace_handler.h"
#include "trainprof/range.h"

namespace trainprof {

namespace {

// The worker name becomes the first part of a run directory's name: one path
// component, so that runs stay inside the output directory.
void check_worker_name(const std::string& name) {
  const char* why = nullptr;
  if (name.find('/') != std::string::npos) {
    why = "contains '/'";
  } else if (name.find('\0') != std::string::npos) {
    why = "contains a NUL character";
  } else if (name.find("..") != std::string::npos) {
    why = "contains '..'";
  } else if (name.size() > 200) {
    why = "is longer than 200 characters";
  }
  if (why != nullptr) {
    throw std::invalid_argument("trace_handler: worker_name \"" + name + "\" " + why +
                                "; it names run directories inside dir, so it must be a plain file name");
  }
}

}  // namespace

Profiler::Profiler(ProfilerOptions options) : options_(std::move(options)) {
  options_.validate();
  if (options_.sample_operators == 0) options_.sample_operators = 1;  // automatic: every call
  if (const auto* handler = options_.on_trace_ready.target<core::TraceHandler>()) {
    if (handler->dir.empty()) throw std::invalid_argument("trace_handler: dir must not be empty");
    check_worker_name(handler->worker_name);
    options_.output_path = handler->dir;
    worker_name_ = handler->worker_name;
  }
  // Once: runs are written and analysed here whatever the program's
  // current directory is later.
  options_.output_path = base::absolute_path(options_.output_path);
  core::init_clock();  // before the first timestamp this profiler takes
  owner_pid_ = getpid();
  default_worker_name_ = worker_name_.empty();
  if (default_worker_name_) worker_name_ = base::host_name() + "_" + std::to_string(owner_pid_);
  if (options_.schedule && options_.schedule->warmup == 0) {
    base::log_warning("schedule has warmup = 0: the first recorded step of each cycle is cold");
  }
  if (options_.start_profile) start();
}

Profiler::~Profiler() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (started_) stop_locked(false);
  // Reap async analyses that have finished; the others go on after this
  // profiler (and even the training process) is gone.
  reap_analyses_locked(false);
  if (!deferred_runs_.empty()) {
    base::log_warning(std::to_string(deferred_runs_.size()) +
                      " run(s) were not analysed (earlier analyses were still running), the first '" +
                      deferred_runs_.front() + "': run `trainprof analyse " +
                      base::shell_quote(options_.output_path) + "`");
  }
}

void Profiler::start() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  start_locked(false);
}

void Profiler::start_at_step_boundary() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  start_locked(true);
}

void Profiler::stop() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stop_locked(false);
}

void Profiler::stop_at_step_boundary() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stop_locked(true);
}

void Profiler::start_locked(bool at_step_boundary) {
  if (started_) {
    base::log_warning("start() called while the profiler is already started; ignored");
    return;
  }
  started_ = true;
  open_failed_in_cycle_ = false;
  step_while_stopped_said_ = false;
  action_ = options_.schedule ? options_.schedule->action(step_num_) : ProfilerAction::Record;
  if (is_recording(action_)) open_run_locked();
  step_start_ticks_ = detail::now_ticks();
  step_began_at_start_ = !at_step_boundary;
}

void Profiler::stop_locked(bool at_step_boundary) {
  if (!started_) {
    base::log_error("stop() called while the profiler is not started; ignored");
    return;
  }
  if (session_) {
    record_step_range_locked(/*at_stop=*/!at_step_boundary);
    close_run_locked(true);
  }
  started_ = false;
  action_ = ProfilerAction::None;
}

void Profiler::step() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!started_) {
    // Once: a loop that goes on stepping after a stop (an on_trace_ready
    // that called stop(), say) would otherwise log a line per step.
    if (!step_while_stopped_said_) {
      base::log_error(
          "step() called while the profiler is stopped; ignored (and not said again until start())");
      step_while_stopped_said_ = true;
    }
    return;
  }
  ProfilerAction previous = action_;
  if (!analysis_children_.empty()) reap_analyses_locked(false);  // no zombies between cycles
  if (session_) record_step_range_locked(/*at_stop=*/false);
  ++step_num_;
  step_start_ticks_ = detail::now_ticks();
  step_began_at_start_ = false;
  if (!options_.schedule) return;
  ProfilerAction next = options_.schedule->action(step_num_);
  if (is_recording(previous) && (previous == ProfilerAction::RecordAndSave || !is_recording(next)) &&
      session_) {
    close_run_locked(true);
  }
  action_ = next;
  if (!is_recording(next) || previous == ProfilerAction::RecordAndSave) open_failed_in_cycle_ = false;
  if (is_recording(next) && !session_ && !open_failed_in_cycle_) {
    open_run_locked();
    step_start_ticks_ = detail::now_ticks();  // the step starts inside its run
  }
}

void Profiler::record_step_range_locked(bool at_stop) {
  uint8_t flags = (step_began_at_start_ ? raw::kStepStartUp : 0) | (at_stop ? raw::kStepTail : 0);
  Session::record_step(step_num_, step_start_ticks_, detail::now_ticks(), flags);
}

void Profiler::open_run_locked() {
  if (getpid() != owner_pid_ && default_worker_name_) {
    // A fork() child: its runs carry its own pid.
    owner_pid_ = getpid();
    worker_name_ = base::host_name() + "_" + std::to_string(owner_pid_);
  }
  session_ = Session::open(options_, worker_name_);
  // On failure the reason is logged; the profiler stays started but records
  // nothing until the next cycle tries again.
  open_failed_in_cycle_ = session_ == nullptr;
}

void Profiler::close_run_locked(bool call_trace_ready) {
  // Before close(): an analysis that sees the run closed finds its metadata.
  write_metadata_locked(*session_);
  RunSummary summary = session_->close("stop");
  session_.reset();
  if (summary.run_dir.empty()) return;  // a fork() child's copy of the parent's run
  last_run_ = summary;
  if (!summary.run_dir.empty()) unanalysed_runs_.push_back(summary.run_dir);
  if (!call_trace_ready || !options_.on_trace_ready) return;
  try {
    options_.on_trace_ready(*this);
  } catch (const std::exception& e) {
    base::log_error(std::string("on_trace_ready threw: ") + e.what());
  } catch (...) {
    base::log_error("on_trace_ready threw a non-standard exception");
  }
}

int64_t Profiler::step_num() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return step_num_;
}

void Profiler::set_step_num(int64_t step) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  step_num_ = step;
}

ProfilerAction Profiler::current_action() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return action_;
}

bool Profiler::started() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return started_;
}

std::string Profiler::current_run_dir() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return session_ ? session_->run_dir() : std::string();
}

RunSummary Profiler::last_run() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return last_run_;
}

// ---------------------------------------------------------------------------
// Metadata

namespace {

void store_metadata(std::map<std::string, std::string>& metadata, uint64_t& bytes, uint64_t limit,
                    const std::string& key, std::string json_text) {
  auto it = metadata.find(key);
  uint64_t old_size = it == metadata.end() ? 0 : key.size() + it->second.size();
  uint64_t new_total = bytes - old_size + key.size() + json_text.size();
  if (new_total > limit) {
    base::log_error("metadata \"" + key + "\" refused: total metadata would be " + std::to_string(new_total) +
                    " bytes, over the limit of " + std::to_string(limit));
    return;
  }
  if (it != metadata.end()) {
    base::log_warning("metadata key \"" + key + "\" added again; the new value overrides the old");
    it->second = std::move(json_text);
  } else {
    metadata.emplace(key, std::move(json_text));
  }
  bytes = new_total;
}

}  // namespace

void Profiler::add_metadata(const std::string& key, const std::string& value) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::string text = nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  store_metadata(metadata_, metadata_bytes_, options_.metadata_limit_bytes, key, std::move(text));
}

void Profiler::add_metadata_json(const std::string& key, const std::string& json) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // The text comes from outside: nothing it holds may throw into training.
  nlohmann::json parsed;
  std::string error = base::parse_json_limited(json, &parsed);
  if (!error.empty()) {
    base::log_error("metadata \"" + key + "\" refused: not valid JSON (" + error + ")");
    return;
  }
  std::string text = parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  store_metadata(metadata_, metadata_bytes_, options_.metadata_limit_bytes, key, std::move(text));
}

void Profiler::write_metadata_locked(const Session& session) const {
  std::string text = "{";
  bool first = true;
  for (const auto& [key, value] : metadata_) {
    text += first ? "\n  " : ",\n  ";
    first = false;
    text += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += ": ";
    text += value;
  }
  text += first ? "}\n" : "\n}\n";
  std::string error = session.write_run_file("profiler_metadata.json", text);
  if (!error.empty()) base::log_error(error);
}

// ---------------------------------------------------------------------------
// Analysis

namespace {

AnalyseReport analyse_and_log(const std::vector<std::string>& runs, const AnalyseOptions& options) {
  AnalyseReport report;
  for (const std::string& run : runs) {
    AnalyseReport one = core::analyse_through_hook(run, options);
    if (!one.error.empty()) {
      report.runs.push_back(RunAnalysis{run, false, one.error, {}, 0, 0});
    }
    report.runs.insert(report.runs.end(), one.runs.begin(), one.runs.end());
  }
  for (const RunAnalysis& r : report.runs) {
    if (!r.ok) base::log_error("analysis of '" + r.run_dir + "' failed: " + r.error);
    for (const std::string& w : r.warnings) base::log_warning(r.run_dir + ": " + w);
    if (r.ok) {
      base::log_info("analysed " + r.run_dir + " (" + std::to_string(r.events) + " events) -> " + r.run_dir +
                     "/PROFILER_OUTPUT");
    }
  }
  return report;
}

}  // namespace

AnalyseReport Profiler::analyse(AnalyseMode mode, AnalyseOptions options) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  options.data_simplification = options.data_simplification || options_.data_simplification;
  // The profiler's export types, unless the caller asked for other ones.
  if (options.export_text && !options.export_db) {
    options.export_text = options_.export_text;
    options.export_db = options_.export_db;
  }
  std::vector<std::string> runs;
  runs.swap(deferred_runs_);  // oldest first
  runs.insert(runs.end(), unanalysed_runs_.begin(), unanalysed_runs_.end());
  unanalysed_runs_.clear();
  AnalyseReport report;
  if (runs.empty()) {
    report.error = "no closed run to analyse (runs are analysed after stop() or at the end of a cycle)";
    base::log_warning("analyse(): " + report.error);
    return report;
  }
  if (mode == AnalyseMode::Sync) return analyse_and_log(runs, options);
  // The training goes on beside an asynchronous analysis: it takes one core.
  if (options.threads <= 0) options.threads = 1;
  reap_analyses_locked(false);
  size_t limit = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                         : std::max<size_t>(1, std::thread::hardware_concurrency() / 2);
  if (analysis_children_.size() >= limit) {
    // Never more analyses at once than asked for: these runs wait for the
    // next analyse() (the next cycle's) or wait_for_analysis().
    base::log_info(std::to_string(analysis_children_.size()) + " analysis process(es) still running; " +
                   std::to_string(runs.size()) + " run(s) wait for the next one, the oldest " + runs.front());
    deferred_runs_ = std::move(runs);
    return report;
  }
  pid_t pid = fork();
  if (pid == 0) {
    // The child analyses and exits without running the parent's atexit
    // handlers or touching its profiler state.
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    AnalyseReport child = analyse_and_log(runs, options);
    _exit(child.ok() ? 0 : 1);
  }
  if (pid < 0) {
    base::log_error("cannot fork an analysis process; analysing synchronously");
    return analyse_and_log(runs, options);
  }
  analysis_children_.push_back(pid);
  return report;
}

// Reaps this profiler's analysis processes that have ended (all of them when
// `wait`), and only those: children the training program owns are left to it.
bool Profiler::reap_analyses_locked(bool wait) {
  bool ok = true;
  for (size_t i = 0; i < analysis_children_.size();) {
    int status = 0;
    pid_t pid = analysis_children_[i];
    pid_t got = waitpid(pid, &status, wait ? 0 : WNOHANG);
    if (got == 0) {
      ++i;
      continue;
    }
    if (got != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = false;
    if (got == pid && WIFSIGNALED(status)) {
      base::log_error("analysis process " + std::to_string(pid) + " was killed by signal " +
                      strsignal(WTERMSIG(status)));
    }
    analysis_children_.erase(analysis_children_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return ok;
}

bool Profiler::wait_for_analysis() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  bool ok = reap_analyses_locked(true);
  if (!deferred_runs_.empty()) {
    std::vector<std::string> runs;
    runs.swap(deferred_runs_);
    AnalyseOptions options;
    options.data_simplification = options_.data_simplification;
    options.export_text = options_.export_text;
    options.export_db = options_.export_db;
    ok = analyse_and_log(runs, options).ok() && ok;
  }
  return ok;
}

// ---------------------------------------------------------------------------
// trace_handler

std::function<void(Profiler&)> trace_handler(std::string dir, std::string worker_name, bool analyse,
                                             bool async) {
  // Resolved now, as the Profiler resolves its output_path.
  return core::TraceHandler{base::absolute_path(dir), std::move(worker_name), analyse, async};
}

void core::TraceHandler::operator()(Profiler& profiler) const {
  RunSummary run = profiler.last_run();
  if (run.run_dir.empty()) return;
  std::string counts = std::to_string(run.events_recorded) + " events recorded, " +
                       std::to_string(run.events_dropped) + " dropped";
  // A refused write is said here too: the cycle's count alone would read as complete.
  if (!run.io_error.empty()) counts += ", " + std::to_string(run.events_lost) + " lost: " + run.io_error;
  base::log_info("trace ready: " + run.run_dir + " (" + counts + ")");
  if (!analyse) return;
  AnalyseOptions options;
  options.link_trace_for_peers = true;  // TensorBoard and HTA find it in the handler's directory
  profiler.analyse(async ? AnalyseMode::Async : AnalyseMode::Sync, options);
}

}  // namespace trainprof
