// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The parts of a recorded range, one by one.
//
// issue 17 asks a recorded range to cost at most 1.2x its two timestamps and,
// where that is out of reach, the floor of each part measured in the same
// run. These functions are the end of a range cut down to its first parts,
// built into a shared library of their own with libtrainprof's flags, so that
// the call is the same kind of call (through the PLT into a -fPIC library)
// and the thread-local access is the same initial-exec access:
//
//   floor_end_call        the end timestamp in the callee         (+ call)
//   floor_end_tls         ... + load the thread's block pointer  (+ TLS)
//   floor_end_tls_store   ... + the 32-byte event store and the release
//                         store of the block's index            (+ store)
//
// The caller reads the start timestamp itself, as ScopedRange does; both
// timestamps are trainprof::detail::now_ticks(), as the recorder's.
#ifndef TRAINPROF_BENCH_FLOOR_PARTS_H_
#define TRAINPROF_BENCH_FLOOR_PARTS_H_

#include <cstdint>

extern "C" {
void trainprof_floor_end_call(const char* name, uint64_t start_ticks) noexcept;
void trainprof_floor_end_tls(const char* name, uint64_t start_ticks) noexcept;
void trainprof_floor_end_tls_store(const char* name, uint64_t start_ticks) noexcept;
}

#endif  // TRAINPROF_BENCH_FLOOR_PARTS_H_
