// Copyright trainprof authors. The per-call walk: every range and operator
// as one call, with its parent, its self time, the memory it allocated and
// the GPU time it launched, itself and with what ran inside it.
//
// The tables of the analysis sum per key as they go (self_time.cc,
// gpu_launches.cc); torch.profiler's events() and key_averages() need the
// same numbers per call, and memory per call too. Each thread's stack of open
// calls goes on from one window to the next (analysis/run_loader.h), and the
// thread's memory reports and launches are placed in the calls open when the
// walk reaches their time.
#ifndef TRAINPROF_ANALYSIS_CALL_WALK_H_
#define TRAINPROF_ANALYSIS_CALL_WALK_H_

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "analysis/gpu_launches.h"
#include "analysis/trace_model.h"

namespace trainprof::analysis {

inline constexpr uint32_t kNoCall = 0xffffffffu;
// The key of a "[memory]" call: memory reported while no range or operator
// was open on its thread (torch.profiler lists these as "[memory]").
inline constexpr uint32_t kMemoryOnlyKey = 0xffffffffu;

struct WalkedCall {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t self_ns = 0;  // the duration less the time of the calls nested in it
  uint32_t index = 0;    // in opening order, from 0
  uint32_t parent = kNoCall;
  uint32_t key = 0;  // TraceModel::keys index, or kMemoryOnlyKey
  uint32_t tid = 0;
  // Bytes allocated less bytes freed (profile_memory) while the call was
  // the innermost one open on its thread (self), or while it was open at all.
  int64_t self_cpu_memory = 0;
  int64_t cpu_memory = 0;
  int64_t self_device_memory = 0;
  int64_t device_memory = 0;
  // GPU time of what it launched (self), and of what the calls inside it did.
  uint64_t self_device_ns = 0;
  uint64_t device_ns = 0;
};

class CallWalk {
 public:
  // `on_call`: each call as it closes (children before their parent).
  // `on_launch`: a launch (by correlation id) placed in a call, before the
  // call closes. Needs model.memory and model.gpu (the scan's).
  using CallSink = std::function<void(const WalkedCall& call)>;
  using LaunchSink = std::function<void(uint32_t call_index, uint32_t correlation)>;
  CallWalk(const TraceModel& model, CallSink on_call, LaunchSink on_launch = nullptr);

  // The window's own slices (each thread's from first_own, timeline order).
  void add_window(const TraceModel& model);
  // Places what is left and closes every open call.
  void finish();

  uint32_t calls() const { return next_index_; }

 private:
  struct Thread {
    std::vector<uint32_t> reports;  // TraceModel::memory indices, in time order
    size_t next_report = 0;
    std::vector<DeviceLaunch> launches;  // by start
    size_t next_launch = 0;
    std::vector<WalkedCall> open;
  };
  Thread& thread(uint32_t tid) { return threads_[tid]; }
  // Places the thread's reports and launches that happen before `until_ns`.
  void place(uint32_t tid, Thread& t, uint64_t until_ns);
  // Closes the open calls that end by `t_ns`.
  void close_ended(Thread& t, uint64_t t_ns);
  void close_innermost(Thread& t);

  const TraceModel& model_;
  CallSink on_call_;
  LaunchSink on_launch_;
  std::unordered_map<uint32_t, Thread> threads_;  // by OS tid
  uint32_t next_index_ = 0;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_CALL_WALK_H_
