// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// key_averages (include/trainprof/key_averages.h): the run loaded window by
// window through the per-call walk only, each call summed into its slice key as
// it closes, then the keys grouped as asked.
#include "trainprof/key_averages.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

#include "analysis/call_walk.h"
#include "analysis/passes.h"
#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "pipeline/key_average_merge.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

// The first `n` ';'-separated frames of `stack` (innermost first).
std::string innermost_frames(std::string_view stack, int n) {
  size_t end = 0;
  for (int i = 0; i < n; ++i) {
    end = stack.find(';', i == 0 ? 0 : end + 1);
    if (end == std::string_view::npos) return std::string(stack);
  }
  return std::string(stack.substr(0, end));
}

// One call as a row of its own.
KeyAverage row_of(const analysis::WalkedCall& c) {
  KeyAverage row;
  row.first_start_ns = c.start_ns;
  row.count = 1;
  row.total_ns = c.end_ns - c.start_ns;
  row.self_ns = c.self_ns;
  row.device_total_ns = c.device_ns;
  row.device_self_ns = c.self_device_ns;
  row.cpu_memory = c.cpu_memory;
  row.self_cpu_memory = c.self_cpu_memory;
  row.device_memory = c.device_memory;
  row.self_device_memory = c.self_device_memory;
  return row;
}

// `by_key`: the calls summed per slice key; `memory_only`: the "[memory]" calls.
std::vector<KeyAverage> group_keys(const analysis::TraceModel& m, std::vector<KeyAverage> by_key,
                                   const KeyAverage& memory_only, const KeyAveragesOptions& options) {
  std::map<std::tuple<uint32_t, std::string, std::string>, KeyAverage> by_group;
  for (size_t k = 0; k < m.keys.size() && k < by_key.size(); ++k) {
    KeyAverage& row = by_key[k];
    if (row.count == 0) continue;
    const analysis::SliceKey& key = m.keys[k];
    std::string shapes, stack;
    if (options.group_by_input_shape && key.inputs != 0) shapes = analysis::input_dims(m, key.inputs);
    if (options.group_by_stack_n > 0 && key.inputs != 0) {
      auto it = m.call_stacks.find(key.inputs);
      if (it != m.call_stacks.end()) stack = innermost_frames(it->second, options.group_by_stack_n);
    }
    row.flops = key.inputs != 0 ? row.count * analysis::input_flops(m, key.inputs) : 0;
    // Every step is one row, torch.profiler's "ProfilerStep*"; 0 never names one.
    KeyAverage& group = by_group[{key.is_step ? 0 : key.name, shapes, stack}];
    if (group.count == 0) {
      group.name = key.is_step ? "ProfilerStep*" : m.strings[key.name];
      group.input_shapes = std::move(shapes);
      group.stack = std::move(stack);
      group.is_operator = key.is_op;
    }
    pipeline::merge_key_average(group, row);
  }
  std::vector<KeyAverage> rows;
  rows.reserve(by_group.size() + 1);
  for (auto& entry : by_group) rows.push_back(std::move(entry.second));
  if (memory_only.count > 0) rows.push_back(memory_only);
  std::stable_sort(rows.begin(), rows.end(), [](const KeyAverage& a, const KeyAverage& b) {
    return std::tie(b.self_ns, a.name) < std::tie(a.self_ns, b.name);
  });
  return rows;
}

}  // namespace

KeyAverages key_averages(const std::string& run_dir, const KeyAveragesOptions& options) {
  KeyAverages out;
  analysis::TraceModel model;
  analysis::RunLoader loader;
  if (!loader.scan(run_dir, &model, &out.error)) return out;
  if (options.group_by_stack_n > 0) analysis::symbolize_call_stacks(model);
  std::vector<KeyAverage> by_key(model.keys.size());
  // Per key, the key of its earliest call's parent (named once, at the end).
  std::vector<uint32_t> first_parent_key(model.keys.size(), analysis::kNoCall);
  KeyAverage memory_only;
  memory_only.name = "[memory]";
  auto sum = [&](const analysis::WalkedCall& c) {
    if (c.key == analysis::kMemoryOnlyKey) {
      pipeline::merge_key_average(memory_only, row_of(c));
      return;
    }
    if (c.key >= by_key.size()) {
      by_key.resize(c.key + 1);
      first_parent_key.resize(c.key + 1, analysis::kNoCall);
    }
    KeyAverage& row = by_key[c.key];
    if (row.count == 0 || c.start_ns < row.first_start_ns) first_parent_key[c.key] = c.parent_key;
    pipeline::merge_key_average(row, row_of(c));
  };
  analysis::CallWalk walk(model, {sum, nullptr, nullptr}, {.include_steps = options.include_steps});
  auto add = [&](analysis::TraceModel& m, const analysis::Window&) { walk.add_window(m); };
  if (!loader.load(&model, loader.plan_windows(AnalyseOptions{}.window_slices), add, &out.error)) return out;
  walk.finish();
  for (size_t k = 0; k < by_key.size(); ++k) {
    if (first_parent_key[k] == analysis::kNoCall) continue;
    const analysis::SliceKey& parent = model.keys[first_parent_key[k]];
    by_key[k].first_parent = parent.is_step ? "ProfilerStep*" : model.strings[parent.name];
  }
  out.rows = group_keys(model, std::move(by_key), memory_only, options);
  out.warnings = model.warnings;
  return out;
}

namespace pipeline {

void merge_key_average(KeyAverage& into, const KeyAverage& row) {
  if (into.count == 0 || row.first_start_ns < into.first_start_ns) {
    into.first_start_ns = row.first_start_ns;
    into.first_parent = row.first_parent;
  }
  into.count += row.count;
  into.total_ns += row.total_ns;
  into.self_ns += row.self_ns;
  into.device_total_ns += row.device_total_ns;
  into.device_self_ns += row.device_self_ns;
  into.flops += row.flops;
  into.cpu_memory += row.cpu_memory;
  into.self_cpu_memory += row.self_cpu_memory;
  into.device_memory += row.device_memory;
  into.self_device_memory += row.self_device_memory;
}

}  // namespace pipeline
}  // namespace trainprof
