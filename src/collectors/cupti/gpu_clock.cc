// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/cupti/gpu_clock.h"

#include <algorithm>
#include <cmath>

namespace trainprof::cupti {

void GpuClock::add(SyncPoint point) {
  if (!points_.empty() &&
      (point.gpu_ns <= points_.back().gpu_ns || point.host_ticks <= points_.back().host_ticks)) {
    return;
  }
  if (points_.size() == kMaxPoints) {
    // Every other point of the older half: the recent ones matter most, as
    // buffers complete shortly after their records.
    std::vector<SyncPoint> kept;
    kept.reserve(kMaxPoints);
    for (size_t i = 0; i < kMaxPoints / 2; i += 2) kept.push_back(points_[i]);
    kept.insert(kept.end(), points_.begin() + kMaxPoints / 2, points_.end());
    points_ = std::move(kept);
  }
  points_.push_back(point);
}

uint64_t GpuClock::along(const SyncPoint& from, double slope, uint64_t gpu_ns) {
  double delta = (static_cast<double>(gpu_ns) - static_cast<double>(from.gpu_ns)) * slope;
  double ticks = static_cast<double>(from.host_ticks) + delta;
  return ticks <= 0 ? 0 : static_cast<uint64_t>(std::llround(ticks));
}

uint64_t GpuClock::to_ticks(uint64_t gpu_ns) const {
  if (points_.empty()) return 0;
  if (points_.size() == 1) return along(points_[0], ticks_per_ns_, gpu_ns);
  // The segment [i-1, i] with points_[i] the first point at or after gpu_ns
  // (clamped to the first and last segments).
  auto it = std::lower_bound(points_.begin(), points_.end(), gpu_ns,
                             [](const SyncPoint& p, uint64_t ns) { return p.gpu_ns < ns; });
  size_t i = std::clamp<size_t>(static_cast<size_t>(it - points_.begin()), 1, points_.size() - 1);
  const SyncPoint& a = points_[i - 1];
  const SyncPoint& b = points_[i];
  double slope = static_cast<double>(b.host_ticks - a.host_ticks) / static_cast<double>(b.gpu_ns - a.gpu_ns);
  return along(a, slope, gpu_ns);
}

}  // namespace trainprof::cupti
