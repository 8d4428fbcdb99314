// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Analysis passes over a TraceModel. Each pass reads the model (step selection
// narrows it) and returns plain rows that the exporters write; see
// docs/OUTPUTS.md for the meaning of every column.
#ifndef TRAINPROF_ANALYSIS_PASSES_H_
#define TRAINPROF_ANALYSIS_PASSES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// Keeps only the steps in `step_list` (consecutive, all recorded) and the
// events that start inside their window: the model's events now, its slices
// as they are loaded (TraceModel::selection). Returns "" or an error that
// lists the recorded steps. An empty list keeps everything.
std::string select_steps(TraceModel& model, const std::vector<int64_t>& step_list);

// Self time, per key: the sum over its slices of the duration minus the time
// covered by direct children on the same thread. Fed window by window
// (analysis/run_loader.h): each thread's stack of open slices goes on from
// one window to the next.
class SelfTimeAccumulator {
 public:
  explicit SelfTimeAccumulator(const TraceModel& model);
  // The window's own slices (each thread's from first_own, timeline order).
  void add_window(const TraceModel& model);
  // Fills TraceModel::self_by_key and child_calls_by_key, and in_steps and
  // in_start_up; warns about ranges that do not nest.
  void finish(TraceModel& model);

 private:
  enum Phase : uint8_t { kOutside, kInStep, kInStartUp };
  struct Open {
    uint64_t end_ns;
    uint64_t self_ns;  // duration minus the children seen so far
    uint32_t key;
    Phase phase;        // where it starts
    bool in_optimizer;  // nested in an optimizer's step
    bool optimizer;     // an optimizer's step ("Optimizer.step#...")
  };
  void close(std::vector<Open>& stack);
  Phase phase_of(size_t thread, uint64_t start_ns);
  bool is_optimizer_step(const TraceModel& model, uint32_t key);
  KeyTotals* totals_of(Phase p) {
    return p == kInStep ? &in_steps_ : p == kInStartUp ? &in_start_up_ : nullptr;
  }

  std::vector<uint64_t> self_by_key_;
  std::vector<uint64_t> child_calls_by_key_;
  KeyTotals in_steps_;
  KeyTotals in_start_up_;
  std::vector<StepWindow> steps_;  // counted, by start
  StepWindow start_up_;
  std::vector<size_t> next_step_;          // per thread: steps before it end before its last slice
  std::vector<uint8_t> optimizer_key_;     // per key: 0 not known yet, 1 no, 2 an optimizer's step
  std::vector<std::vector<Open>> stacks_;  // per thread
  uint64_t crossings_ = 0;
  std::string example_;
};

// The whole model as one window.
void compute_self_times(TraceModel& model);

// What both statistics tables are made of: per slice key (steps included),
// indexed by key. Needs compute_self_times.
struct SliceTotals {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  uint64_t self_ns = 0;
  uint64_t flops = 0;  // count x the key's FLOPs (with_flops)
  // GPU time of what its slices launched: themselves, and with the ranges
  // inside them (analysis/gpu_launches.h).
  uint64_t device_self_ns = 0;
  uint64_t device_total_ns = 0;
};
std::vector<SliceTotals> totals_by_key(const TraceModel& model);
// The same window by window: add_totals for each window's own slices, then
// finish_totals (self time, FLOPs, device time) once self_by_key and
// device_*_by_key are known.
void add_totals(const TraceModel& model, std::vector<SliceTotals>* by_key);
void finish_totals(const TraceModel& model, std::vector<SliceTotals>* by_key);
// Adds `t` to `into` (counts and times summed, min and max kept): one row of
// a table made of several keys (every thread's calls of a name, ...).
void merge_into(SliceTotals& into, const SliceTotals& t);

// The fields of an operator's inputs string (SliceKey::inputs):
// "[[64,1,28,28],[32]]", "[\"float\",\"float\"]", with with_flops the
// operator's FLOPs (0 when absent), with with_stack its frames (native
// "module+0xoffset" or the front end's "file(line): function"), with
// with_modules its module hierarchy. Dims and types are "" when only a stack
// or a module was recorded.
std::string_view input_dims(const TraceModel& model, uint32_t inputs);
std::string_view input_types(const TraceModel& model, uint32_t inputs);
uint64_t input_flops(const TraceModel& model, uint32_t inputs);
// The raw native frames (with_stack), "" when none.
std::string_view input_stack(const TraceModel& model, uint32_t inputs);
// The module hierarchy (with_modules), "" when none.
std::string_view input_module(const TraceModel& model, uint32_t inputs);

// Fills TraceModel::call_stacks: each distinct raw stack symbolized once
// (analysis/symbolizer.h).
void symbolize_call_stacks(TraceModel& model);

// op_statistic.csv: one row per range name (user ranges and operators,
// core type HOST) and per name of what ran on a GPU (kernels, copies and
// sets, core type GPU).
struct OpStatisticRow {
  std::string name;
  const char* core_type = "HOST";
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  uint64_t self_ns = 0;
  double ratio_percent = 0;  // total / sum of the totals of its core type
  uint64_t flops = 0;
};
// Host rows, then GPU rows, each sorted by total time, largest first (ties
// by name). With --steps, GPU activities that start in the chosen steps.
std::vector<OpStatisticRow> op_statistics(const TraceModel& model, const std::vector<SliceTotals>& by_key);

