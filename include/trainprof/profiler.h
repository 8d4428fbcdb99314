// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Profiler: start / stop / step, schedules, metadata.
//
//   trainprof::ProfilerOptions opts;
//   opts.schedule = trainprof::Schedule{.wait = 1, .warmup = 1, .active = 2, .repeat = 2};
//   opts.on_trace_ready = trainprof::trace_handler("./prof");
//   trainprof::Profiler prof(opts);           // starts: start_profile defaults to true
//   for (...) { train_one_step(); prof.step(); }
//   prof.stop();
//
// One profiler records at a time per process. Misuse (start twice, stop or
// step while stopped, a second profiler starting while one records) is logged
// on stderr and ignored: no method but the constructor throws.
#ifndef TRAINPROF_PROFILER_H_
#define TRAINPROF_PROFILER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <vector>

#include "trainprof/analyse.h"
#include "trainprof/options.h"
#include "trainprof/schedule.h"
#include "trainprof/version.h"

namespace trainprof {

class Session;  // one open run directory (internal)

// Profiler::analyse: block until done, or analyse in a child process while
// training goes on.
enum class AnalyseMode { Sync, Async };

// What the last closed run directory holds.
struct RunSummary {
  std::string run_dir;           // empty before the first run is closed
  uint64_t events_recorded = 0;  // events recorded; those not lost are in raw/
  uint64_t events_dropped = 0;   // events not recorded: buffer_mb was full
  uint64_t events_lost = 0;      // recorded, then refused by the disk (io_error)
  std::string io_error;          // the write that failed, and why ("" when none)
  bool ok = false;               // false if the run failed (I/O error, ...)
};

class Profiler {
 public:
  // Throws std::invalid_argument for invalid options (naming the field).
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops a running profiler
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Recording starts; what runs until the first step() is the start-up
  // phase (imports, set-up, the first batch), which the analysis keeps out
  // of the step statistics.
  void start();
  // Recording stops; what ran since the last step() is the tail, kept out
  // of the step statistics too.
  void stop();
  // Marks the end of one training step; drives the schedule.
  void step();
  // start() and stop() where one step ends and the next begins: for a
  // controller that acts in its own step() (DynamicProfilerMonitor). The
  // first and last steps recorded are then steps, not start-up and tail.
  void start_at_step_boundary();
  void stop_at_step_boundary();

  // Number of step() calls since construction (0-based current step).
  int64_t step_num() const;
  // Numbers the current step `step`, the next ones after it (torch.profiler's
  // profile.step_num is settable too): a DynamicProfilerMonitor that records
  // steps 40000 to 40010 of a job names them so. A schedule acts on the new
  // numbers from the next step() on.
  void set_step_num(int64_t step);
  // The schedule's action for the current step (None while stopped;
  // Record while started without a schedule).
  ProfilerAction current_action() const;
  bool started() const;

  // Metadata written to profiler_metadata.json of every run closed afterwards.
  // A duplicate key overrides (with a warning); values beyond
  // options.metadata_limit_bytes in total are refused with an error.
  void add_metadata(const std::string& key, const std::string& value);
  // `json` must be valid JSON; it is stored as a JSON value, not a string.
  void add_metadata_json(const std::string& key, const std::string& json);

  // Analyses every run this profiler closed and has not analysed yet (a run
  // being recorded is not touched). Sync returns the report; Async forks a
  // child process that analyses and logs failures, and returns an empty report
  // at once; at most options.max_workers (0: cores / 2, at least 1) such
  // processes run at once, and runs closed meanwhile wait for the next
  // analyse(). options.data_simplification defaults to the profiler's option,
  // and the export types too when options asks for the default (text only).
  AnalyseReport analyse(AnalyseMode mode = AnalyseMode::Sync, AnalyseOptions options = {});
  // Waits for the Async analyses started so far, then analyses (here) the
  // runs that waited because max_workers analyses were already running;
  // true when all succeeded. Finished analyses are reaped at every step(),
  // so none is left a zombie between cycles.
  bool wait_for_analysis();

  // The run directory being recorded (empty when none).
  std::string current_run_dir() const;
  // The last closed run.
  RunSummary last_run() const;
  const ProfilerOptions& options() const { return options_; }

 private:
  void open_run_locked();
  void close_run_locked(bool call_trace_ready);
  void record_step_range_locked(bool at_stop);
  void start_locked(bool at_step_boundary);
  void stop_locked(bool at_step_boundary);
  bool reap_analyses_locked(bool wait);
  void write_metadata_locked(const Session& session) const;

  ProfilerOptions options_;
  std::string worker_name_;  // run directory prefix; default {host}_{pid}
  bool default_worker_name_ = false;
  int owner_pid_ = 0;                     // a fork() child names its runs with its own pid
  bool open_failed_in_cycle_ = false;     // a run that could not open is retried next cycle, not next step
  bool step_while_stopped_said_ = false;  // step() while stopped is said once until the next start()
  mutable std::recursive_mutex mu_;
  bool started_ = false;
  int64_t step_num_ = 0;
  ProfilerAction action_ = ProfilerAction::None;
  uint64_t step_start_ticks_ = 0;
  // The open step began at start(), not at a step() boundary: it is the
  // start-up phase, which the analysis keeps out of the step statistics.
  bool step_began_at_start_ = false;
  std::shared_ptr<Session> session_;
  RunSummary last_run_;
  std::map<std::string, std::string> metadata_;  // key -> JSON text
  uint64_t metadata_bytes_ = 0;
  std::vector<std::string> unanalysed_runs_;
  std::vector<int> analysis_children_;      // pids of Async analyses
  std::vector<std::string> deferred_runs_;  // waiting for an analysis process
};

// A ready-made on_trace_ready callback: runs are written under `dir`, named
// {worker_name}_{timestamp}_trainprof (default worker name {host}_{pid}).
// worker_name must be one file name: with '/', '..' or NUL (or over 200
// characters) the Profiler constructor throws std::invalid_argument.
// With analyse = true each closed run is analysed right away (async: in a
// child process, so that training goes on).
std::function<void(Profiler&)> trace_handler(std::string dir, std::string worker_name = {},
                                             bool analyse = true, bool async = false);

}  // namespace trainprof

#endif  // TRAINPROF_PROFILER_H_
