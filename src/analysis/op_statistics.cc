// Copyright trainprof authors. Per-name statistics of ranges and operators.
#include <algorithm>

#include "analysis/passes.h"

namespace trainprof::analysis {

std::vector<OpStatisticRow> op_statistics(const TraceModel& m) {
  std::vector<OpStatisticRow> by_name(m.strings.size());  // indexed by name id
  uint64_t grand_total = 0;
  for (const Slice& s : m.slices) {
    const SliceKey& key = m.keys[s.key];
    if (key.is_step) continue;
    OpStatisticRow& row = by_name[key.name];
    uint64_t d = m.duration(s);
    if (row.count == 0 || d < row.min_ns) row.min_ns = d;
    row.max_ns = std::max(row.max_ns, d);
    row.total_ns += d;
    ++row.count;
    grand_total += d;
  }
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    if (!m.keys[k].is_step) by_name[m.keys[k].name].self_ns += m.self_by_key[k];
  }
  std::vector<OpStatisticRow> rows;
  for (uint32_t name = 0; name < by_name.size(); ++name) {
    OpStatisticRow& row = by_name[name];
    if (row.count == 0) continue;
    row.name = m.name(name);
    row.ratio_percent =
        grand_total == 0 ? 0 : 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(grand_total);
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const OpStatisticRow& a, const OpStatisticRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name < b.name;
  });
  return rows;
}

std::vector<OperatorDetailRow> operator_details(const TraceModel& m) {
  // Input shapes arrive with framework operators (LibTorch collector); user
  // ranges have none, so the key is the name for now.
  std::vector<OperatorDetailRow> by_name(m.strings.size());  // indexed by name id
  for (const Slice& s : m.slices) {
    const SliceKey& key = m.keys[s.key];
    if (key.is_step) continue;
    OperatorDetailRow& row = by_name[key.name];
    ++row.calls;
    row.host_total_ns += m.duration(s);
  }
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    if (!m.keys[k].is_step) by_name[m.keys[k].name].host_self_ns += m.self_by_key[k];
  }
  std::vector<OperatorDetailRow> rows;
  for (uint32_t name = 0; name < by_name.size(); ++name) {
    OperatorDetailRow& row = by_name[name];
    if (row.calls == 0) continue;
    row.name = m.name(name);
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const OperatorDetailRow& a, const OperatorDetailRow& b) {
    if (a.host_self_ns != b.host_self_ns) return a.host_self_ns > b.host_self_ns;
    return a.name < b.name;
  });
  return rows;
}

}  // namespace trainprof::analysis
