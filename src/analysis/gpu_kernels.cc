// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
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

uint64_t number(std::string_view text) {
  uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// "x,y,z" into out[0..2]; missing parts stay 0.
void triple(std::string_view text, uint64_t out[3]) {
  for (int i = 0; i < 3; ++i) {
    size_t comma = text.find(',');
    out[i] = number(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
}

std::string joined(const uint64_t v[3]) {
  return std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]);
}

}  // namespace

std::optional<KernelGeometry> kernel_geometry(std::string_view detail) {
  std::string_view f[5];
  for (int i = 0; i < 5; ++i) {
    size_t sep = detail.find(raw::kGpuDetailSeparator);
    f[i] = detail.substr(0, sep);
    if (sep == std::string_view::npos) {
      if (i < 4) return std::nullopt;
      break;
    }
    detail.remove_prefix(sep + 1);
  }
  KernelGeometry g;
  triple(f[0], g.grid);
  triple(f[1], g.block);
  g.registers = number(f[2]);
  g.static_shared = number(f[3]);
  g.dynamic_shared = number(f[4]);
  return g;
}

bool is_nccl_kernel(std::string_view name) {
  if (name.starts_with("void ")) name.remove_prefix(5);
  if (name.starts_with("_Z")) {  // mangled: _Z, then the name's length
    name.remove_prefix(2);
    while (!name.empty() && name.front() >= '0' && name.front() <= '9') name.remove_prefix(1);
  }
  return name.starts_with("nccl");
}

std::vector<KernelRow> kernel_rows(const TraceModel& m) {
  std::unordered_map<uint32_t, const GpuActivity*> launch = launches_by_correlation(m);
  const std::vector<StepWindow> steps = steps_by_start(m.steps);
  std::vector<KernelRow> rows;
  std::map<std::pair<int32_t, uint32_t>, uint64_t> stream_end;  // (device, stream) -> last end
  for (const GpuActivity& a : m.gpu) {
    bool kernel = a.kind == raw::EventKind::kGpuKernel;
    if (!kernel && a.kind != raw::EventKind::kGpuMemcpy && a.kind != raw::EventKind::kGpuMemset) continue;
    uint64_t& last_end = stream_end[{a.device, a.stream}];
    uint64_t wait = last_end != 0 && a.start_ns > last_end ? a.start_ns - last_end : 0;
    last_end = std::max(last_end, a.end_ns);
    if (!kernel) continue;
    KernelRow row;
    row.device = a.device;
    row.stream = a.stream;
    row.name = m.name(a.name);
    row.start_ns = a.start_ns;
    row.dur_ns = a.end_ns - a.start_ns;
    row.wait_ns = wait;
    row.correlation = a.correlation;
    if (std::optional<KernelGeometry> g = kernel_geometry(m.name(a.detail))) {
      row.grid = joined(g->grid);
      row.block = joined(g->block);
      row.registers = static_cast<uint32_t>(g->registers);
      row.static_shared = g->static_shared;
      row.dynamic_shared = g->dynamic_shared;
      row.blocks = g->grid[0] * g->grid[1] * g->grid[2];
    }
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
    row.graph = a.graph;
    row.graph_node = a.graph_node;
    if (uint32_t captured = graph_capture_operator(m, a); captured != 0)
      row.capture_operator = m.name(captured);
    row.step = step_at(steps, row.launch_ns != 0 ? row.launch_ns : row.start_ns);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace trainprof::analysis
