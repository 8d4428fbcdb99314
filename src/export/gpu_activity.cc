// Copyright trainprof authors.
#include "export/gpu_activity.h"

#include <charconv>
#include <unordered_map>

#include "raw/format.h"

namespace trainprof::exporter {
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

}  // namespace

bool on_device(const analysis::GpuActivity& a) {
  return a.device >= 0 && (a.kind == raw::EventKind::kGpuKernel || a.kind == raw::EventKind::kGpuMemcpy ||
                           a.kind == raw::EventKind::kGpuMemset);
}

const char* gpu_category(const analysis::GpuActivity& a) {
  switch (a.kind) {
    case raw::EventKind::kGpuKernel: return "kernel";
    case raw::EventKind::kGpuMemcpy: return "gpu_memcpy";
    case raw::EventKind::kGpuMemset: return "gpu_memset";
    case raw::EventKind::kGpuApi:
      return a.subkind == static_cast<uint32_t>(raw::GpuApiKind::kDriver) ? "cuda_driver" : "cuda_runtime";
    default: return "cuda_sync";
  }
}

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

std::vector<uint32_t> gpu_launches(const analysis::TraceModel& m) {
  std::unordered_map<uint32_t, uint32_t> by_correlation;
  for (uint32_t i = 0; i < m.gpu.size(); ++i) {
    const analysis::GpuActivity& a = m.gpu[i];
    if (a.kind != raw::EventKind::kGpuApi) continue;
    auto [it, inserted] = by_correlation.emplace(a.correlation, i);
    if (!inserted && a.subkind == static_cast<uint32_t>(raw::GpuApiKind::kRuntime)) it->second = i;
  }
  std::vector<uint32_t> launch(m.gpu.size(), kNoLaunch);
  if (by_correlation.empty()) return launch;
  for (uint32_t i = 0; i < m.gpu.size(); ++i) {
    if (!on_device(m.gpu[i])) continue;
    auto it = by_correlation.find(m.gpu[i].correlation);
    if (it != by_correlation.end()) launch[i] = it->second;
  }
  return launch;
}

}  // namespace trainprof::exporter
