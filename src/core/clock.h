// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Timestamps: TSC ticks where the TSC is invariant, CLOCK_MONOTONIC nanoseconds
// elsewhere.
//
// Events store raw ticks (one rdtsc, ~10 ns here). Raw files carry anchors
// (ticks, monotonic ns, realtime ns) taken at open and at every flush; the
// reader converts ticks to nanoseconds by the line through the first and last
// anchor, so no calibration is needed on the hot path.
#ifndef TRAINPROF_CORE_CLOCK_H_
#define TRAINPROF_CORE_CLOCK_H_

#include <cstdint>

#include "trainprof/frontend.h"

namespace trainprof::core {

enum class ClockSource : uint32_t { kTsc = 1, kMonotonic = 2 };

struct ClockAnchor {
  uint64_t ticks = 0;
  uint64_t monotonic_ns = 0;
  uint64_t realtime_ns = 0;
};

// Picks the clock once per process (TRAINPROF_CLOCK=monotonic forces the
// fallback) and publishes it to the inline now_ticks().
ClockSource init_clock();
ClockSource clock_source();

// A (ticks, monotonic, realtime) triple read as close together as possible.
ClockAnchor take_anchor();

// Ticks per nanosecond, measured once per process over ~20 ms (1.0 for the
// monotonic clock). Only a fallback for runs too short to fit anchors.
double ticks_per_ns();

// realtime_now_ns(): trainprof/frontend.h.

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), ns: what the
// flusher and the host sampler report of their own cost.
uint64_t thread_cpu_ns();

// True when CPUID reports an invariant TSC.
bool tsc_is_invariant();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_CLOCK_H_
