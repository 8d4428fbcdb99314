// Copyright trainprof authors. Per-name statistics of ranges and operators.
#include <algorithm>
#include <unordered_map>

#include "analysis/passes.h"

namespace trainprof::analysis {
namespace {

bool is_operator_like(const Slice& s) {
  return !s.is_step;
}

}  // namespace

std::vector<OpStatisticRow> op_statistics(const TraceModel& m) {
  std::vector<OpStatisticRow> by_name(m.strings.size());  // indexed by name id
  uint64_t grand_total = 0;
  for (const Slice& s : m.slices) {
    if (!is_operator_like(s)) continue;
    OpStatisticRow& row = by_name[s.name];
    uint64_t d = s.duration();
    if (row.count == 0 || d < row.min_ns) row.min_ns = d;
    row.max_ns = std::max(row.max_ns, d);
    row.total_ns += d;
    row.self_ns += s.self_ns;
    ++row.count;
    grand_total += d;
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
  std::vector<OperatorDetailRow> by_key(m.strings.size());  // indexed by name id
  for (const Slice& s : m.slices) {
    if (!is_operator_like(s)) continue;
    OperatorDetailRow& row = by_key[s.name];
    ++row.calls;
    row.host_self_ns += s.self_ns;
    row.host_total_ns += s.duration();
  }
  std::vector<OperatorDetailRow> rows;
  for (uint32_t name = 0; name < by_key.size(); ++name) {
    OperatorDetailRow& row = by_key[name];
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
