// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// GPU timestamps on the host's clock.
//
// CUPTI stamps activity records with its own nanosecond clock
// (cuptiGetTimestamp). GpuClock keeps sync points, pairs of (CUPTI ns, host
// ticks) read as close together as possible, and maps a CUPTI time to host
// ticks on the line through the two points around it, so that a drift
// between the clocks is followed instead of accumulated. Before the first
// point or after the last, the nearest segment's slope is extended; with a
// single point, the nominal ticks per nanosecond.
#ifndef TRAINPROF_COLLECTORS_CUPTI_GPU_CLOCK_H_
#define TRAINPROF_COLLECTORS_CUPTI_GPU_CLOCK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainprof::cupti {

struct SyncPoint {
  uint64_t gpu_ns;
  uint64_t host_ticks;
};

class GpuClock {
 public:
  explicit GpuClock(double ticks_per_ns) : ticks_per_ns_(ticks_per_ns) {}

  // Adds a point; one not later than the last on either clock is ignored
  // (the lines must go forward). Keeps at most kMaxPoints, thinning the
  // oldest half when full.
  void add(SyncPoint point);
  // Reads a point with `gpu_now` (cuptiGetTimestamp) bracketed by two host
  // timestamps, keeping the tightest of `tries` brackets.
  template <typename GpuNow>
  SyncPoint sample(GpuNow gpu_now, int tries = 5);

  uint64_t to_ticks(uint64_t gpu_ns) const;
  size_t points() const { return points_.size(); }

  static constexpr size_t kMaxPoints = 4096;

 private:
  static uint64_t along(const SyncPoint& from, double slope, uint64_t gpu_ns);
  double ticks_per_ns_;
  std::vector<SyncPoint> points_;
};

}  // namespace trainprof::cupti

#include "trainprof/range.h"

namespace trainprof::cupti {

template <typename GpuNow>
SyncPoint GpuClock::sample(GpuNow gpu_now, int tries) {
  SyncPoint best{0, 0};
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < tries; ++i) {
    uint64_t before = detail::now_ticks();
    uint64_t gpu = gpu_now();
    uint64_t after = detail::now_ticks();
    if (after - before < best_width) {
      best_width = after - before;
      best = SyncPoint{gpu, before + (after - before) / 2};
    }
  }
  return best;
}

}  // namespace trainprof::cupti

#endif  // TRAINPROF_COLLECTORS_CUPTI_GPU_CLOCK_H_
