// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// One run's recorded calls, one by one: torch.profiler's events(), computed by
// the analysis.
//
//   trainprof::CallEvents e = trainprof::call_events(run_dir);
//   for (const trainprof::CallEvent& c : e.calls)
//     std::cout << e.keys[c.key].name << " " << c.end_ns - c.start_ns << "\n";
//
// Every range and operator is a call (as torch.profiler's events, a call
// that is the only child of a call of the same name is part of it), with its
// parent and children on its thread, its self time, the memory it allocated (profile_memory) and the GPU
// activities it launched. Calls share what they are (name, thread, input
// shapes, stack) through `keys`, so a call costs sizeof(CallEvent) bytes:
// a run of 1 M calls is held in about 96 MB.
#ifndef TRAINPROF_CALL_EVENTS_H_
#define TRAINPROF_CALL_EVENTS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainprof {

inline constexpr uint32_t kNoCallEvent = 0xffffffffu;

// What calls share: one per (thread, name, input shapes, stack).
struct CallKey {
  std::string name;          // "[memory]": memory reported while nothing was open on the thread
  uint32_t tid = 0;          // OS thread id
  std::string input_shapes;  // "[[64,1,28,28],[32]]" (record_shapes), else ""
  std::string stack;         // frames innermost first, ';'-separated (with_stack), else ""
  bool is_operator = false;  // a framework operator, not a user range
  bool is_step = false;      // ProfilerStep#N
  uint64_t flops = 0;        // of one call (with_flops)
};

// One call. Times are CLOCK_MONOTONIC ns; memory is bytes allocated less
// bytes freed while it ran (self: while it was the innermost call open on
// its thread).
struct CallEvent {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t self_ns = 0;                  // without the time of the calls nested in it
  uint32_t key = 0;                      // CallEvents::keys index
  uint32_t parent = kNoCallEvent;        // CallEvents::calls index
  uint32_t first_child = kNoCallEvent;   // the earliest call nested directly in it
  uint32_t next_sibling = kNoCallEvent;  // the next call with the same parent
  uint32_t first_kernel = 0;             // CallEvents::kernels[first_kernel, +kernel_count)
  uint32_t kernel_count = 0;
  int64_t cpu_memory = 0;
  int64_t self_cpu_memory = 0;
  int64_t device_memory = 0;  // every device but the CPU
  int64_t self_device_memory = 0;
  uint64_t device_ns = 0;       // GPU time of what it and the calls in it launched
  uint64_t self_device_ns = 0;  // of what it launched itself
};
static_assert(sizeof(CallEvent) == 96, "CallEvent is the per-call cost of call_events");

// A kernel, copy or set that a call launched.
struct CallKernel {
  uint32_t name = 0;  // CallEvents::kernel_names index
  int32_t device = -1;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

struct CallEvents {
  std::string error;  // empty when the run was read
  // By start, the longer first when two start together (a parent before its
  // first child).
  std::vector<CallEvent> calls;
  std::vector<CallKey> keys;
  std::vector<CallKernel> kernels;
  std::vector<std::string> kernel_names;
  uint64_t origin_ns = 0;             // the run's start (CLOCK_MONOTONIC ns)
  std::vector<std::string> warnings;  // what reading the run said (damaged chunks, ...)
};

struct CallEventsOptions {
  // false: the ProfilerStep#N ranges are not calls (torch.profiler has none
  // when step() was never called; a session records one), and memory
  // reported in them outside other calls is a "[memory]" call.
  bool include_steps = true;
};

// The calls of the run directory `run_dir` ({...}_trainprof).
CallEvents call_events(const std::string& run_dir, const CallEventsOptions& options = {});

}  // namespace trainprof

#endif  // TRAINPROF_CALL_EVENTS_H_
