// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Schedule semantics: torch.profiler's (skip_first, then cycles of wait,
// warmup, active; repeat 0: cycles until the end).
#include <stdexcept>
#include <string>

#include "trainprof/schedule.h"

namespace trainprof {
namespace {

void require(bool ok, const char* field, const char* rule, int value) {
  if (!ok) {
    throw std::invalid_argument(std::string("Schedule.") + field + " must be " + rule + ", got " +
                                std::to_string(value));
  }
}

}  // namespace

void Schedule::validate() const {
  require(wait >= 0, "wait", ">= 0", wait);
  require(warmup >= 0, "warmup", ">= 0", warmup);
  require(active >= 1, "active", ">= 1", active);
  require(repeat >= 0, "repeat", ">= 0 (0 repeats forever)", repeat);
  require(skip_first >= 0, "skip_first", ">= 0", skip_first);
}

ProfilerAction Schedule::action(int64_t step) const {
  validate();
  if (step < skip_first) return ProfilerAction::None;
  int64_t s = step - skip_first;
  int64_t cycle = static_cast<int64_t>(wait) + warmup + active;
  if (repeat > 0 && s / cycle >= repeat) return ProfilerAction::None;
  int64_t m = s % cycle;
  if (m < wait) return ProfilerAction::None;
  if (m < wait + warmup) return ProfilerAction::Warmup;
  if (m < cycle - 1) return ProfilerAction::Record;
  return ProfilerAction::RecordAndSave;
}

std::string_view to_string(ProfilerAction action) {
  switch (action) {
    case ProfilerAction::None: return "None";
    case ProfilerAction::Warmup: return "Warmup";
    case ProfilerAction::Record: return "Record";
    case ProfilerAction::RecordAndSave: return "RecordAndSave";
  }
  return "?";
}

}  // namespace trainprof
