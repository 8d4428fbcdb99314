// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/host_usage.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>

#include "raw/host_counters.h"

namespace trainprof::analysis {
namespace {

using namespace trainprof::raw;  // the counter names

enum Table { kCpu, kMem, kDisk, kNetwork, kNone };

// Which table a counter belongs to, and its column's sort key (per-core
// columns after the totals, in core order).
Table table_of(std::string_view name, int* order) {
  *order = -1;
  if (name == kHostCpuCounter || name == kProcessCpuCounter) return kCpu;
  std::string_view prefix = kHostCpuCorePrefix;
  if (name.substr(0, prefix.size()) == prefix && name.ends_with(" (%)")) {
    *order = std::atoi(std::string(name.substr(prefix.size())).c_str());
    return kCpu;
  }
  if (name == kHostMemoryUsedCounter || name == kHostMemoryTotalCounter || name == kProcessRssCounter)
    return kMem;
  if (name == kDiskReadCounter || name == kDiskWriteCounter) return kDisk;
  if (name == kNetworkReceiveCounter || name == kNetworkSendCounter) return kNetwork;
  return kNone;
}

// The loop's waits for data (stage "wait") inside the step, clipped to it.
uint64_t data_wait_ns(const TraceModel& m, const StepWindow& step) {
  uint64_t total = 0;
  for (const DataStageSlice& d : m.data_stages) {
    if (m.name(d.stage) != "wait") continue;
    uint64_t start = std::max(d.start_ns, step.start_ns), end = std::min(d.start_ns + d.dur_ns, step.end_ns);
    if (end > start) total += end - start;
  }
  return total;
}

// The index of `name` among a table's columns.
std::optional<size_t> column_of(const HostUsageTable& table, std::string_view name) {
  for (size_t i = 0; i < table.columns.size(); ++i)
    if (table.columns[i] == name) return i;
  return std::nullopt;
}

}  // namespace

std::vector<HostUsageTable> host_usage_tables(const TraceModel& m) {
  std::vector<HostUsageTable> tables = {{"host_cpu_usage.csv", {}, {}, {}},
                                        {"host_mem_usage.csv", {}, {}, {}},
                                        {"host_disk_usage.csv", {}, {}, {}},
                                        {"host_network_usage.csv", {}, {}, {}}};
  // Columns: (order, first seen) per table, by name id.
  std::vector<std::map<uint32_t, std::pair<int, size_t>>> columns(tables.size());
  std::vector<std::vector<const CounterSample*>> samples(tables.size());
  for (const CounterSample& c : m.counters) {
    int order = -1;
    Table t = table_of(m.name(c.name), &order);
    if (t == kNone) continue;
    columns[t].try_emplace(c.name, order, columns[t].size());
    samples[t].push_back(&c);
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    std::vector<std::pair<std::pair<int, size_t>, uint32_t>> ordered;
    for (const auto& [name, key] : columns[t]) ordered.push_back({key, name});
    std::sort(ordered.begin(), ordered.end());
    std::map<uint32_t, size_t> column_of;
    for (const auto& [key, name] : ordered) {
      column_of[name] = tables[t].columns.size();
      tables[t].columns.push_back(m.name(name));
    }
    std::stable_sort(samples[t].begin(), samples[t].end(),
                     [](const CounterSample* a, const CounterSample* b) { return a->ts_ns < b->ts_ns; });
    HostUsageTable& table = tables[t];
    for (const CounterSample* c : samples[t]) {
      if (table.ts_ns.empty() || table.ts_ns.back() != c->ts_ns) {
        table.ts_ns.push_back(c->ts_ns);
        table.values.emplace_back(table.columns.size(), std::nan(""));
      }
      table.values.back()[column_of[c->name]] = c->value;
    }
  }
  return tables;
}

HostBottlenecks host_bottlenecks(const TraceModel& m, const std::vector<HostUsageTable>& tables) {
  HostBottlenecks b;
  // (timestamp, value) in time order: the tables' rows are.
  std::vector<std::pair<uint64_t, double>> cpu, memory_percent;
  const HostUsageTable& cpu_table = tables[kCpu];
  if (std::optional<size_t> total = column_of(cpu_table, kHostCpuCounter)) {
    for (size_t r = 0; r < cpu_table.ts_ns.size(); ++r) {
      double v = cpu_table.values[r][*total];
      if (!std::isnan(v)) cpu.push_back({cpu_table.ts_ns[r], v});
    }
  }
  const HostUsageTable& mem = tables[kMem];
  std::optional<size_t> used = column_of(mem, kHostMemoryUsedCounter),
                        all = column_of(mem, kHostMemoryTotalCounter);
  for (size_t r = 0; used && all && r < mem.ts_ns.size(); ++r) {
    double u = mem.values[r][*used], t = mem.values[r][*all];
    if (!std::isnan(u) && t > 0) memory_percent.push_back({mem.ts_ns[r], 100 * u / t});
  }
  b.samples = cpu.size();
  auto in_step = [](const std::vector<std::pair<uint64_t, double>>& series, const StepWindow& s) {
    auto first = std::lower_bound(series.begin(), series.end(), std::make_pair(s.start_ns, -1e300));
    auto last = std::lower_bound(series.begin(), series.end(), std::make_pair(s.end_ns, 1e300));
    return std::make_pair(first, last);
  };
  for (const StepWindow& s : m.steps) {
    auto [first, last] = in_step(cpu, s);
    if (first != last) {
      double sum = 0;
      for (auto it = first; it != last; ++it) sum += it->second;
      double mean = sum / static_cast<double>(last - first);
      if (mean >= kSaturatedCpuPercent) {
        b.cpu_saturated_steps.push_back(s.number);
        b.cpu_saturated_percent.push_back(mean);
        b.cpu_saturated_data_wait_ns.push_back(data_wait_ns(m, s));
      }
    }
    auto [mfirst, mlast] = in_step(memory_percent, s);
    if (std::any_of(mfirst, mlast, [](const auto& p) { return p.second >= kMemoryPressurePercent; }))
      b.memory_pressure_steps.push_back(s.number);
  }
  return b;
}

}  // namespace trainprof::analysis
