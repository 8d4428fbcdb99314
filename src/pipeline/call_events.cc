// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// call_events (include/trainprof/call_events.h): the run loaded window by
// window through the per-call walk, each call kept as it closes, then put in
// start order with its links renumbered.
#include "trainprof/call_events.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "analysis/call_walk.h"
#include "analysis/passes.h"
#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

// The model's slice keys as CallKeys; the "[memory]" calls of each thread
// get keys of their own, appended as they come.
class KeyTable {
 public:
  explicit KeyTable(const analysis::TraceModel& m) : model_(m) {}

  uint32_t of(const analysis::WalkedCall& c, CallEvents& out) {
    if (c.key != analysis::kMemoryOnlyKey) {
      if (c.key >= slice_keys_.size()) slice_keys_.resize(model_.keys.size(), kNoCallEvent);
      uint32_t& k = slice_keys_[c.key];
      if (k == kNoCallEvent) k = add(out, key_of(model_.keys[c.key]));
      return k;
    }
    auto [it, inserted] = memory_keys_.emplace(c.tid, 0);
    if (inserted) {
      CallKey key;
      key.name = "[memory]";
      key.tid = c.tid;
      it->second = add(out, std::move(key));
    }
    return it->second;
  }

 private:
  CallKey key_of(const analysis::SliceKey& k) const {
    CallKey key;
    key.name = model_.strings[k.name];
    key.tid = k.tid;
    key.is_operator = k.is_op;
    key.is_step = k.is_step;
    if (k.inputs != 0) {
      key.input_shapes = analysis::input_dims(model_, k.inputs);
      key.flops = analysis::input_flops(model_, k.inputs);
      auto it = model_.call_stacks.find(k.inputs);
      if (it != model_.call_stacks.end()) key.stack = it->second;
    }
    return key;
  }
  static uint32_t add(CallEvents& out, CallKey key) {
    out.keys.push_back(std::move(key));
    return static_cast<uint32_t>(out.keys.size() - 1);
  }

  const analysis::TraceModel& model_;
  std::vector<uint32_t> slice_keys_;
  std::unordered_map<uint32_t, uint32_t> memory_keys_;  // by tid
};

CallEvent event_of(const analysis::WalkedCall& c, uint32_t key) {
  CallEvent e;
  e.start_ns = c.start_ns;
  e.end_ns = c.end_ns;
  e.self_ns = c.self_ns;
  e.key = key;
  e.parent = c.parent;  // an opening index until renumbered
  e.cpu_memory = c.cpu_memory;
  e.self_cpu_memory = c.self_cpu_memory;
  e.device_memory = c.device_memory;
  e.self_device_memory = c.self_device_memory;
  e.device_ns = c.device_ns;
  e.self_device_ns = c.self_device_ns;
  return e;
}

// Puts `calls` (by opening index) in start order, the longer first, and
// renumbers the parents; returns the new index of each opening index. The
// permutation is applied in place, cycle by cycle, so the calls are not
// held twice.
std::vector<uint32_t> sort_by_start(std::vector<CallEvent>& calls) {
  std::vector<uint32_t> order(calls.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::make_tuple(calls[a].start_ns, calls[b].end_ns) <
           std::make_tuple(calls[b].start_ns, calls[a].end_ns);
  });
  std::vector<uint32_t> new_index(calls.size());
  for (uint32_t k = 0; k < order.size(); ++k) new_index[order[k]] = k;
  for (CallEvent& c : calls) {
    if (c.parent != kNoCallEvent) c.parent = new_index[c.parent];
  }
  // Position k takes the call at order[k]; follow each cycle once.
  for (uint32_t start = 0; start < order.size(); ++start) {
    if (order[start] == start) continue;
    CallEvent held = std::move(calls[start]);
    uint32_t k = start;
    while (order[k] != start) {
      uint32_t from = order[k];
      calls[k] = std::move(calls[from]);
      order[k] = k;
      k = from;
    }
    calls[k] = std::move(held);
    order[k] = k;
  }
  return new_index;
}

