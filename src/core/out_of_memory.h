// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// An allocation that failed, as the collectors see it (the LibTorch collector:
// c10's CPU allocator failing, or CUDA's caching allocator reporting out of
// memory to the profiler).
//
// While a run records, it is a MEMORY event with the failed-allocation flag
// (docs/FORMAT.md: bytes requested, address 0), and everything recorded so
// far is written to the run's raw file before the call returns: the
// exception that follows may end the process, and the analysis of what is
// on disk (oom_report.txt) names the failing allocation and what was alive.
#ifndef TRAINPROF_CORE_OUT_OF_MEMORY_H_
#define TRAINPROF_CORE_OUT_OF_MEMORY_H_

#include <cstdint>

namespace trainprof::core {

// `device`: raw::memory_device(); the totals are the allocator's (0: unknown).
// Safe from any thread; never throws; nothing happens while nothing records.
// `operator_name` (interned; null: none): the operator that allocated, still
// open when the run is written, as a mark in domain raw::kOutOfMemoryDomain
// at the same time on the same thread.
void note_out_of_memory(uint64_t bytes, uint64_t total_allocated, uint64_t total_reserved, uint64_t device,
                        const char* operator_name) noexcept;

// A flight recorder has no run on disk to flush: it writes its ring as a
// dump instead, on the failing thread, before the error goes on. One
// listener at a time (one session per process); set before recording starts
// and cleared (nullptr) after it stops, by its owner. It runs after the
// failure is recorded, only while something records, and must not throw.
using OutOfMemoryListener = void (*)(uint64_t bytes, uint64_t device, const char* operator_name);
void set_out_of_memory_listener(OutOfMemoryListener listener) noexcept;

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_OUT_OF_MEMORY_H_
