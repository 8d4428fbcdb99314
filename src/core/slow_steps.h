// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The flight recorder's slow-step trigger: which steps are slow, which of them
// make a dump, and what its reason says.
//
// A step is slow when it takes more than `factor` times the median of the
// last `window` steps. Consecutive slow steps are one incident (a burst):
// one dump, written when the first normal step ends it (its ring then holds
// every slow step and the steps before them), or once the burst is
// kMaxBurstSteps long, so that a slow phase that never ends is written too.
// After a dump, slow steps start no new incident for `cooldown_s`, unless
// one is kEscalation times the ratio of the last one dumped: the cooldown
// holds back repeats, never a larger incident.
//
// The reason says whose time the slow steps were, from the steps' health
// (core/step_health.h) against the median of the steps before them: the
// training thread's wait for a CPU (another process held the cores), the
// wait for data, communication, the process's own computing, or none of
// these (blocked: I/O, a sleep, a lock, the device).
#ifndef TRAINPROF_CORE_SLOW_STEPS_H_
#define TRAINPROF_CORE_SLOW_STEPS_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/step_health.h"

namespace trainprof::core {

// The upper median of `values` (T{} when empty): the slow-step rule's and
// the loss-spike rule's yardstick.
template <typename T>
T median_of(std::vector<T> values) {
  if (values.empty()) return T{};
  auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

struct SlowStepRule {
  double factor = 3.0;  // 0: no slow-step trigger
  uint32_t window = 50;
  uint32_t min_steps = 10;
  double cooldown_s = 300.0;
};

// A burst is written after this many slow steps even when it goes on.
inline constexpr int64_t kMaxBurstSteps = 10;
// Within the cooldown, a step this many times the last dumped ratio is a
// larger incident (twice: clearly more than the spread of one cause's steps).
inline constexpr double kEscalation = 2.0;

class SlowSteps {
 public:
  explicit SlowSteps(SlowStepRule rule);

  // Step `health.step` ended at `now_ns` (monotonic); `history` holds the
  // steps' health up to and including it. Returns a dump's trigger
  // ("slow_step", with its reason) when an incident is complete.
  // `start_up`: the phase before the first step, kept out of the median.
  std::optional<nlohmann::json> on_step(const StepHealth& health, const std::deque<StepHealth>& history,
                                        uint64_t now_ns, bool start_up);
  // The open burst's trigger, when one is open (recording stops).
  std::optional<nlohmann::json> flush(const std::deque<StepHealth>& history, uint64_t now_ns);
  // Another rank dumped a slow-step incident that ended at its step
  // `last_step`: this rank's burst up to it is that incident, and the
  // cooldown starts.
  void absorb(int64_t last_step, uint64_t now_ns);

  // The median step of the window (0 before any step).
  uint64_t median_ns() const;
  size_t window_steps() const { return recent_ns_.size(); }

 private:
  struct Burst {
    int64_t first = 0, last = 0;
    double min_ratio = 0, max_ratio = 0;
    uint64_t median_ns = 0;
    size_t window_steps = 0;
    std::string earlier;  // "; larger than the one dumped ..." when it escalates
  };
  nlohmann::json close(const std::deque<StepHealth>& history, uint64_t now_ns, bool goes_on);

  SlowStepRule rule_;
  std::deque<uint64_t> recent_ns_;
  uint64_t last_dump_ns_ = 0;  // 0: none yet
  double last_dump_ratio_ = 0;
  std::optional<Burst> burst_;
};

// What the slow steps' time went to, beyond the `normal` steps' median:
// a clause for a dump's reason, and `cause` (an object: "kind" and the
// figures) when not null. "" when the steps were not longer.
std::string whose_time(const std::vector<StepHealth>& slow, const std::vector<StepHealth>& normal,
                       nlohmann::json* cause);

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_SLOW_STEPS_H_
