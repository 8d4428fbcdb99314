// Copyright trainprof authors. Per-name statistics of ranges and operators.
#include <algorithm>

#include "analysis/passes.h"

namespace trainprof::analysis {

std::vector<NameTotals> totals_by_name(const TraceModel& m) {
  std::vector<NameTotals> by_name(m.strings.size());
  for (const Slice& s : m.slices) {
    const SliceKey& key = m.keys[s.key];
    if (key.is_step) continue;
    NameTotals& t = by_name[key.name];
    uint64_t d = m.duration(s);
    if (t.count == 0 || d < t.min_ns) t.min_ns = d;
    t.max_ns = std::max(t.max_ns, d);
    t.total_ns += d;
    ++t.count;
  }
  for (uint32_t k = 0; k < m.keys.size(); ++k) {
    if (!m.keys[k].is_step) by_name[m.keys[k].name].self_ns += m.self_by_key[k];
  }
  return by_name;
}

std::vector<OpStatisticRow> op_statistics(const TraceModel& m, const std::vector<NameTotals>& totals) {
  uint64_t grand_total = 0;
  for (const NameTotals& t : totals) grand_total += t.total_ns;
  std::vector<OpStatisticRow> rows;
  for (uint32_t name = 0; name < totals.size(); ++name) {
    const NameTotals& t = totals[name];
    if (t.count == 0) continue;
    double ratio =
        grand_total == 0 ? 0 : 100.0 * static_cast<double>(t.total_ns) / static_cast<double>(grand_total);
    rows.push_back(OpStatisticRow{m.name(name), t.count, t.total_ns, t.min_ns, t.max_ns, t.self_ns, ratio});
  }
  std::sort(rows.begin(), rows.end(), [](const OpStatisticRow& a, const OpStatisticRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name < b.name;
  });
  return rows;
}

std::vector<OperatorDetailRow> operator_details(const TraceModel& m, const std::vector<NameTotals>& totals) {
  // Input shapes arrive with framework operators (LibTorch collector); user
  // ranges have none, so the key is the name for now.
  std::vector<OperatorDetailRow> rows;
  for (uint32_t name = 0; name < totals.size(); ++name) {
    const NameTotals& t = totals[name];
    if (t.count == 0) continue;
    rows.push_back(OperatorDetailRow{m.name(name), "", "", t.count, t.self_ns, t.total_ns});
  }
  std::sort(rows.begin(), rows.end(), [](const OperatorDetailRow& a, const OperatorDetailRow& b) {
    if (a.host_self_ns != b.host_self_ns) return a.host_self_ns > b.host_self_ns;
    return a.name < b.name;
  });
  return rows;
}

}  // namespace trainprof::analysis
