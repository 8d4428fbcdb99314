// Copyright trainprof authors. key_averages (include/trainprof/key_averages.h):
// the run loaded window by window through the self-time, launch and totals
// passes only, then the slice keys grouped as asked.
#include "trainprof/key_averages.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

#include "analysis/gpu_launches.h"
#include "analysis/passes.h"
#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
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

std::vector<KeyAverage> group_keys(const analysis::TraceModel& m,
                                   const std::vector<analysis::SliceTotals>& totals,
                                   const KeyAveragesOptions& options) {
  // Per (name, shapes, stack): the first key's, for whether it is an operator.
  std::map<std::tuple<uint32_t, std::string, std::string>, std::pair<analysis::SliceTotals, bool>> by_group;
  for (size_t k = 0; k < m.keys.size() && k < totals.size(); ++k) {
    if (totals[k].count == 0) continue;
    const analysis::SliceKey& key = m.keys[k];
    std::string shapes, stack;
    if (options.group_by_input_shape && key.inputs != 0) shapes = analysis::input_dims(m, key.inputs);
    if (options.group_by_stack_n > 0 && key.inputs != 0) {
      auto it = m.call_stacks.find(key.inputs);
      if (it != m.call_stacks.end()) stack = innermost_frames(it->second, options.group_by_stack_n);
    }
    auto& group = by_group[{key.name, std::move(shapes), std::move(stack)}];
    if (group.first.count == 0) group.second = key.is_op;
    analysis::merge_into(group.first, totals[k]);
  }
  std::vector<KeyAverage> rows;
  rows.reserve(by_group.size());
  for (auto& [group, value] : by_group) {
    const auto& [name, shapes, stack] = group;
    const auto& [t, is_operator] = value;
    rows.push_back(KeyAverage{m.strings[name], shapes, stack, is_operator, t.count, t.total_ns, t.self_ns,
                              t.device_total_ns, t.device_self_ns, t.flops});
  }
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
  analysis::SelfTimeAccumulator self(model);
  analysis::LaunchAttribution launches(model);
  std::vector<analysis::SliceTotals> totals;
  auto add = [&](analysis::TraceModel& m, const analysis::Window&) {
    self.add_window(m);
    launches.add_window(m);
    analysis::add_totals(m, &totals);
  };
  if (!loader.load(&model, loader.plan_windows(AnalyseOptions{}.window_slices), add, &out.error)) return out;
  self.finish(model);
  launches.finish(model);
  analysis::finish_totals(model, &totals);
  out.rows = group_keys(model, totals, options);
  out.warnings = model.warnings;
  return out;
}

}  // namespace trainprof