// Takes the folded calls out of `calls` (by opening index): the calls and
// launches that named one name what it was folded into, and every index
// after it moves down.
void drop_folded(std::vector<CallEvent>& calls, const std::unordered_map<uint32_t, uint32_t>& folded_into,
                 std::vector<std::pair<uint32_t, uint32_t>>& launches) {
  if (folded_into.empty()) return;
  auto resolve = [&](uint32_t i) {
    for (auto it = folded_into.find(i); it != folded_into.end(); it = folded_into.find(i)) i = it->second;
    return i;
  };
  std::vector<uint32_t> kept_index(calls.size(), kNoCallEvent);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < calls.size(); ++i) {
    if (folded_into.count(i) != 0) continue;
    kept_index[i] = kept;
    calls[kept++] = calls[i];
  }
  calls.resize(kept);
  for (CallEvent& c : calls) {
    if (c.parent != kNoCallEvent) c.parent = kept_index[resolve(c.parent)];
  }
  for (auto& l : launches) l.first = kept_index[resolve(l.first)];
}

void link_children(std::vector<CallEvent>& calls) {
  // Backwards, so each parent's list ends up in start order.
  for (size_t i = calls.size(); i-- > 0;) {
    uint32_t p = calls[i].parent;
    if (p == kNoCallEvent) continue;
    calls[i].next_sibling = calls[p].first_child;
    calls[p].first_child = static_cast<uint32_t>(i);
  }
}

// `launches`: (opening index of the launching call, correlation id).
void attach_kernels(const analysis::TraceModel& m, const std::vector<uint32_t>& new_index,
                    std::vector<std::pair<uint32_t, uint32_t>> launches, CallEvents& out) {
  if (launches.empty()) return;
  std::unordered_map<uint32_t, std::vector<const analysis::GpuActivity*>> by_correlation;
  for (const analysis::GpuActivity& a : m.gpu) {
    if (analysis::is_device_activity(a)) by_correlation[a.correlation].push_back(&a);
  }
  for (auto& l : launches) l.first = new_index[l.first];
  std::stable_sort(launches.begin(), launches.end());
  std::unordered_map<uint32_t, uint32_t> name_index;  // model string id -> kernel_names
  for (const auto& [call, correlation] : launches) {
    CallEvent& c = out.calls[call];
    if (c.kernel_count == 0) c.first_kernel = static_cast<uint32_t>(out.kernels.size());
    for (const analysis::GpuActivity* a : by_correlation[correlation]) {
      auto [it, inserted] = name_index.emplace(a->name, static_cast<uint32_t>(out.kernel_names.size()));
      if (inserted) out.kernel_names.push_back(m.strings[a->name]);
      out.kernels.push_back(CallKernel{it->second, a->device, a->start_ns, a->end_ns});
      ++c.kernel_count;
    }
  }
}

}  // namespace

CallEvents call_events(const std::string& run_dir, const CallEventsOptions& options) {
  CallEvents out;
  analysis::TraceModel model;
  analysis::RunLoader loader;
  if (!loader.scan(run_dir, &model, &out.error)) return out;
  analysis::symbolize_call_stacks(model);
  out.origin_ns = model.session_start_ns;
  KeyTable keys(model);
  // Grown only by "[memory]" calls: no doubling of 1 M calls' worth.
  out.calls.reserve(loader.slices_scanned());
  std::vector<std::pair<uint32_t, uint32_t>> launches;
  std::unordered_map<uint32_t, uint32_t> folded_into;
  analysis::CallWalk::Sinks sinks{
      [&](const analysis::WalkedCall& c) {
        if (c.index >= out.calls.size()) out.calls.resize(c.index + 1);
        out.calls[c.index] = event_of(c, keys.of(c, out));
      },
      [&](uint32_t call, uint32_t correlation) { launches.emplace_back(call, correlation); },
      [&](uint32_t folded, uint32_t into) { folded_into.emplace(folded, into); }};
  analysis::CallWalk walk(model, std::move(sinks), {.include_steps = options.include_steps});
  auto add = [&](analysis::TraceModel& m, const analysis::Window&) { walk.add_window(m); };
  if (!loader.load(&model, loader.plan_windows(AnalyseOptions{}.window_slices), add, &out.error)) return out;
  walk.finish();
  out.calls.resize(walk.calls());
  drop_folded(out.calls, folded_into, launches);
  std::vector<uint32_t> new_index = sort_by_start(out.calls);
  link_children(out.calls);
  attach_kernels(model, new_index, std::move(launches), out);
  out.warnings = model.warnings;
  return out;
}

}  // namespace trainprof
