// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/call_walk.h"

#include <algorithm>
#include <utility>

#include "raw/format.h"

namespace trainprof::analysis {
namespace {

// c10::DeviceType::CPU: torch.profiler's CPU memory columns; every other
// device is device memory.
constexpr int kCpuDeviceType = 0;

// `part` (closed, its totals already in `whole`'s) made part of `whole`:
// its own time, memory and launches become `whole`'s own. The totals are
// taken back out so that closing `whole` does not count them twice.
void absorb(WalkedCall& whole, const WalkedCall& part) {
  whole.self_ns += part.self_ns;
  whole.self_cpu_memory += part.self_cpu_memory;
  whole.self_device_memory += part.self_device_memory;
  whole.self_device_ns += part.self_device_ns;
  whole.cpu_memory -= part.self_cpu_memory;
  whole.device_memory -= part.self_device_memory;
  whole.device_ns -= part.self_device_ns;
}

}  // namespace

CallWalk::CallWalk(const TraceModel& m, Sinks sinks, CallWalkOptions options)
    : model_(m), sinks_(std::move(sinks)), options_(options) {
  for (size_t i = 0; i < m.memory.size(); ++i) {
    // The driver's reports are the segments the framework's allocator's own
    // reports are carved from: counting both would count the bytes twice.
    if (raw::memory_from_driver(m.memory[i].device)) continue;
    thread(m.memory[i].tid).reports.push_back(static_cast<uint32_t>(i));
  }
  for (const DeviceLaunch& l : device_launches(m)) thread(l.thread).launches.push_back(l);
}

void CallWalk::add_window(const TraceModel& m) {
  for (const ThreadSlices& slices : m.threads) {
    Thread& t = thread(slices.tid);
    // A thread's slices are in timeline order (a parent before its
    // children). What happens at a slice's start happens inside it.
    for (size_t i = slices.first_own; i < slices.slices.size(); ++i) {
      const Slice& s = slices.slices[i];
      if (!options_.include_steps && m.is_step(s)) continue;
      place(slices.tid, t, s.start_ns);
      close_ended(t, s.start_ns);
      OpenCall open;
      WalkedCall& call = open.call;
      call.start_ns = s.start_ns;
      call.end_ns = m.end(s);
      call.self_ns = call.end_ns - call.start_ns;
      call.index = next_index_++;
      call.key = s.key;
      call.tid = slices.tid;
      if (!t.open.empty()) {
        WalkedCall& parent = t.open.back().call;
        call.parent = parent.index;
        call.parent_key = parent.key;
        // A child that outlives its parent (ranges ended out of order) only
        // takes the part that overlaps.
        parent.self_ns -= std::min(parent.self_ns, std::min(parent.end_ns, call.end_ns) - call.start_ns);
      }
      t.open.push_back(std::move(open));
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
      if (t.open.empty()) {
        memory_alone(tid, r, cpu);
      } else {
        WalkedCall& innermost = t.open.back().call;
        (cpu ? innermost.self_cpu_memory : innermost.self_device_memory) += r.bytes;
      }
    } else if (launch_next) {
      const DeviceLaunch& l = t.launches[t.next_launch++];
      close_ended(t, l.start_ns);
      // The launcher is the innermost call that is not a step (as the
      // analysis's kernel attribution, analysis/gpu_launches.h).
      for (auto it = t.open.rbegin(); it != t.open.rend(); ++it) {
        if (model_.keys[it->call.key].is_step) continue;
        it->call.self_device_ns += l.device_ns;
        if (sinks_.on_launch) sinks_.on_launch(it->call.index, l.correlation);
        break;
      }
    } else {
      return;
    }
  }
}

void CallWalk::memory_alone(uint32_t tid, const MemoryRecord& r, bool cpu) {
  WalkedCall alone;
  alone.start_ns = alone.end_ns = r.ts_ns;
  alone.index = next_index_++;
  alone.key = kMemoryOnlyKey;
  alone.tid = tid;
  (cpu ? alone.self_cpu_memory : alone.self_device_memory) = r.bytes;
  (cpu ? alone.cpu_memory : alone.device_memory) = r.bytes;
  sinks_.on_call(alone);
}

void CallWalk::close_ended(Thread& t, uint64_t t_ns) {
  while (!t.open.empty() && t.open.back().call.end_ns <= t_ns) close_innermost(t);
}

void CallWalk::close_innermost(Thread& t) {
  OpenCall closing = std::move(t.open.back());
  t.open.pop_back();
  WalkedCall& call = closing.call;
  if (closing.holds_namesake) {
    // Its only child had its name: one call, as torch.profiler lists it.
    absorb(call, closing.namesake);
    if (sinks_.on_fold) sinks_.on_fold(closing.namesake.index, call.index);
  }
  call.cpu_memory += call.self_cpu_memory;
  call.device_memory += call.self_device_memory;
  call.device_ns += call.self_device_ns;
  if (t.open.empty()) {
    sinks_.on_call(call);
    return;
  }
  OpenCall& parent = t.open.back();
  parent.call.cpu_memory += call.cpu_memory;
  parent.call.device_memory += call.device_memory;
  parent.call.device_ns += call.device_ns;
  if (parent.holds_namesake) {  // a second child: the first stays a call of its own
    sinks_.on_call(parent.namesake);
    parent.holds_namesake = false;
  }
  if (++parent.children == 1 && model_.keys[call.key].name == model_.keys[parent.call.key].name) {
    parent.namesake = call;
    parent.holds_namesake = true;
    return;
  }
  sinks_.on_call(call);
}

}  // namespace trainprof::analysis
