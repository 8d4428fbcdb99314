// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// One run's operators and ranges averaged by key: torch.profiler's
// key_averages(), computed by the analysis.
//
//   trainprof::KeyAverages k = trainprof::key_averages(run_dir);
//   for (const trainprof::KeyAverage& row : k.rows)
//     std::cout << row.name << " " << row.count << " " << row.self_ns << "\n";
//
// Reads the run's raw data (not its analysed outputs): only the passes the
// averages need run, and nothing is written.
#ifndef TRAINPROF_KEY_AVERAGES_H_
#define TRAINPROF_KEY_AVERAGES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainprof {

struct KeyAveragesOptions {
  // One row per (name, input shapes) instead of per name (record_shapes).
  bool group_by_input_shape = false;
  // One row per (name, its N innermost call-stack frames) (with_stack); 0: not.
  int group_by_stack_n = 0;
  // false: the ProfilerStep#N ranges are left out, as if never recorded
  // (torch.profiler has none when step() was never called; a session
  // records one), and memory reported in them outside other calls is the
  // "[memory]" row's.
  bool include_steps = true;
};

// One key: every call of a name (and of its shapes or stack when grouped by
// them). As torch.profiler's: every step is the one key "ProfilerStep*", and
// a call that is the only child of a call of the same name is part of it.
struct KeyAverage {
  std::string name;
  std::string input_shapes;  // "[[64,1,28,28],[32]]" when grouped by them, else ""
  // The N innermost frames, innermost first, ';'-separated, when grouped by stack.
  std::string stack;
  bool is_operator = false;  // a framework operator (torch's aten:: and autograd nodes), not a user range
  uint64_t count = 0;
  uint64_t total_ns = 0;         // wall time of the calls, children included
  uint64_t self_ns = 0;          // the same without the time of the ranges nested in them
  uint64_t device_total_ns = 0;  // GPU time of what they launched, nested ranges' launches included
  uint64_t device_self_ns = 0;   // GPU time of what they launched themselves
  uint64_t flops = 0;            // with_flops: summed over the calls
  // profile_memory: bytes allocated less bytes freed during the calls (CPU,
  // and every other device), and the same without the ranges nested in them.
  int64_t cpu_memory = 0;
  int64_t self_cpu_memory = 0;
  int64_t device_memory = 0;
  int64_t self_device_memory = 0;
  // The earliest call's start, and what it ran in: "" at the top level
  // (torch's cpu_parent of a key, and its top_level_events_only).
  uint64_t first_start_ns = 0;
  std::string first_parent;
};

struct KeyAverages {
  std::string error;  // empty when the run was read
  // By self time, largest first (ties by name). Memory reported while no
  // range was open on its thread is the row "[memory]" (count: reports).
  std::vector<KeyAverage> rows;
  std::vector<std::string> warnings;  // what reading the run said (damaged chunks, ...)
};

// The key averages of the run directory `run_dir` ({...}_trainprof).
KeyAverages key_averages(const std::string& run_dir, const KeyAveragesOptions& options = {});

}  // namespace trainprof

#endif  // TRAINPROF_KEY_AVERAGES_H_
