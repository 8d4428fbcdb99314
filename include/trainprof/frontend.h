// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What a framework's front end tells the profiler that only it knows: the
// Python package is one, a binding for another framework would be another. A
// C++ program that uses the profiler directly needs none of this.
//
//   - the rank and world size its communication runtime gave it, and the
//     job its ranks agreed on where no launcher names one;
//   - the offset of this process' clock from a reference rank's, measured
//     by the front end (ping-pongs over torch.distributed's store), and the
//     start and end of each background exchange, so that a run closed while
//     one runs, or after one failed, says so;
//   - the host language's call stack and module path of an operator
//     (with_stack, with_modules).
#ifndef TRAINPROF_FRONTEND_H_
#define TRAINPROF_FRONTEND_H_

#include <cstdint>
#include <string>

namespace trainprof::detail {

// The process' rank and world size as its communication runtime knows them
// (libtrainprof_mpi after MPI_Init: source "MPI"); runs opened later use them.
void set_runtime_rank(int rank, int world_size, const char* source) noexcept;

// The job this process belongs to as its runtime agreed with the reference
// rank (the Python front end: rank 0's token through torch.distributed's
// store, the same on every rank of one process group and another after a
// restart), so that two jobs' runs in one directory are told apart where no
// launcher names the job (its environment comes first). Runs opened later
// record it (profiler_info.json "job", "job_source": `source`), and the runs
// this process closed without a job are amended with it.
void set_runtime_job(const std::string& id, const char* source) noexcept;

// This process' wall clock (CLOCK_REALTIME), ns.
uint64_t realtime_now_ns();

struct ClockSyncPoint {
  uint64_t realtime_ns = 0;  // this process' wall clock when measured
  int64_t offset_ns = 0;     // this clock minus the reference rank's
  uint64_t error_ns = 0;     // the offset is exact within +- this (half the round trip)
};

// Adds a measurement against `reference_rank`; then rewrites the
// "clock_sync" of the runs this process closed (their profiler_info.json).
void add_clock_sync_point(int reference_rank, const ClockSyncPoint& point) noexcept;

// An exchange with the reference rank began (in the background); each is
// ended once, with its point added before, or failed with the reason.
// Both amend the closed runs as add_clock_sync_point does.
void note_clock_exchange_started() noexcept;
void note_clock_exchange_ended(bool failed, const std::string& reason) noexcept;

// The host language's context of an operator, for with_stack and
// with_modules. Both are called by collectors at the start of a thread's
// outermost operator, on that thread, and return an interned string
// (detail::intern, trainprof/range.h) or nullptr when there is none: the
// call stack as "frame;frame;..." innermost first, and the module
// hierarchy. Without a stack provider collectors record native stacks.
// A provider must not throw and must stay valid until it is replaced.
using ContextProvider = const char* (*)() noexcept;
void set_context_providers(ContextProvider stack, ContextProvider module) noexcept;

}  // namespace trainprof::detail

#endif  // TRAINPROF_FRONTEND_H_
