// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Memory (profile_memory): every allocation and free of LibTorch's allocators,
// as MEMORY events; and LibTorch's sign that a profiler is on.
//
// LibTorch's allocators report every allocation and free to the
// PROFILER_STATE entry of the calling thread's debug info
// (c10::reportMemoryUsageToProfiler). A reporter is installed there on the
// thread that starts the session and on every thread that runs an operator
// (the collector calls install_memory_reporter() at each outermost
// operator); a report becomes two Event slots (MemoryReport, MemoryTotals),
// and the analysis finds the operator that was running. After the session
// each thread takes the reporter out at its next allocation, or when it
// exits: no operator callback stays on for it.
//
// The same entry is what self-annotating code asks before it makes a range
// (torch.compile's "## Call CompiledFxGraph ... ##", "Pregraph bytecode",
// made with torch's _RecordFunctionFast, record only where a thread holds a
// profiler state). So the reporter stands there whenever a session records
// operators, with or without profile_memory; without it, it tells the
// allocator that memory is not profiled, and no report is made.
#ifndef TRAINPROF_COLLECTORS_TORCH_MEMORY_REPORTER_H_
#define TRAINPROF_COLLECTORS_TORCH_MEMORY_REPORTER_H_

#include <atomic>

namespace trainprof::torch {

// True while a session records operators or memory: the reporter belongs
// in every thread's debug info (read by the operator callbacks).
extern std::atomic<bool> g_reporter_wanted;

// A session that records operators or memory starts: installs the reporter
// on the calling thread; the others get it at their next outermost operator.
// `memory`: it reports allocations (profile_memory).
void start_memory_reports(bool memory) noexcept;

// The innermost operator open on the calling thread (its interned name),
// null for none; defined by the operator callbacks (torch_collector.cc).
const char* innermost_operator() noexcept;

// The session stops: takes this thread's reporter out (the others' at their
// next allocation) and says when LibTorch's own profiler held some threads
// while memory was recorded.
void stop_memory_reports() noexcept;

// At exit, while LibTorch is still whole: no thread installs the reporter
// again.
void stop_memory_reports_at_exit() noexcept;

// Puts the reporter in the calling thread's debug info unless it is there,
// or another profiler state is (LibTorch's profiler is recording here).
void install_memory_reporter();

}  // namespace trainprof::torch

// For the Python package, right before torch's own profiler starts on the
// calling thread: LibTorch refuses to start its profiler ("Profiler is
// already enabled on this thread") where PROFILER_STATE holds anything, our
// memory reporter included. Takes this thread's reporter out; returns 1 when
// it was there. Never throws.
extern "C" __attribute__((visibility("default"))) int trainprof_torch_yield_profiler_state() noexcept;

#endif  // TRAINPROF_COLLECTORS_TORCH_MEMORY_REPORTER_H_
