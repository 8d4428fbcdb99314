// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Schedules: which steps a profiler records.
//
// A schedule splits training steps into cycles of `wait` idle steps, `warmup`
// steps (collection prepared, data discarded) and `active` recorded steps, after
// `skip_first` steps that are ignored entirely. The last active step of a cycle
// is RecordAndSave: the cycle's data is closed into its own run directory and
// `on_trace_ready` is called. `repeat == 0` repeats the cycle forever.
#ifndef TRAINPROF_SCHEDULE_H_
#define TRAINPROF_SCHEDULE_H_

#include <cstdint>
#include <string_view>

namespace trainprof {

enum class ProfilerAction { None, Warmup, Record, RecordAndSave };

// Plain aggregate so users can write Schedule{.wait = 1, .warmup = 1, .active = 3}.
// Fields are signed so that a negative value is reported, not wrapped.
struct Schedule {
  int wait = 0;
  int warmup = 0;
  int active = 1;
  int repeat = 0;  // 0: unbounded
  int skip_first = 0;

  // Throws std::invalid_argument naming the offending field.
  void validate() const;

  // The action for 0-based step `step` (validates first).
  ProfilerAction action(int64_t step) const;
};

// Stable names: "None", "Warmup", "Record", "RecordAndSave".
std::string_view to_string(ProfilerAction action);

// True for Record and RecordAndSave.
inline bool is_recording(ProfilerAction action) {
  return action == ProfilerAction::Record || action == ProfilerAction::RecordAndSave;
}

}  // namespace trainprof

#endif  // TRAINPROF_SCHEDULE_H_
