// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Schedule actions, step by step, as torch.profiler takes them.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "trainprof/schedule.h"

namespace trainprof {
namespace {

// One letter per step: N none, W warmup, R record, S record-and-save.
std::string actions(const Schedule& s, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    switch (s.action(i)) {
      case ProfilerAction::None: out += 'N'; break;
      case ProfilerAction::Warmup: out += 'W'; break;
      case ProfilerAction::Record: out += 'R'; break;
      case ProfilerAction::RecordAndSave: out += 'S'; break;
    }
  }
  return out;
}

TEST(Schedule, WaitWarmupActiveRepeat) {
  EXPECT_EQ(actions({.wait = 1, .warmup = 1, .active = 2, .repeat = 2}, 12), "NWRSNWRSNNNN");
}

TEST(Schedule, SkipFirstShiftsEverything) {
  EXPECT_EQ(actions({.wait = 1, .warmup = 1, .active = 2, .repeat = 1, .skip_first = 3}, 10), "NNNNWRSNNN");
}

TEST(Schedule, RepeatZeroIsUnbounded) {
  EXPECT_EQ(actions({.wait = 2, .warmup = 0, .active = 1, .repeat = 0}, 9), "NNSNNSNNS");
}

TEST(Schedule, ActiveOneEveryStepSaves) {
  EXPECT_EQ(actions({.wait = 0, .warmup = 0, .active = 1}, 4), "SSSS");
}

TEST(Schedule, LongActiveOnlyLastSaves) {
  EXPECT_EQ(actions({.wait = 0, .warmup = 2, .active = 4, .repeat = 1}, 8), "WWRRRSNN");
}

TEST(Schedule, DefaultIsRecordAndSaveEveryStep) {
  Schedule s;
  EXPECT_EQ(s.action(0), ProfilerAction::RecordAndSave);
  EXPECT_EQ(s.action(100), ProfilerAction::RecordAndSave);
}

TEST(Schedule, LargeStepNumbers) {
  Schedule s{.wait = 3, .warmup = 1, .active = 2};
  // cycle 6: step 6e9 is a multiple of 6 -> wait.
  EXPECT_EQ(s.action(6'000'000'000LL), ProfilerAction::None);
  EXPECT_EQ(s.action(6'000'000'005LL), ProfilerAction::RecordAndSave);
}

void expect_invalid(const Schedule& s, const std::string& field) {
  try {
    s.validate();
    FAIL() << "expected std::invalid_argument for " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.action(0), std::invalid_argument);
}

TEST(Schedule, InvalidValuesNameTheField) {
  expect_invalid({.wait = -1}, "wait");
  expect_invalid({.warmup = -2}, "warmup");
  expect_invalid({.active = 0}, "active");
  expect_invalid({.repeat = -1}, "repeat");
  expect_invalid({.skip_first = -5}, "skip_first");
}

TEST(Schedule, ActionNames) {
  EXPECT_EQ(to_string(ProfilerAction::RecordAndSave), "RecordAndSave");
  EXPECT_TRUE(is_recording(ProfilerAction::Record));
  EXPECT_FALSE(is_recording(ProfilerAction::Warmup));
}

}  // namespace
}  // namespace trainprof
