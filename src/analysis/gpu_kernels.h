// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// GPU kernels, one row each (kernel_details.csv).
#ifndef TRAINPROF_ANALYSIS_GPU_KERNELS_H_
#define TRAINPROF_ANALYSIS_GPU_KERNELS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

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

// Whether a kernel is one of NCCL's, whatever its release named it:
// "ncclAllReduceRingLLKernel_sum_f32(...)" (2.7), "ncclKernel_AllReduce_
// RING_LL_Sum_float(...)" (2.8 to 2.18), "ncclDevKernel_AllReduce_Sum_f32_
// RING_LL(...)" (2.19 on), the symmetric-memory "ncclSymk..." kernels, with a
// return type ("void ...") where a template makes the demangler print one,
// or still mangled ("_Z39ncclDevKernel...") where demangling failed.
bool is_nccl_kernel(std::string_view name);

struct KernelRow {
  int64_t step = -1;  // of its launch (or of its start, when the launch was not recorded); -1: none
  int32_t device = -1;
  uint32_t stream = 0;
  std::string name;
  // The launching operator or range (analysis/gpu_launches.h): its name and,
  // with record_shapes, its inputs; "" when no recorded range encloses the
  // launch.
  std::string type;
  std::string input_shapes;
  std::string input_types;
  uint64_t start_ns = 0;  // monotonic
  uint64_t dur_ns = 0;
  // Since the end of the previous kernel, copy or set on the same device and
  // stream (0 for the first, or when they overlap).
  uint64_t wait_ns = 0;
  uint64_t blocks = 0;  // grid x * y * z
  std::string grid;     // "x,y,z"
  std::string block;    // "x,y,z"
  uint32_t registers = 0;
  uint64_t static_shared = 0;
  uint64_t dynamic_shared = 0;
  uint32_t correlation = 0;
  std::string launch_api;  // the runtime or driver call that launched it ("" when not recorded)
  uint64_t launch_ns = 0;  // its start (0: not recorded)
  uint32_t launch_thread = 0;
  // Launched by a CUDA graph: CUPTI's graph and node ids (0: not), and the
  // operator open where the node was captured ("" when not known).
  uint32_t graph = 0;
  uint64_t graph_node = 0;
  std::string capture_operator;
};

// The run's kernels in start order (with --steps, those of the chosen
// steps). Needs attribute_launches (or LaunchAttribution) for `type`.
std::vector<KernelRow> kernel_rows(const TraceModel& m);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_GPU_KERNELS_H_
