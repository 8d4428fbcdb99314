// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/gpu_activity.h"

#include <unordered_map>

#include "analysis/gpu_launches.h"
#include "raw/format.h"

namespace trainprof::exporter {

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

std::vector<uint32_t> gpu_launches(const analysis::TraceModel& m) {
  std::vector<uint32_t> launch(m.gpu.size(), kNoLaunch);
  std::unordered_map<uint32_t, const analysis::GpuActivity*> by_correlation =
      analysis::launches_by_correlation(m);
  if (by_correlation.empty()) return launch;
  for (uint32_t i = 0; i < m.gpu.size(); ++i) {
    if (!analysis::is_device_activity(m.gpu[i])) continue;
    auto it = by_correlation.find(m.gpu[i].correlation);
    if (it != by_correlation.end()) launch[i] = static_cast<uint32_t>(it->second - m.gpu.data());
  }
  return launch;
}

}  // namespace trainprof::exporter
