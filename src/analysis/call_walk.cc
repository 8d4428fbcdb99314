// Copyright trainprof authors.
#include "analysis/call_walk.h"

#include <algorithm>
#include <utility>

#include "raw/format.h"

namespace trainprof::analysis {
namespace {

// c10::DeviceType::CPU: torch.profiler's CPU memory columns; every other
// device is device memory.
constexpr int kCpuDeviceType = 0;

}  // namespace

CallWalk::CallWalk(const TraceModel& m, CallSink on_call, LaunchSink on_launch)
    : model_(m), on_call_(std::move(on_call)), on_launch_(std::move(on_launch)) {
  for (size_t i = 0; i < m.memory.size(); ++i) {
    // The driver's reports are the segments the framework's allocator's own
    // reports are carved from: counting both would count the bytes twice.
    if (raw::memory_from_driver(m.memory[i].device)) continue;
    thread(m.memory[i].tid).reports.push_back(static_cast<uint32_t>(i));
  }
  for (const DeviceLaunch& l : device_launches(m)) {
    thread(l.thread).launches.push_back(l);
  }
}

void CallWalk::add_window(const TraceModel& m) {
  for (const ThreadSlices& slices : m.threads) {
    Thread& t = thread(slices.tid);
    // A thread's slices are in timeline order (a parent before its
    // children). What happens at a slice's start happens inside it.
    for (size_t i = slices.first_own; i < slices.slices.size(); ++i) {
      const Slice& s = slices.slices[i];
      place(slices.tid, t, s.start_ns);
      close_ended(t, s.start_ns);
      WalkedCall call;
      call.start_ns = s.start_ns;
      call.end_ns = m.end(s);
      call.self_ns = call.end_ns - call.start_ns;
      call.index = next_index_++;
      call.key = s.key;
      call.tid = slices.tid;
      if (!t.open.empty()) {
        WalkedCall& parent = t.open.back();
        call.parent = parent.index;
        // A child that outlives its parent (ranges ended out of order) only
        // takes the part that overlaps.
        parent.self_ns -= std::min(parent.self_ns, std::min(parent.end_ns, call.end_ns) - call.start_ns);
      }
      t.open.push_back(call);
    }
  }
}

void CallWalk::finish() {
  for (auto& [tid, t] : threads_) {
    place(tid, t, UINT64_MAX);
    while (!t.open.empty()) close_innermost(t);
  }
}

void CallWalk::place(uint32_t tid, Thread& t, uint64_t until_ns) {
  const std::vector<MemoryRecord>& memory = model_.memory;
  for (;;) {
    bool report_next = t.next_report < t.reports.size() && memory[t.reports[t.next_report]].ts_ns < until_ns;
    bool launch_next = t.next_launch < t.launches.size() && t.launches[t.next_launch].start_ns < until_ns;
    if (report_next && launch_next) {
      report_next = memory[t.reports[t.next_report]].ts_ns <= t.launches[t.next_launch].start_ns;
      launch_next = !report_next;
    }
    if (report_next) {
      const MemoryRecord& r = memory[t.reports[t.next_report++]];
      close_ended(t, r.ts_ns);
      bool cpu = raw::memory_device_type(r.device) == kCpuDeviceType;
      if (!t.open.empty()) {
        (cpu ? t.open.back().self_cpu_memory : t.open.back().self_device_memory) += r.bytes;
        continue;
      }
      WalkedCall alone;  // memory outside every call: a "[memory]" call of its own
      alone.start_ns = alone.end_ns = r.ts_ns;
      alone.index = next_index_++;
      alone.key = kMemoryOnlyKey;
      alone.tid = tid;
      (cpu ? alone.self_cpu_memory : alone.self_device_memory) = r.bytes;
      (cpu ? alone.cpu_memory : alone.device_memory) = r.bytes;
      on_call_(alone);
    } else if (launch_next) {
      const DeviceLaunch& l = t.launches[t.next_launch++];
      close_ended(t, l.start_ns);
      // The launcher is the innermost call that is not a step (as the
      // analysis's kernel attribution, analysis/gpu_launches.h).
      for (auto it = t.open.rbegin(); it != t.open.rend(); ++it) {
        if (it->key != kMemoryOnlyKey && model_.keys[it->key].is_step) continue;
        it->self_device_ns += l.device_ns;
        if (on_launch_) on_launch_(it->index, l.correlation);
        break;
      }
    } else {
      return;
    }
  }
}

void CallWalk::close_ended(Thread& t, uint64_t t_ns) {
  while (!t.open.empty() && t.open.back().end_ns <= t_ns) close_innermost(t);
}

void CallWalk::close_innermost(Thread& t) {
  WalkedCall call = t.open.back();
  t.open.pop_back();
  call.cpu_memory += call.self_cpu_memory;
  call.device_memory += call.self_device_memory;
  call.device_ns += call.self_device_ns;
  if (!t.open.empty()) {
    WalkedCall& parent = t.open.back();
    parent.cpu_memory += call.cpu_memory;
    parent.device_memory += call.device_memory;
    parent.device_ns += call.device_ns;
  }
  on_call_(call);
}

}  // namespace trainprof::analysis
