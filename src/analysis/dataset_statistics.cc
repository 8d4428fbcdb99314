// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Data pipeline statistics (dataset.csv).
#include <algorithm>
#include <map>
#include <tuple>

#include "analysis/passes.h"
#include "trainprof/dataset.h"

namespace trainprof::analysis {
namespace {

int stage_rank(std::string_view stage) {
  if (stage == kStageDatasetGet) return 0;
  if (stage == kStageTransform) return 1;
  if (stage == kStageCollate) return 2;
  if (stage == kStageLoaderWait) return 3;
  return 4;
}

}  // namespace

std::vector<DatasetRow> dataset_statistics(const TraceModel& m) {
  struct Totals {
    uint64_t occurrences = 0;
    uint64_t total_ns = 0;
    uint64_t info_at = 0;
    uint32_t custom_info = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Totals> by_operation_stage;
  for (const DataStageSlice& d : m.data_stages) {
    Totals& t = by_operation_stage[{d.operation, d.stage}];
    ++t.occurrences;
    t.total_ns += d.dur_ns;
    if (d.custom_info != 0 && d.start_ns >= t.info_at) {
      t.info_at = d.start_ns;
      t.custom_info = d.custom_info;
    }
  }
  std::vector<DatasetRow> rows;
  for (const auto& [key, t] : by_operation_stage) {
    rows.push_back(DatasetRow{m.name(key.first), m.name(key.second), t.occurrences, t.total_ns,
                              t.custom_info != 0 ? m.name(t.custom_info) : std::string()});
  }
  std::sort(rows.begin(), rows.end(), [](const DatasetRow& a, const DatasetRow& b) {
    return std::make_tuple(stage_rank(a.stage), b.total_ns, a.stage, a.operation) <
           std::make_tuple(stage_rank(b.stage), a.total_ns, b.stage, b.operation);
  });
  return rows;
}

}  // namespace trainprof::analysis
