// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The integer type of the allocation totals c10 reports to a memory reporter:
// int64_t in LibTorch 1.x, size_t in 2.x. Taken from the public virtual, so
// that a reporter compiles against both (the collector's, and the benchmark's
// floor in bench/torch_floor.cc).
#ifndef TRAINPROF_COLLECTORS_TORCH_MEMORY_TOTAL_H_
#define TRAINPROF_COLLECTORS_TORCH_MEMORY_TOTAL_H_

#include <c10/util/ThreadLocalDebugInfo.h>

namespace trainprof::torch {

template <typename Method>
struct MemoryTotalArg;
template <typename Class, typename Ptr, typename Size, typename Total, typename Device>
struct MemoryTotalArg<void (Class::*)(Ptr, Size, Total, Total, Device)> {
  using type = Total;
};
using MemoryTotal = MemoryTotalArg<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

}  // namespace trainprof::torch

#endif  // TRAINPROF_COLLECTORS_TORCH_MEMORY_TOTAL_H_
