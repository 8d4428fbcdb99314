// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// include/trainprof/memory.h.
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/memory.h"
#include "trainprof/range.h"

namespace trainprof {

const char* memory_category_name(MemoryCategory category) noexcept {
  switch (category) {
    case MemoryCategory::kParameter: return "parameter";
    case MemoryCategory::kGradient: return "gradient";
    case MemoryCategory::kOptimizerState: return "optimizer state";
    case MemoryCategory::kInput: return "input";
  }
  return "";
}

void tag_memory(MemoryCategory category, const void* address, uint64_t bytes, int device_type,
                int device_index) noexcept {
  const char* name = memory_category_name(category);
  if (!detail::host_recording() || address == nullptr || *name == '\0') return;
  core::record_memory_tag(detail::now_ticks(), reinterpret_cast<uint64_t>(address), bytes,
                          raw::memory_device(device_type, device_index), name);
}

}  // namespace trainprof
