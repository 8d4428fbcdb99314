// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/gpu_launches.h"

#include <algorithm>
#include <tuple>

namespace trainprof::analysis {

std::unordered_map<uint32_t, const GpuActivity*> launches_by_correlation(const TraceModel& m) {
  std::unordered_map<uint32_t, const GpuActivity*> launch;
  for (const GpuActivity& a : m.gpu) {
    if (a.kind != raw::EventKind::kGpuApi) continue;
    auto [it, inserted] = launch.emplace(a.correlation, &a);
    if (!inserted && a.subkind == static_cast<uint32_t>(raw::GpuApiKind::kRuntime)) it->second = &a;
  }
  return launch;
}

std::vector<DeviceLaunch> device_launches(const TraceModel& m) {
  std::unordered_map<uint32_t, uint64_t> device_ns;  // by correlation
  for (const GpuActivity& a : m.gpu) {
    if (is_device_activity(a)) device_ns[a.correlation] += a.end_ns - a.start_ns;
  }
  std::vector<DeviceLaunch> out;
  for (const auto& [correlation, call] : launches_by_correlation(m)) {
    if (call->thread == 0) continue;  // CUPTI's thread matched no recording thread
    auto it = device_ns.find(correlation);
    if (it == device_ns.end()) continue;  // launched nothing that ran (or no launch)
    out.push_back(DeviceLaunch{call->thread, call->start_ns, it->second, correlation});
  }
  std::sort(out.begin(), out.end(), [](const DeviceLaunch& a, const DeviceLaunch& b) {
    return std::tie(a.start_ns, a.correlation) < std::tie(b.start_ns, b.correlation);
  });
  return out;
}

LaunchAttribution::LaunchAttribution(const TraceModel& m) {
  for (const DeviceLaunch& l : device_launches(m)) {
    threads_[l.thread].launches.push_back(Launch{l.start_ns, l.device_ns, l.correlation});
  }
}

void LaunchAttribution::place(Thread& t, uint64_t until_ns) {
  for (; t.next < t.launches.size() && t.launches[t.next].start_ns < until_ns; ++t.next) {
    const Launch& l = t.launches[t.next];
    while (!t.stack.empty() && t.stack.back().end_ns <= l.start_ns) t.stack.pop_back();
    if (t.stack.empty()) continue;  // outside every range: no launcher
    uint32_t innermost = t.stack.back().key;
    launcher_[l.correlation] = innermost;
    size_t need = innermost + 1;
    for (const Open& o : t.stack) need = std::max<size_t>(need, o.key + 1);
    if (self_ns_.size() < need) {
      self_ns_.resize(need, 0);
      total_ns_.resize(need, 0);
    }
    self_ns_[innermost] += l.device_ns;
    for (const Open& o : t.stack) total_ns_[o.key] += l.device_ns;
  }
}

void LaunchAttribution::add_window(const TraceModel& m) {
  if (threads_.empty()) return;
  for (const ThreadSlices& slices : m.threads) {
    auto it = threads_.find(slices.tid);
    if (it == threads_.end()) continue;
    Thread& t = it->second;
    // A thread's slices are in timeline order (a parent before its
    // children): a launch that starts before a slice belongs to what is
    // open when the walk reaches it; one at the slice's start, inside it.
    for (size_t i = slices.first_own; i < slices.slices.size(); ++i) {
      const Slice& s = slices.slices[i];
      if (m.is_step(s)) continue;
      place(t, s.start_ns);
      while (!t.stack.empty() && t.stack.back().end_ns <= s.start_ns) t.stack.pop_back();
      t.stack.push_back(Open{m.end(s), s.key});
    }
  }
}

void LaunchAttribution::finish(TraceModel& m) {
  for (auto& entry : threads_) place(entry.second, UINT64_MAX);
  self_ns_.resize(std::max(self_ns_.size(), m.keys.size()), 0);
  total_ns_.resize(self_ns_.size(), 0);
  m.launcher_by_correlation = std::move(launcher_);
  m.device_self_by_key = std::move(self_ns_);
  m.device_total_by_key = std::move(total_ns_);
}

void place_driver_memory_on_calling_threads(TraceModel& m) {
  std::vector<const GpuActivity*> calls;  // by start, as m.gpu
  uint64_t longest = 0;
  for (const GpuActivity& a : m.gpu) {
    if (a.kind != raw::EventKind::kGpuApi || a.thread == 0) continue;
    calls.push_back(&a);
    longest = std::max(longest, a.end_ns - a.start_ns);
  }
  if (calls.empty()) return;
  for (MemoryRecord& r : m.memory) {
    if (!raw::memory_from_driver(r.device)) continue;
    // The latest call that started by then and still ran: no call that
    // started more than `longest` before can.
    auto it = std::upper_bound(calls.begin(), calls.end(), r.ts_ns,
                               [](uint64_t t, const GpuActivity* a) { return t < a->start_ns; });
    while (it != calls.begin()) {
      const GpuActivity* call = *--it;
      if (call->start_ns + longest < r.ts_ns) break;
      if (call->end_ns >= r.ts_ns) {
        r.tid = call->thread;
        break;
      }
    }
  }
}

uint32_t graph_capture_operator(const TraceModel& m, const GpuActivity& a) {
  if (a.graph_node == 0) return 0;
  auto it = m.gpu_graph_nodes.find(a.graph_node);
  return it != m.gpu_graph_nodes.end() ? it->second.operator_name : 0;
}

void attribute_launches(TraceModel& m) {
  LaunchAttribution launches(m);
  launches.add_window(m);
  launches.finish(m);
}

}  // namespace trainprof::analysis
