// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The advisor: fixed rules over what one run's analysis measured, each naming a
// problem, its evidence, what fixing it is worth and the change to make.
// docs/ADVICE.md gives every rule's threshold and why.
//
// The rules read plain facts (AdviceFacts), gathered by the pipeline from
// the analysis it already made, so they cost nothing per event and can be
// tested with facts written by hand as well as with planted workloads.
#ifndef TRAINPROF_ANALYSIS_ADVISOR_H_
#define TRAINPROF_ANALYSIS_ADVISOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/cluster.h"

namespace trainprof::analysis {

// One finding, as profiler_info.json's "advice" holds it.
struct Finding {
  std::string rule;      // stable id: "data_wait", "gc_pauses", ... (docs/ADVICE.md)
  std::string title;     // the problem in a few words
  std::string evidence;  // the steps, names and numbers it rests on
  std::string change;    // what to change
  double step_ms = 0;    // the median step it is measured against
  // What the change would save per median step, ms, and how that was
  // found: "re-timed: ..." (a what-if estimate, analysis/what_if.h) or
  // "at most: ..." (the time the problem takes, when removing it cannot be
  // re-timed). Negative: not estimated.
  double saving_ms = -1;
  std::string saving_basis;
  int rank = -1;  // the rank it is about (cluster findings), -1: this run
  // What the problem comes from, where a rule tells causes apart (the
  // straggler's: "compute", "data loading", "communication", "host work
  // outside operators", "unknown"); "" for the others.
  std::string cause;
};

// A name's calls over the counted steps (operators and ranges: host; GPU
// activities by name: kernels, copies, sets, runtime calls).
struct NameFacts {
  std::string name;
  bool is_op = false;        // a framework operator
  uint64_t calls = 0;        // over the whole run
  uint64_t total_ns = 0;     // duration, summed
  uint64_t self_ns = 0;      // less the direct children's
  uint64_t child_calls = 0;  // direct children on the same thread, summed
  // Of calls and self_ns: those inside an optimizer's step (at any depth).
  uint64_t optimizer_calls = 0;
  uint64_t optimizer_self_ns = 0;
};

// A function of the program's that spent host time outside operators and
// ranges (the stack samples, analysis/python_samples.h), over the counted steps.
struct OutsideFacts {
  std::string name;  // "load_features (train.py:14)"
  double ms = 0;
  bool input = false;  // pulling the loop's next input (a generator, an iterator's __next__)
};

// What the rules read. Times are over the whole run unless per step.
struct AdviceFacts {
  // The steps the rules count (the one open at stop(), under half the
  // median, is not among them).
  int64_t steps = 0;
  double median_step_ms = 0;
  double total_step_ms = 0;
  double data_wait_ms = 0;         // step_trace_time.csv's Data Wait, summed
  double exposed_comm_ms = 0;      // Communication(Not Overlapped), summed
  double device_idle_ms = 0;       // Free (device time only), summed
  double preparing_ms = 0;         // Preparing (device time only), summed
  bool device_time = false;        // the run recorded GPU activity
  int64_t data_wait_steps = 0;     // steps that waited at least 1 % of themselves
  std::string slowest_data_stage;  // "worker fetch (fetch): 30.1 ms per step" or ""
  // What-if medians (re-timed), < 0 when not estimated.
  double hide_data_wait_step_ms = -1;
  double overlap_comm_step_ms = -1;
  std::vector<NameFacts> host;  // operators and ranges by name
  std::vector<NameFacts> gpu;   // GPU activities by name (runtime calls, syncs too)
  // The host sampler (host_sys): steps with CPU at 90 % or more.
  std::vector<int64_t> cpu_saturated_steps;
  double cpu_saturated_mean_percent = 0;
  // Memory: the largest peak over the steps and what it may reach, bytes
  // (0: unknown). Host: profile_memory's CPU peak or the process' peak
  // resident set against the cgroup limit or the machine's memory; device:
  // the allocator's peak against the GPU's memory.
  uint64_t host_peak_bytes = 0;
  std::string host_peak_source;  // "resident set" or "allocated (profile_memory)"
  uint64_t host_limit_bytes = 0;
  std::string host_limit_source;  // "cgroup memory limit" or "machine memory"
  uint64_t device_peak_bytes = 0;
  uint64_t device_limit_bytes = 0;
  // Python outside operators: the functions, the most time first; all
  // samples' time; the critical path's untracked host time (-1: no path).
  std::vector<OutsideFacts> outside;
  double outside_sampled_ms = 0;
  double host_untracked_path_ms = -1;
  uint32_t sampling_ms = 0;  // the sampler's interval (0: not sampled)
};

// A range of Python's garbage collections ("gc.collect (generation N)",
// recorded by the Python front through gc.callbacks).
bool is_gc_range(const std::string& name);

// Every rule that fires, the largest saving first (findings whose saving
// is not estimated last, in the rules' order).
std::vector<Finding> advise(const AdviceFacts& facts);

// The findings of a job's ranks together (`trainprof cluster`): the
// straggler the others wait for, and links slower than their like.
// `median_step_ms` and `estimated_step_ms`: the job's median step as
// recorded and re-timed with the straggler at the others' median
// (analysis/cluster_path.h); estimated < 0: not re-timed.
std::vector<Finding> advise_cluster(const StragglerReport& report, const std::vector<LinkBandwidth>& links,
                                    double median_step_ms = 0, double estimated_step_ms = -1);

// Thresholds (docs/ADVICE.md says why each is where it is).
inline constexpr double kDataWaitShare = 0.10;         // of the step time
inline constexpr double kDeviceIdleShare = 0.25;       // of the step time, data waits aside
inline constexpr double kSyncShare = 0.05;             // time blocked in syncs, of the step time
inline constexpr double kOptimizerOpsPerStep = 40;     // per-parameter operators per optimizer step
inline constexpr double kMultiTensorSaving = 1.0 / 3;  // of a per-parameter step of small tensors
inline constexpr double kOptimizerSavingShare = 0.05;  // its estimated saving, of the median step
inline constexpr double kTinyOpsPerStep = 1000;        // short operators per step
inline constexpr double kTinyOpUs = 20;                // "short": under this on average
inline constexpr double kTinyOpsShare = 0.20;          // their time, of the step time
inline constexpr double kExposedCommShare = 0.10;      // of the step time
inline constexpr double kMemoryLimitShare = 0.90;      // of the limit
inline constexpr double kGcShare = 0.05;               // of the step time
inline constexpr uint64_t kGcMinCollections = 3;       // over the counted steps
inline constexpr double kOutsideShare = 0.10;       // one function's time outside operators, of the step time
inline constexpr double kCpuSaturatedSteps = 0.25;  // of the steps
inline constexpr double kStragglerAdviceShare = 2.0 / 3;  // of the others' waiting, lost to it
inline constexpr double kStragglerSavingShare = 0.05;     // re-timed saving, of the job's median step
inline constexpr double kStragglerLateShare = 0.5;        // of its collectives, it arrived last at

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_ADVISOR_H_