// operator_details.csv: one row per (name, input shapes).
struct OperatorDetailRow {
  std::string name;
  std::string input_shapes;
  std::string call_stack;
  uint64_t calls = 0;
  uint64_t host_self_ns = 0;
  uint64_t host_total_ns = 0;
  uint64_t flops = 0;
  std::string module_hierarchy;
  uint64_t device_self_ns = 0;
  uint64_t device_total_ns = 0;
};
// Sorted by self time, largest first (ties by name).
std::vector<OperatorDetailRow> operator_details(const TraceModel& model,
                                                const std::vector<SliceTotals>& by_key);

// fwdbwd flows (Kineto's): each autograd node (backward op)
// linked to the forward operator that created it. Both carry the sequence
// number; the node carries the LibTorch thread id of its forward op, and a
// forward op its own, so (thread id, sequence number) matches them. When
// several forward ops share both, the earliest (the outermost) is the source.
struct ForwardBackwardLink {
  uint64_t forward_start_ns;
  uint32_t forward_tid;
  uint64_t backward_start_ns;
  uint32_t backward_tid;
};
// In backward start order.
std::vector<ForwardBackwardLink> forward_backward_links(const TraceModel& model);

// dataset.csv: one row per (operation, stage) of the data pipeline.
struct DatasetRow {
  std::string operation;
  std::string stage;
  uint64_t occurrences = 0;
  uint64_t total_ns = 0;
  std::string custom_info;  // of the row's latest stage that had one
};
// In pipeline order of the stages (dataset, transform, collate, wait, then
// others by name), then by total time, largest first.
std::vector<DatasetRow> dataset_statistics(const TraceModel& model);

// step_trace_time.csv: one row per step (docs/OUTPUTS.md).
struct StepTraceRow {
  int64_t step = 0;
  uint64_t computing_ns = 0;
  uint64_t communication_not_overlapped_ns = 0;
  uint64_t overlapped_ns = 0;
  uint64_t communication_ns = 0;
  uint64_t free_ns = 0;
  uint64_t stage_ns = 0;
  uint64_t bubble_ns = 0;
  uint64_t communication_not_overlapped_exclude_receive_ns = 0;
  uint64_t preparing_ns = 0;
  // The loop's waits for data (data stages "wait", torch's DataLoader
  // fetches) that nothing else covers: on the host, outside communication
  // (out of Computing); with the device's time, the device idle while the
  // host waited (out of Free). "Data Wait", after the columns above.
  uint64_t data_wait_ns = 0;
  uint64_t step_ns = 0;  // window length (not a column; used by the summary)
};
// The rows of every step, fed window by window (analysis/run_loader.h): a
// step that spans windows is the sum of its parts clipped to each, since
// the union of intervals is additive over disjoint spans of time; a window's
// carried slices cover what started before it.
// How many of the steps (their lengths, in step order) are whole: all but
// the last when it is under half the others' median, since the step open
// when recording stopped (from the last step() to stop()) is a sliver of
// one. The diff and the advisor count these.
size_t whole_steps(const std::vector<double>& lengths);

class StepTraceAccumulator {
 public:
  explicit StepTraceAccumulator(const TraceModel& model);  // its steps
  // The parts of the steps open in the window [start_ns, end_ns).
  void add_window(const TraceModel& model, uint64_t start_ns, uint64_t end_ns);
  // When the run recorded GPU activity, the device's time replaces the
  // host's: Computing is the union of kernels, copies and sets (NCCL
  // kernels aside) clipped to the step, Communication that of NCCL kernels
  // and communication calls, Overlapped their intersection, Preparing the
  // gap to the step's first device activity, Data Wait what the device was
  // idle in while the host waited for data, Free the rest of its idle time.
  // Call once, after the last window. Without device activity, a run of
  // sampled operators (operator_sampling > 1) cannot tell the host's idle
  // time from operators not recorded: its Computing is the step less its
  // communication and data waits, its Free and Preparing 0.
  void use_device_time(const TraceModel& model);
  // In step number order.
  std::vector<StepTraceRow> finish() const;

 private:
  struct Parts {
    StepTraceRow row;                     // computing and communication summed, preparing once known
    bool active = false;                  // some computing seen: preparing is known
    uint64_t comm_first_ns = UINT64_MAX;  // the step's communication span (Stage)
    uint64_t comm_last_ns = 0;
    std::vector<std::pair<uint64_t, uint64_t>> waiting;  // the loop's waits for data, in start order
  };
  std::vector<StepWindow> steps_;  // by start
  std::vector<Parts> parts_ = std::vector<Parts>(steps_.size());
  size_t next_ = 0;            // steps [0, next_) start before the last window's end
  size_t first_open_ = 0;      // steps before it have ended
  bool host_sampled_ = false;  // host time only, operators sampled
};

// The whole model as one window.
std::vector<StepTraceRow> step_trace(const TraceModel& model);

// torch's DataLoader wraps each fetch of a batch in a range of this name:
// the loop waiting for data.
bool is_data_loader_fetch(std::string_view name);

// Length of the union of [start, end) intervals added in start order, kept
// as it goes (no list of intervals: a step can hold millions).
class UnionLength {
 public:
  void add(uint64_t start, uint64_t end);
  uint64_t total() const { return open_ ? total_ + (end_ - start_) : total_; }

 private:
  uint64_t total_ = 0;
  uint64_t start_ = 0;
  uint64_t end_ = 0;
  bool open_ = false;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_PASSES_H_
