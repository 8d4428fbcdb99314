// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The analysis model: one run's events, columnar enough to sort and scan, with
// names interned once.
#ifndef TRAINPROF_ANALYSIS_TRACE_MODEL_H_
#define TRAINPROF_ANALYSIS_TRACE_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "raw/format.h"

namespace trainprof::analysis {

// What a slice is: its thread, its name, whether it is a ProfilerStep#N or a
// framework operator, the operator's input shapes. Slices share these (a run
// has few distinct combinations), so a slice holds only the index of its key.
struct SliceKey {
  uint32_t tid = 0;
  uint32_t name = 0;  // TraceModel::strings index
  bool is_step = false;
  bool is_op = false;      // framework operator (cpu_op), not a user range
  uint8_t op_flags = 0;    // raw::kOperator* flags
  uint8_t step_flags = 0;  // a step's raw::kStep* flags (start-up, tail)
  uint32_t inputs = 0;     // string id of "dims<US>types" (record_shapes), 0 if none
  auto tie() const { return std::make_tuple(tid, name, is_step, is_op, op_flags, step_flags, inputs); }
};

// Calls, durations, self times and direct children summed per key (each
// vector indexed by key; shorter: the rest are 0).
struct KeyTotals {
  std::vector<uint64_t> calls;
  std::vector<uint64_t> total_ns;
  std::vector<uint64_t> self_ns;
  std::vector<uint64_t> child_calls;
  // Of calls and self_ns: those nested in an optimizer's step
  // ("Optimizer.step#..." ranges, torch.optim's), at any depth.
  std::vector<uint64_t> optimizer_calls;
  std::vector<uint64_t> optimizer_self_ns;
  uint64_t at(const std::vector<uint64_t>& v, uint32_t key) const { return key < v.size() ? v[key] : 0; }
};

// An operator's sequence number and forward thread (LibTorch autograd
// links), for the operators that have one; found by (start_ns, key).
struct OpLink {
  uint64_t start_ns;
  uint32_t key;
  uint32_t fwd_thread;
  int64_t sequence_nr;
};

// A complete range on one thread: 16 bytes, because the model holds one per
// range and their size bounds the analysis's memory. Times are
// CLOCK_MONOTONIC ns; use TraceModel's accessors (a duration that does not fit
// 32 bits, over 4.29 s, lives in TraceModel::long_durations).
struct Slice {
  uint64_t start_ns = 0;
  uint32_t dur32 = 0;  // duration, or kLongDuration
  uint32_t key = 0;    // TraceModel::keys index
};
static_assert(sizeof(Slice) == 16, "Slice is the model's per-range cost");
inline constexpr uint32_t kLongDuration = 0xffffffffu;

// A slice of `dur_ns`; when that does not fit (dur32 == kLongDuration), the
// caller puts it in TraceModel::long_durations once the key is final.
inline Slice make_slice(uint64_t start_ns, uint64_t dur_ns, uint32_t key) {
  return Slice{start_ns, dur_ns < kLongDuration ? static_cast<uint32_t>(dur_ns) : kLongDuration, key};
}

struct Instant {
  uint64_t ts_ns;
  uint32_t tid;
  uint32_t name;
  uint32_t domain;
};

struct CounterSample {
  uint64_t ts_ns;
  uint32_t tid;
  uint32_t name;
  double value;
};

// One allocator report (profile_memory): an allocation (bytes > 0) or a
// free (bytes < 0), with the allocator's totals just after it.
struct MemoryRecord {
  uint64_t ts_ns;
  uint64_t address;
  int64_t bytes;
  uint64_t total_allocated;
  uint64_t total_reserved;
  uint32_t tid;
  uint32_t device;  // raw::memory_device(type, index)
};

// What an allocation holds (raw MEMORY_TAG): the one alive at `address` at
// `ts_ns`, or one made before the run began.
struct MemoryTag {
  uint64_t ts_ns;
  uint64_t address;
  uint64_t bytes;
  uint32_t device;    // raw::memory_device(type, index)
  uint32_t category;  // string id: "parameter", "gradient", "optimizer state", "input"
};

// One communication call (raw COMM): a collective, a point-to-point
// transfer, the span of a nonblocking operation from post to completion, a
// wait, or a communicator's creation or release.
struct CommCall {
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;
  uint32_t tid;
  uint32_t name;     // the operation (MPI_Allreduce, ...)
  uint32_t group;    // CommGroup::name's string id (0: none)
  uint32_t flags;    // raw::kComm*
  int64_t sequence;  // in the group (-1: none)
  int32_t peer;      // world rank of the peer or root (-1: none)
  int32_t tag;       // -1: none
  // An NCCL operation timed on the device: the algorithm ("Ring", "Tree")
  // and protocol ("LL", "LL128", "Simple") NCCL chose, string ids (0: not
  // given; always 0 for host calls).
  uint32_t algorithm = 0;
  uint32_t protocol = 0;
};
// Time a host thread spent in a call: not a nonblocking operation's span
// from post to completion, nor an NCCL operation timed on the GPU.
inline bool is_host_call(const CommCall& c) {
  return (c.flags & (raw::kCommCompletion | raw::kCommOnDevice)) == 0;
}

// A GPU activity (raw GPU_* events, CUPTI): a kernel, copy, set, runtime or
// driver call, or synchronization.
struct GpuActivity {
  uint64_t start_ns;
  uint64_t end_ns;
  raw::EventKind kind;  // raw::is_gpu_event_kind
  uint32_t name;        // string id
  uint32_t correlation;
  int32_t device;  // -1: none
  uint32_t context;
  uint32_t stream;
  uint32_t subkind;
  uint64_t bytes;
  uint32_t detail;  // string id (kernels: launch geometry, raw/format.h)
  uint32_t thread;  // GPU_API: OS id of the calling thread (0: unknown)
  // A kernel, copy or set that a CUDA graph launched: CUPTI's graph and
  // node ids (0: not from a graph).
  uint32_t graph = 0;
  uint64_t graph_node = 0;
};

// A CUDA graph node (raw GPU_GRAPH_NODE): the operator open where it was
// made, when the graph was captured from framework operators.
struct GpuGraphNode {
  uint64_t node;
  uint32_t graph;
  uint32_t operator_name;  // string id ("": none)
  uint64_t made_ns;        // may precede the run
};

// What ran on a device (a kernel, copy or set), as opposed to the host
// calls and synchronizations around it.
inline bool is_device_activity(const GpuActivity& a) {
  return a.device >= 0 && (a.kind == raw::EventKind::kGpuKernel || a.kind == raw::EventKind::kGpuMemcpy ||
                           a.kind == raw::EventKind::kGpuMemset);
}

// A communicator (raw COMM_GROUP): a name shared by every member's runs,
// and the world ranks of its members.
struct CommGroup {
  uint32_t name;  // string id
  std::vector<int32_t> world_ranks;
  std::string origin;  // how it was made (MPI_COMM_WORLD, MPI_Comm_split, ...)
};

// A measured offset of this rank's wall clock to the reference rank's
// (profiler_info.json "clock_sync", written by libtrainprof_mpi).
struct ClockOffset {
  uint64_t realtime_ns;  // this rank's wall clock when measured
  int64_t offset_ns;     // this clock minus the reference's
  uint64_t error_ns;     // +- bound
};

// range_start / range_end pair (may cross threads).
struct AsyncRange {
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t begin_tid;
  uint32_t name;
  uint32_t domain;
  uint64_t id;
};

// One thread's slices of a window (analysis/run_loader.h), in timeline
// order (analysis/timeline.h); the whole window's order is a merge of the
// threads'. Threads are kept apart because each arrives nearly ordered on its
// own (ranges are recorded as they end) and interleaved with the others.
struct ThreadSlices {
  uint32_t tid = 0;
  std::vector<Slice> slices;
  // slices[0, first_own) started in earlier windows and are still open at
  // this window's start: context for enclosing ranges, not counted again.
  size_t first_own = 0;
};

// Where a slice is: its thread (TraceModel::threads index) and position.
struct SliceRef {
  uint32_t thread;
  size_t index;
};

// One stage of the data pipeline (trainprof::DataStage), on its thread.
struct DataStageSlice {
  uint64_t start_ns;
  uint64_t dur_ns;
  uint32_t tid;
  uint32_t operation;  // string ids
  uint32_t stage;
  uint32_t custom_info;  // 0: none
};

struct StepWindow {
  int64_t number;
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t tid = 0;  // the thread that recorded it (the training loop's)
};

// A sample stands for at most this long (a sampler held back longer, by a
// busy machine, knows nothing of what came before; a thread that samples
// itself, blocked that long, is found where the wait began or ended).
inline constexpr uint64_t kMaxSampleSpanNs = 1'000'000'000;

// A thread's stack as a front end's sampler found it (STACK_SAMPLE):
// standing for [start_ns, end_ns) of thread `tid`.
struct StackSample {
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t tid;
  uint32_t stack;  // string id: "file(line): function" frames, innermost first, ';' between
  // Of its span, the time its thread waited for a CPU (0: unknown).
  uint64_t cpu_wait_ns = 0;
  // Of its span, the time its thread spent outside every range and
  // operator, less its CPU wait (analysis/python_samples.h sets it).
  uint64_t outside_ns = 0;
};

// `steps` sorted by start, for step_at.
std::vector<StepWindow> steps_by_start(std::vector<StepWindow> steps);
// The number of the step whose window holds `t` (monotonic ns), -1 for
// none; `by_start` as steps_by_start gives it.
int64_t step_at(const std::vector<StepWindow>& by_start, uint64_t t);

// What --steps keeps (select_steps): the chosen steps' slices and every
// other event that starts inside [begin_ns, end_ns). The one filter: the
// scan's events are kept by it in select_steps, the slices as the loader
// reads them.
struct SliceSelection {
  bool active = false;
  uint64_t begin_ns = 0;
  uint64_t end_ns = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  // An event (not a step) that starts at `start_ns`.
  bool keeps(uint64_t start_ns) const { return !active || (start_ns >= begin_ns && start_ns < end_ns); }
  // The ProfilerStep#N slice of step `n`.
  bool keeps_step(int64_t n) const { return !active || (n >= first_step && n <= last_step); }
};

struct TraceModel {
  int rank = 0;
  int world_size = 1;
  std::string host;
  std::string job;  // profiler_info.json's: the launcher's job id ("": none named)
  uint32_t pid = 0;
  int64_t realtime_offset_ns = 0;  // realtime = monotonic + offset
  uint64_t session_start_ns = 0;   // monotonic ns of the run's first anchor

