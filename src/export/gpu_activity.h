// Copyright trainprof authors. What the timeline writers and the database
// share about GPU activities (CUPTI, TraceModel::gpu): which ones run on a
// device, Kineto's category of each, a kernel's launch geometry read from
// its detail string, and the call that launched each activity.
#ifndef TRAINPROF_EXPORT_GPU_ACTIVITY_H_
#define TRAINPROF_EXPORT_GPU_ACTIVITY_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::exporter {

// Kernels, copies and sets of a known device: what goes on a stream's track.
bool on_device(const analysis::GpuActivity& a);

// Kineto's category: kernel, gpu_memcpy, gpu_memset, cuda_runtime,
// cuda_driver, cuda_sync.
const char* gpu_category(const analysis::GpuActivity& a);

// A kernel's launch geometry (raw/format.h: "grid x,y,z\x1f block x,y,z\x1f
// registers\x1f static shared\x1f dynamic shared").
struct KernelGeometry {
  uint64_t grid[3] = {0, 0, 0};
  uint64_t block[3] = {0, 0, 0};
  uint64_t registers = 0;
  uint64_t static_shared = 0;
  uint64_t dynamic_shared = 0;
};
// Empty when the detail does not have the five fields; a malformed number
// reads as 0 (raw data is not trusted, and the number is only shown).
std::optional<KernelGeometry> kernel_geometry(std::string_view detail);

// Per activity of m.gpu: the index of the runtime or driver call with the
// same correlation id that launched it (a runtime call wins over the driver
// call it makes), for kernels, copies and sets on a device; kNoLaunch for the
// others and where the call was not recorded.
inline constexpr uint32_t kNoLaunch = UINT32_MAX;
std::vector<uint32_t> gpu_launches(const analysis::TraceModel& m);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORT_GPU_ACTIVITY_H_
