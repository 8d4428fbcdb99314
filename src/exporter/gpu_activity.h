// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the timeline writers and the database share about GPU activities (CUPTI,
// TraceModel::gpu): Kineto's category of each and the call that launched each
// activity. (What runs on a device is analysis::is_device_activity, a kernel's
// geometry analysis::kernel_geometry.)
#ifndef TRAINPROF_EXPORTER_GPU_ACTIVITY_H_
#define TRAINPROF_EXPORTER_GPU_ACTIVITY_H_

#include <cstdint>
#include <vector>

#include "analysis/gpu_kernels.h"
#include "analysis/trace_model.h"

namespace trainprof::exporter {

using analysis::kernel_geometry;
using analysis::KernelGeometry;

// Kineto's category: kernel, gpu_memcpy, gpu_memset, cuda_runtime,
// cuda_driver, cuda_sync.
const char* gpu_category(const analysis::GpuActivity& a);

// Per activity of m.gpu: the index of the runtime or driver call with the
// same correlation id that launched it (a runtime call wins over the driver
// call it makes), for kernels, copies and sets on a device; kNoLaunch for the
// others and where the call was not recorded.
inline constexpr uint32_t kNoLaunch = UINT32_MAX;
std::vector<uint32_t> gpu_launches(const analysis::TraceModel& m);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_GPU_ACTIVITY_H_
