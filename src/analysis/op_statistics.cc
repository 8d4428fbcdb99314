// Copyright trainprof authors. Per-name statistics of ranges and operators.
#include <algorithm>
#include <unordered_map>

#include "analysis/passes.h"

namespace trainprof::analysis {
namespace {

bool is_operator_like(const Slice& s) {
  return s.kind != SliceKind::kStep;
}

}  // namespace

std::vector<OpStatisticRow> op_statistics(const TraceModel& m) {
  std::unordered_map<uint32_t, OpStatisticRow> by_name;
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
  rows.reserve(by_name.size());
  for (auto& [name, row] : by_name) {
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
  std::unordered_map<uint32_t, OperatorDetailRow> by_key;
  for (const Slice& s : m.slices) {
    if (!is_operator_like(s)) continue;
    OperatorDetailRow& row = by_key[s.name];
    ++row.calls;
    row.host_self_ns += s.self_ns;
    row.host_total_ns += s.duration();
  }
  std::vector<OperatorDetailRow> rows;
  for (auto& [name, row] : by_key) {
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
