// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What an allocation holds, for the memory breakdown of profile_memory
// (docs/OUTPUTS.md, memory_breakdown.csv).
//
//   for (const at::Tensor& p : model->parameters())
//     trainprof::tag_memory(trainprof::MemoryCategory::kParameter,
//                           p.storage().data(), p.storage().nbytes());
//
// The analysis classes every allocation alive during a run: one tagged is
// what its tag says from its allocation to its free (or, allocated before
// the run began, for the tag's bytes until its free); the others by their
// lifetimes (an activation, a temporary) or "unknown". The Python package
// tags parameters, gradients, optimizer state and the loader's batches
// itself. Safe from any thread; a load and a branch while nothing records.
#ifndef TRAINPROF_MEMORY_H_
#define TRAINPROF_MEMORY_H_

#include <cstdint>

namespace trainprof {

enum class MemoryCategory : uint8_t {
  kParameter = 1,       // a module's weights
  kGradient = 2,        // a parameter's .grad
  kOptimizerState = 3,  // what the optimizer keeps per parameter (Adam's moments, momentum)
  kInput = 4,           // a batch from the data loader
};

// "parameter", "gradient", "optimizer state", "input"; "" for another value.
const char* memory_category_name(MemoryCategory category) noexcept;

// Says that the allocation at `address` (the start of the block the
// allocator gave: a tensor's storage data) holds `category`, `bytes` long.
// `device_type` is c10's (0: CPU, 1: CUDA), `device_index` -1 for none.
void tag_memory(MemoryCategory category, const void* address, uint64_t bytes, int device_type = 0,
                int device_index = -1) noexcept;

}  // namespace trainprof

#endif  // TRAINPROF_MEMORY_H_