  std::vector<std::string> strings;  // index 0 is ""
  std::map<uint32_t, std::string> thread_names;
  std::vector<SliceKey> keys;
  std::vector<ThreadSlices> threads;  // one window's; sorted by tid once scanned
  // Durations of 2^32 - 1 ns or more, by (start, key).
  std::map<std::pair<uint64_t, uint32_t>, uint64_t> long_durations;
  // Sorted by (start_ns, key).
  std::vector<OpLink> op_links;
  // Self time summed per key (compute_self_times).
  std::vector<uint64_t> self_by_key;
  // Direct children (slices nested right inside, same thread) per key.
  std::vector<uint64_t> child_calls_by_key;
  // The same counts per key over the slices that start inside the counted
  // steps (the advisor's facts: start-up and tail left out) and inside the
  // start-up phase (what it held), as recorded (operator_sampling not
  // applied).
  KeyTotals in_steps;
  KeyTotals in_start_up;
  std::vector<Instant> instants;
  std::vector<CounterSample> counters;
  std::vector<AsyncRange> async_ranges;
  std::vector<DataStageSlice> data_stages;
  // By (tid, end_ns); each span at most kMaxSampleSpanNs long.
  std::vector<StackSample> stack_samples;
  // Symbolized native call stacks (with_stack), by the inputs string id that
  // carries the raw frames (symbolize_call_stacks).
  std::unordered_map<uint32_t, std::string> call_stacks;
  std::vector<MemoryRecord> memory;    // in time order (stable: a thread's reports keep their order)
  std::vector<MemoryTag> memory_tags;  // in time order
  // Allocations that failed (out of memory; raw::kMemoryFailed, cleared in
  // `device` here): bytes asked for, no block. In time order.
  std::vector<MemoryRecord> failed_allocations;
  std::vector<CommCall> comm_calls;                            // in start order
  std::vector<GpuActivity> gpu;                                // in start order
  std::unordered_map<uint64_t, GpuGraphNode> gpu_graph_nodes;  // by node id
  // The innermost range or operator around each launch, by correlation id,
  // and the device time each key launched itself (self) and with the ranges
  // inside it (total), indexed by key (analysis/gpu_launches.h).
  std::unordered_map<uint32_t, uint32_t> launcher_by_correlation;
  std::vector<uint64_t> device_self_by_key;
  std::vector<uint64_t> device_total_by_key;
  std::vector<CommGroup> comm_groups;      // one per group name
  std::vector<ClockOffset> clock_offsets;  // by realtime_ns; empty: not aligned
  // Why the clock alignment is short of what was started: an exchange with
  // the reference rank still running when the run was analysed, or failed
  // (profiler_info.json's clock_sync.exchanges); "" when none is.
  std::string clock_problem;
  bool closed_cleanly = true;  // every raw file ended with its final flush
  // About one operator call in this many was recorded (the run's
  // sample_operators): operators' counts and times are scaled by it.
  uint32_t operator_sampling = 1;
  std::string stop_reason;        // profiler_info.json's ("" when the run has none: killed before)
  std::string io_error;           // profiler_info.json's: the write the disk refused ("": none)
  uint64_t events_lost = 0;       // recorded, then refused by the disk (profiler_info.json's)
  std::vector<StepWindow> steps;  // sorted by number
  // Recorded as ProfilerStep#N but not steps (raw::kStepStartUp,
  // raw::kStepTail): the start-up phase, from start() to the first step
  // boundary (imports, model build, the first batch), and the open tail,
  // from the last step() to stop(). Number -1: the run has none. A run with
  // no step between two step() calls keeps them among `steps`: they are all
  // it measured.
  StepWindow start_up{-1, 0, 0};
  StepWindow tail{-1, 0, 0};
  SliceSelection selection;
  std::vector<std::string> warnings;
  uint64_t event_count = 0;
  // Summed over the raw files (raw::RawFile's sequence checks).
  uint64_t chunks_duplicated = 0;
  uint64_t chunks_missing = 0;
  uint64_t chunks_reordered = 0;
  uint64_t events_with_undefined_ids = 0;  // and their string damage
  uint64_t string_chunks_with_unread_bytes = 0;

