// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Per-name statistics of ranges and operators.
#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "analysis/passes.h"

namespace trainprof::analysis {

void add_totals(const TraceModel& m, std::vector<SliceTotals>* by_key) {
  by_key->resize(m.keys.size());
  for (const ThreadSlices& thread : m.threads) {
    for (size_t i = thread.first_own; i < thread.slices.size(); ++i) {
      const Slice& s = thread.slices[i];
      SliceTotals& t = (*by_key)[s.key];
      uint64_t d = m.duration(s);
      if (t.count == 0 || d < t.min_ns) t.min_ns = d;
      t.max_ns = std::max(t.max_ns, d);
      t.total_ns += d;
      ++t.count;
    }
  }
}

void finish_totals(const TraceModel& m, std::vector<SliceTotals>* by_key) {
  by_key->resize(m.keys.size());
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    SliceTotals& t = (*by_key)[k];
    t.self_ns = k < m.self_by_key.size() ? m.self_by_key[k] : 0;
    if (m.keys[k].inputs != 0) t.flops = t.count * input_flops(m, m.keys[k].inputs);
    t.device_self_ns = k < m.device_self_by_key.size() ? m.device_self_by_key[k] : 0;
    t.device_total_ns = k < m.device_total_by_key.size() ? m.device_total_by_key[k] : 0;
    if (m.keys[k].is_op && m.operator_sampling > 1) {
      // About one call in N was recorded: the estimate of all calls. Each
      // call's own time (min, max, mean) is as recorded.
      uint64_t n = m.operator_sampling;
      t.count *= n;
      t.total_ns *= n;
      t.self_ns *= n;
      t.flops *= n;
      t.device_self_ns *= n;
      t.device_total_ns *= n;
    }
  }
}

std::vector<SliceTotals> totals_by_key(const TraceModel& m) {
  std::vector<SliceTotals> by_key;
  add_totals(m, &by_key);
  finish_totals(m, &by_key);
  return by_key;
}

void merge_into(SliceTotals& into, const SliceTotals& t) {
  if (t.count == 0) return;
  if (into.count == 0 || t.min_ns < into.min_ns) into.min_ns = t.min_ns;
  into.max_ns = std::max(into.max_ns, t.max_ns);
  into.total_ns += t.total_ns;
  into.self_ns += t.self_ns;
  into.flops += t.flops;
  into.count += t.count;
  into.device_self_ns += t.device_self_ns;
  into.device_total_ns += t.device_total_ns;
}

namespace {

// Rows of `totals` (by name id), with the ratio to their sum, largest first.
void add_rows(const TraceModel& m, const std::vector<SliceTotals>& totals, const char* core_type,
              std::vector<OpStatisticRow>* out) {
  uint64_t grand_total = 0;
  for (const SliceTotals& t : totals) grand_total += t.total_ns;
  std::vector<OpStatisticRow> rows;
  for (uint32_t name = 0; name < totals.size(); ++name) {
    const SliceTotals& t = totals[name];
    if (t.count == 0) continue;
    double ratio =
        grand_total == 0 ? 0 : 100.0 * static_cast<double>(t.total_ns) / static_cast<double>(grand_total);
    rows.push_back(OpStatisticRow{m.name(name), core_type, t.count, t.total_ns, t.min_ns, t.max_ns, t.self_ns,
                                  ratio, t.flops});
  }
  std::sort(rows.begin(), rows.end(), [](const OpStatisticRow& a, const OpStatisticRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name < b.name;
  });
  out->insert(out->end(), rows.begin(), rows.end());
}

}  // namespace

std::string_view input_dims(const TraceModel& m, uint32_t inputs) {
  std::string_view text = m.name(inputs);
  return text.substr(0, text.find(raw::kInputsSeparator));
}

namespace {

// Field `index` of an inputs string (fields are separated by kInputsSeparator).
std::string_view inputs_field(const TraceModel& m, uint32_t inputs, int index) {
  std::string_view text = m.name(inputs);
  for (; index > 0; --index) {
    size_t sep = text.find(raw::kInputsSeparator);
    if (sep == std::string_view::npos) return {};
    text.remove_prefix(sep + 1);
  }
  return text.substr(0, text.find(raw::kInputsSeparator));
}

}  // namespace

std::string_view input_types(const TraceModel& m, uint32_t inputs) {
  return inputs_field(m, inputs, 1);
}

std::string_view input_stack(const TraceModel& m, uint32_t inputs) {
  return inputs_field(m, inputs, 3);
}

std::string_view input_module(const TraceModel& m, uint32_t inputs) {
  return inputs_field(m, inputs, 4);
}

uint64_t input_flops(const TraceModel& m, uint32_t inputs) {
  std::string_view text = inputs_field(m, inputs, 2);
  uint64_t flops = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), flops);
  return ec == std::errc() && end == text.data() + text.size() ? flops : 0;
}

std::vector<OpStatisticRow> op_statistics(const TraceModel& m, const std::vector<SliceTotals>& by_key) {
  std::vector<SliceTotals> totals(m.strings.size());  // by name id; steps excluded
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    if (!m.keys[k].is_step) merge_into(totals[m.keys[k].name], by_key[k]);
  }
  std::vector<OpStatisticRow> rows;
  add_rows(m, totals, "HOST", &rows);
  // What ran on the GPUs: a kernel has no children, its self time is its time.
  std::vector<SliceTotals> device(m.gpu.empty() ? 0 : m.strings.size());
  for (const GpuActivity& a : m.gpu) {
    if (!is_device_activity(a)) continue;
    uint64_t d = a.end_ns - a.start_ns;
    merge_into(device[a.name], SliceTotals{1, d, d, d, d, 0, 0, 0});
  }
  add_rows(m, device, "GPU", &rows);
  return rows;
}

std::vector<OperatorDetailRow> operator_details(const TraceModel& m, const std::vector<SliceTotals>& by_key) {
  // One row per (name, input shapes, call stack, module hierarchy) over all
  // threads; steps excluded.
  std::map<std::tuple<uint32_t, std::string_view, std::string_view, std::string_view>, SliceTotals> groups;
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    const SliceKey& key = m.keys[k];
    if (key.is_step) continue;
    std::string_view dims, stack, module;
    if (key.inputs != 0) {
      dims = input_dims(m, key.inputs);
      module = input_module(m, key.inputs);
      if (auto it = m.call_stacks.find(key.inputs); it != m.call_stacks.end()) stack = it->second;
    }
    merge_into(groups[{key.name, dims, stack, module}], by_key[k]);
  }
  std::vector<OperatorDetailRow> rows;
  for (const auto& [group, t] : groups) {
    if (t.count == 0) continue;
    const auto& [name, dims, stack, module] = group;
    rows.push_back(OperatorDetailRow{m.name(name), std::string(dims), std::string(stack), t.count, t.self_ns,
                                     t.total_ns, t.flops, std::string(module), t.device_self_ns,
                                     t.device_total_ns});
  }
  std::sort(rows.begin(), rows.end(), [](const OperatorDetailRow& a, const OperatorDetailRow& b) {
    if (a.host_self_ns != b.host_self_ns) return a.host_self_ns > b.host_self_ns;
    return std::tie(a.name, a.input_shapes, a.call_stack, a.module_hierarchy) <
           std::tie(b.name, b.input_shapes, b.call_stack, b.module_hierarchy);
  });
  return rows;
}

}  // namespace trainprof::analysis
