// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The per-call walk: every range and operator as one call, with its parent, its
// self time, the memory it allocated and the GPU time it launched, itself and
// with what ran inside it.
//
// The tables of the analysis sum per key as they go (self_time.cc,
// gpu_launches.cc); torch.profiler's events() and key_averages() need the
// same numbers per call, and memory per call too. Each thread's stack of open
// calls goes on from one window to the next (analysis/run_loader.h), and the
// thread's memory reports and launches are placed in the calls open when the
// walk reaches their time.
//
// As torch.profiler's event list, a call that is the only child of a call of
// the same name (aten::div_ inside aten::div_) is folded into it: its time,
// memory and launches become its parent's own, its children its parent's.
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
  uint32_t parent_key = kNoCall;  // the parent's TraceModel::keys index
  uint32_t key = 0;               // TraceModel::keys index, or kMemoryOnlyKey
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

struct CallWalkOptions {
  // false: the ProfilerStep#N ranges are not calls (torch.profiler has none
  // when step() was never called, and trainprof's session then records
  // one); what happened in them outside other calls has no call around it.
  bool include_steps = true;
};

class CallWalk {
 public:
  // `on_call`: each call as it closes (children before their parent), but
  // not a folded call. `on_launch`: a launch (by correlation id) placed in a
  // call, before the call closes. `on_fold`: a call (folded) that became
  // part of its parent (into), after the calls that name it as their parent
  // were given. Needs model.memory and model.gpu (the scan's).
  using CallSink = std::function<void(const WalkedCall& call)>;
  using LaunchSink = std::function<void(uint32_t call_index, uint32_t correlation)>;
  using FoldSink = std::function<void(uint32_t folded, uint32_t into)>;
  struct Sinks {
    CallSink on_call;
    LaunchSink on_launch;  // may be empty
    FoldSink on_fold;      // may be empty
  };
  CallWalk(const TraceModel& model, Sinks sinks, CallWalkOptions options = {});

  // The window's own slices (each thread's from first_own, timeline order).
  void add_window(const TraceModel& model);
  // Places what is left and closes every open call.
  void finish();

  uint32_t calls() const { return next_index_; }

 private:
  struct OpenCall {
    WalkedCall call;
    uint32_t children = 0;
    // Its one child so far when that has its name: folded into it if no
    // other child comes (held, not yet given to on_call).
    bool holds_namesake = false;
    WalkedCall namesake;
  };
  struct Thread {
    std::vector<uint32_t> reports;  // TraceModel::memory indices, in time order
    size_t next_report = 0;
    std::vector<DeviceLaunch> launches;  // by start
    size_t next_launch = 0;
    std::vector<OpenCall> open;
  };
  Thread& thread(uint32_t tid) { return threads_[tid]; }
  // Places the thread's reports and launches that happen before `until_ns`.
  void place(uint32_t tid, Thread& t, uint64_t until_ns);
  // Closes the open calls that end by `t_ns`.
  void close_ended(Thread& t, uint64_t t_ns);
  void close_innermost(Thread& t);
  // A memory report with no call open around it: a "[memory]" call.
  void memory_alone(uint32_t tid, const MemoryRecord& r, bool cpu);

  const TraceModel& model_;
  Sinks sinks_;
  CallWalkOptions options_;
  std::unordered_map<uint32_t, Thread> threads_;  // by OS tid
  uint32_t next_index_ = 0;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_CALL_WALK_H_