  const std::string& name(uint32_t id) const { return strings[id]; }

  // Slice accessors.
  uint32_t tid(const Slice& s) const { return keys[s.key].tid; }
  uint32_t name_id(const Slice& s) const { return keys[s.key].name; }
  bool is_step(const Slice& s) const { return keys[s.key].is_step; }
  bool is_op(const Slice& s) const { return keys[s.key].is_op; }
  uint64_t duration(const Slice& s) const {
    return s.dur32 != kLongDuration ? s.dur32 : long_durations.at({s.start_ns, s.key});
  }
  uint64_t end(const Slice& s) const { return s.start_ns + duration(s); }
  // N of a ProfilerStep#N slice (-1 for others).
  int64_t step_number(const Slice& s) const;

  // The index of `key`, created on first use.
  uint32_t key_of(const SliceKey& key);
  // The index in `threads` of thread `tid`, created on first use.
  uint32_t thread_of(uint32_t tid);
  // Appends a slice to its key's thread (tests and small models; the loader
  // fills window buffers of its own).
  void add_slice(const Slice& s) { threads[thread_of(keys[s.key].tid)].slices.push_back(s); }
  Slice& slice(SliceRef r) { return threads[r.thread].slices[r.index]; }
  size_t slice_count() const;
  // Sorts `threads` by tid (the index behind thread_of follows).
  void sort_threads();
  // The OpLink of a slice, nullptr if it has none.
  const OpLink* op_link(const Slice& s) const;

 private:
  std::map<decltype(SliceKey().tie()), uint32_t> key_index_;
  std::unordered_map<uint32_t, uint32_t> thread_index_;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_TRACE_MODEL_H_
