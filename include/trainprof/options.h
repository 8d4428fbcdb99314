// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// ProfilerOptions: everything a Profiler is told.
//
// Field names follow the MindSpore / torch.profiler options so that users of
// those tools find what they expect; the same names are the keys of the
// TRAINPROF_OPTIONS environment variable (see env.h).
#ifndef TRAINPROF_OPTIONS_H_
#define TRAINPROF_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainprof/schedule.h"

namespace trainprof {

class Profiler;

enum class Activity { CPU, GPU };

// How much the framework collectors record (see docs/ARCHITECTURE.md).
enum class ProfilerLevel { None, Level0, Level1, Level2 };

// Host system usage a sampler thread reads from /proc (torch_npu's
// host_sys): "cpu" per core, of the host and of the process; "mem" the
// host's memory in use and the process' RSS; "disk" and "network" bytes
// per second.
enum class HostSystem { Cpu, Mem, Disk, Network };

struct ProfilerOptions {
  // Parent of the run directories ({host}_{pid}_{timestamp}_trainprof). A
  // relative path is resolved when the Profiler is made: a later chdir()
  // of the program changes nothing.
  std::string output_path = "./data";
  // Start recording in the constructor (no need to call start()).
  bool start_profile = true;
  std::set<Activity> activities = {Activity::CPU};
  std::optional<Schedule> schedule;
  // Called after each recorded cycle is closed (schedule) or at stop().
  std::function<void(Profiler&)> on_trace_ready;

  bool profile_memory = false;
  bool record_shapes = false;
  bool with_stack = false;
  // The front end's module hierarchy per operator (the Python package:
  // nn.Module); a C++ program has none, so this records nothing there.
  bool with_modules = false;
  bool with_flops = false;
  bool data_process = false;
  bool profile_communication = false;
  ProfilerLevel profiler_level = ProfilerLevel::Level0;
  // MindSpore's sync_enable (GPU): each outermost framework operator ends
  // only when the GPU has finished the work queued so far
  // (cuCtxSynchronize), so its host duration includes its device time. It
  // serializes host and GPU: off by default here, since Activity::GPU times
  // every kernel without it. Needs the CUDA driver already in the process
  // (a CUDA framework loads it); without one it is said once and ignored.
  bool sync_enable = false;

  // Marker domains: when `include` is non-empty only those domains record;
  // otherwise every domain but those in `exclude` records.
  std::vector<std::string> mstx_domain_include;
  std::vector<std::string> mstx_domain_exclude;

  // Host system usage sampled every host_sys_interval_ms while recording:
  // counters in the timeline, host_{cpu,mem,disk,network}_usage.csv, and a
  // summary line naming the steps the host was saturated in. Empty: off.
  std::set<HostSystem> host_sys;
  uint32_t host_sys_interval_ms = 50;  // [1, 60000]
  // About one framework operator call in sample_operators is recorded
  // (LibTorch's RecordFunction sampling, probability 1/N, a call's start
  // and end together); 1: every call. For always-on recording where
  // operators are too many to record each: the analysis scales the
  // operators' counts and times by N, and the outputs say they are
  // sampled. Ranges, steps, memory, kernels and MPI are not sampled;
  // torch.distributed's calls reach LibTorch's callbacks as operators and
  // are. 0 (the default): a Profiler records every call; a FlightRecorder
  // records 1 in 100 (kFlightRecorderOperatorSampling) unless it records
  // torch.distributed's calls (profile_communication, Level1 and above) or
  // memory (profile_memory: allocations are placed by operator), where it
  // records every one.
  uint32_t sample_operators = 0;  // [0, 1000000]
  // The Python package reads every Python thread's stack this often while
  // recording host activity, so that the analysis names the functions that
  // spent a step's host time outside operators and ranges; 0: off. A
  // program without the Python package records no samples.
  uint32_t python_stack_sampling_ms = 10;  // [0, 1000]

  // Remove raw data after a successful analysis.
  bool data_simplification = false;
  // What the analysis writes (MindSpore's export_type; AnalyseOptions): the
  // timeline JSON and CSV tables, PROFILER_OUTPUT/trainprof.db, or both.
  // At least one.
  bool export_text = true;
  bool export_db = false;

  // Memory bound for event buffers, in MiB (at least 1). When it is exhausted
  // events are dropped and counted, never blocking the recording thread.
  uint32_t buffer_mb = 64;
  // Raw data reaches the disk at least this often; a SIGKILL loses at most this much.
  uint32_t flush_interval_ms = 500;
  // Cap on the total size of add_metadata() values (bytes).
  uint64_t metadata_limit_bytes = 100ull << 20;

  // Throws std::invalid_argument naming the offending field.
  void validate() const;
};

std::string_view to_string(Activity activity);
std::string_view to_string(ProfilerLevel level);
std::string_view to_string(HostSystem part);  // "cpu", "mem", "disk", "network"
// The HostSystem of a name to_string gives; false for any other name.
bool parse_host_system(std::string_view name, HostSystem* part);

// Every option, as TRAINPROF_OPTIONS, profiler_info.json and `trainprof
// options` name it, from the one table the JSON parser and writer are made
// from. Documentation and the Python API are checked against it.
struct OptionInfo {
  std::string name;
  std::string type;          // bool, uint, string, strings, choice, choices, schedule
  std::string default_json;  // the default value, as JSON
  std::string range;         // uint: "[min, max]"; choice(s): the values, "|"-separated
  std::string fields;        // the ProfilerOptions member(s) it sets
  bool dynamic = false;      // profiler_config.json (DynamicProfilerMonitor) sets it too
  std::string python;        // where the Python API sets it ("": TRAINPROF_OPTIONS only)
  std::string doc;           // one line
};
std::vector<OptionInfo> option_list();

}  // namespace trainprof

#endif  // TRAINPROF_OPTIONS_H_
