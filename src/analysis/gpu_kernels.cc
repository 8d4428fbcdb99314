// Copyright trainprof authors.
#include "analysis/gpu_kernels.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analysis/gpu_launches.h"
#include "analysis/passes.h"

namespace trainprof::analysis {
namespace {

// The step whose window holds `ns` (-1: none).
int64_t step_at(const TraceModel& m, uint64_t ns) {
  for (const StepWindow& w : m.steps) {
    if (ns >= w.start_ns && ns < w.end_ns) return w.number;
  }
  return -1;
}

uint64_t to_u64(std::string_view text) {
  uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// "gx,gy,gz\x1f bx,by,bz\x1f registers\x1f static\x1f dynamic" (raw/format.h).
void parse_geometry(std::string_view detail, KernelRow& row) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    size_t sep = detail.find(raw::kGpuDetailSeparator, start);
    fields.push_back(detail.substr(start, sep == std::string_view::npos ? sep : sep - start));
    if (sep == std::string_view::npos) break;
    start = sep + 1;
  }
  if (fields.size() < 5) return;
  row.grid = fields[0];
  row.block = fields[1];
  row.registers = static_cast<uint32_t>(to_u64(fields[2]));
  row.static_shared = to_u64(fields[3]);
  row.dynamic_shared = to_u64(fields[4]);
  row.blocks = 1;
  size_t from = 0;
  for (int i = 0; i < 3; ++i) {
    size_t comma = fields[0].find(',', from);
    row.blocks *= to_u64(fields[0].substr(from, comma == std::string_view::npos ? comma : comma - from));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
}

}  // namespace

std::vector<KernelRow> kernel_rows(const TraceModel& m) {
  std::unordered_map<uint32_t, const GpuActivity*> launch = launches_by_correlation(m);
  std::vector<KernelRow> rows;
  std::map<std::pair<int32_t, uint32_t>, uint64_t> stream_end;  // (device, stream) -> last end
  for (const GpuActivity& a : m.gpu) {
    bool kernel = a.kind == raw::EventKind::kGpuKernel;
    if (!kernel && a.kind != raw::EventKind::kGpuMemcpy && a.kind != raw::EventKind::kGpuMemset) continue;
    uint64_t& last_end = stream_end[{a.device, a.stream}];
    uint64_t wait = last_end != 0 && a.start_ns > last_end ? a.start_ns - last_end : 0;
    last_end = std::max(last_end, a.end_ns);
    if (!kernel) continue;
    if (m.selection.active && (a.start_ns < m.selection.begin_ns || a.start_ns >= m.selection.end_ns))
      continue;
    KernelRow row;
    row.device = a.device;
    row.stream = a.stream;
    row.name = m.name(a.name);
    row.start_ns = a.start_ns;
    row.dur_ns = a.end_ns - a.start_ns;
    row.wait_ns = wait;
    row.correlation = a.correlation;
    parse_geometry(m.name(a.detail), row);
    auto it = launch.find(a.correlation);
    if (it != launch.end()) {
      row.launch_api = m.name(it->second->name);
      row.launch_ns = it->second->start_ns;
      row.launch_thread = it->second->thread;
    }
    if (auto owner = m.launcher_by_correlation.find(a.correlation);
        owner != m.launcher_by_correlation.end()) {
      const SliceKey& key = m.keys[owner->second];
      row.type = m.name(key.name);
      if (key.inputs != 0) {
        row.input_shapes = input_dims(m, key.inputs);
        row.input_types = input_types(m, key.inputs);
      }
    }
    row.step = step_at(m, row.launch_ns != 0 ? row.launch_ns : row.start_ns);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace trainprof::analysis
