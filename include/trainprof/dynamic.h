// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Dynamic profiling: collection of a running job started and stopped by editing
// a JSON file (MindSpore's DynamicProfilerMonitor).
//
//   trainprof::DynamicProfilerMonitor monitor("./dyn_cfg", "./dyn_data");
//   for (...) { train_one_step(); monitor.step(); }
//
// The monitor creates ./dyn_cfg/profiler_config.json when it is absent, with
// "start_step": -1 (nothing is collected). While the job trains, save it as
//   {"start_step": 40000, "stop_step": 40010, "analyse_mode": 0}
// and steps 40000 to 40010 are recorded into one run directory under
// ./dyn_data, named rank{R}_start{S}_stop{E}_{timestamp}_trainprof, then
// analysed. Steps count from 1: step k ends at the k-th step() call. All
// ranks of a job may share one file: each records the same steps into a run
// of its own.
//
// Fields (profiler_config.json; MindSpore's, then trainprof's):
//   start_step, stop_step  first and last step to record (1-based; -1: none)
//   analyse_mode           -1 no analysis, 0 analysed at the end of the last
//                          step (training waits), 1 in a child process
//   profiler_level         -1 (default level), 0, 1, 2: ProfilerLevel
//   with_stack, profile_communication, data_simplification (default true)
//   record_shapes, profile_memory, with_modules, with_flops, data_process
//   activities             ["CPU"], ["CPU", "GPU"], ...
//   host_sys               ["cpu", "mem", "disk", "network"]: host usage
//   mstx_domain_include, mstx_domain_exclude   lists of marker domains
//   aicore_metrics, profile_framework, parallel_strategy, mstx: accepted,
//   with no effect here (a set value is reported as ignored once).
//
// The file is looked at by a background thread every poll_interval seconds
// (its size, times and inode); step() only reads an atomic counter, a few
// nanoseconds when nothing changed. A changed file is read once it has
// stayed the same for one interval (an edit is seen within two), whole, and
// taken only if it did not change during the read: a file being written is
// never half applied. A new config takes effect at its start_step, or at the
// next step when that has passed (the same number of steps is then recorded,
// with a warning). A config saved while a collection runs waits for its end,
// except that "start_step": -1 ends it at the next step(). A file with bad
// JSON or a bad value is reported (naming the field) and the config before
// it stays.
#ifndef TRAINPROF_DYNAMIC_H_
#define TRAINPROF_DYNAMIC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainprof/options.h"
#include "trainprof/profiler.h"

namespace trainprof {

namespace core {
class DynamicConfigWatcher;
}

inline constexpr const char* kDynamicConfigFileName = "profiler_config.json";

// One version of profiler_config.json.
struct DynamicConfig {
  int64_t start_step = -1;  // -1: collect nothing
  int64_t stop_step = -1;
  int analyse_mode = -1;  // -1 none, 0 sync, 1 async
  // What to record; output_path and on_trace_ready are the monitor's.
  ProfilerOptions options;
  // MindSpore's fields given a value that has no effect here
  // (aicore_metrics, ...): reported once, never an error.
  std::vector<std::string> ignored;
  // Fields this parser does not know (a typo, another tool's field), each
  // with the known ones it is close to: "start_stpe (did you mean
  // start_step?)". Reported with the list of fields, never an error.
  std::vector<std::string> unknown;
};

// The fields profiler_config.json may hold, MindSpore's first.
const std::vector<std::string>& dynamic_config_fields();

// Parses the text of profiler_config.json. Throws std::invalid_argument
// naming the field (a wrong type, a value out of range, stop_step before
// start_step) or saying why the text is not a JSON object.
DynamicConfig parse_dynamic_config(std::string_view json);

// The text written when the file is absent: every field, nothing collected.
std::string default_dynamic_config();

// A collection the config asked for, as a monitor runs it.
struct DynamicCollection {
  int64_t start_step = 0;  // the steps recorded: [start_step, stop_step]
  int64_t stop_step = 0;
  int analyse_mode = -1;
  // Complete: output_path, and on_trace_ready = trace_handler(output_path,
  // "rank{R}_start{S}_stop{E}", analyse_mode >= 0, analyse_mode == 1).
  ProfilerOptions options;
};

// The monitor's decisions without a profiler of its own, for a front end
// that drives its own (the Python package): after each training step,
// step() says whether the collection that included this step ends now and
// whether one starts with the next step.
class DynamicSchedule {
 public:
  struct Action {
    bool stop = false;   // stop the profiler now: its last step was this one
    bool start = false;  // start one for collection(), from the next step
  };

  // Creates cfg_path (0700) and the default file when absent, reads the
  // file once (a config with start_step 1 starts collecting() at once: the
  // first step is recorded) and starts the thread that watches it. Throws
  // std::invalid_argument for an empty path, a path that cannot be made a
  // directory (or is a symlink), or a poll_interval_s outside (0, 3600].
  DynamicSchedule(std::string cfg_path, std::string output_path = "./data", double poll_interval_s = 2.0);
  ~DynamicSchedule();  // stops the watcher thread (at once)
  DynamicSchedule(const DynamicSchedule&) = delete;
  DynamicSchedule& operator=(const DynamicSchedule&) = delete;

  // Call once at the end of every training step.
  Action step();

  // Steps completed (step() calls so far).
  int64_t step_num() const { return step_num_; }
  // Whether the next step is recorded: collection() is then set.
  bool collecting() const { return active_.has_value(); }
  // The collection being recorded (empty when none is).
  const std::optional<DynamicCollection>& collection() const { return active_; }
  // Versions of the file read and accepted so far (1 after the first read
  // of a valid file): a test or a tool waits on it to know that an edit
  // was seen. Thread-safe.
  uint64_t configs_read() const;

 private:
  void take_new_config();
  bool start_planned();

  std::string output_path_;
  int rank_ = 0;
  std::unique_ptr<core::DynamicConfigWatcher> watcher_;
  uint64_t seen_version_ = 0;
  int64_t step_num_ = 0;
  bool stop_requested_ = false;
  std::optional<DynamicConfig> planned_;  // accepted, its first step not reached
  std::optional<DynamicCollection> active_;
};

// DynamicSchedule with a Profiler: records what profiler_config.json asks.
class DynamicProfilerMonitor {
 public:
  // As DynamicSchedule's constructor (throws the same).
  DynamicProfilerMonitor(std::string cfg_path, std::string output_path = "./data",
                         double poll_interval_s = 2.0);
  // Stops a collection in progress: its run is closed (and analysed as its
  // analyse_mode says) with the steps recorded so far.
  ~DynamicProfilerMonitor();
  DynamicProfilerMonitor(const DynamicProfilerMonitor&) = delete;
  DynamicProfilerMonitor& operator=(const DynamicProfilerMonitor&) = delete;

  // Call once at the end of every training step. Never throws.
  void step() noexcept;

  int64_t step_num() const { return schedule_.step_num(); }
  bool collecting() const { return profiler_ != nullptr; }
  uint64_t configs_read() const { return schedule_.configs_read(); }
  // The run directories closed so far, oldest first.
  const std::vector<std::string>& runs() const { return runs_; }

 private:
  // `at_step_boundary`: called from step(), where one step ends and the
  // next begins (else from the constructor or the destructor).
  void start_collection(bool at_step_boundary) noexcept;
  void stop_collection(bool at_step_boundary) noexcept;

  DynamicSchedule schedule_;
  std::unique_ptr<Profiler> profiler_;
  std::vector<std::string> runs_;
};

}  // namespace trainprof

#endif  // TRAINPROF_DYNAMIC_H_
