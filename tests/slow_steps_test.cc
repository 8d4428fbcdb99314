// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The slow-step trigger's rules, on made-up step times: which steps make a
// dump, and what its reason says.
#include "core/slow_steps.h"

#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <vector>

namespace trainprof::core {
namespace {

constexpr uint64_t kMs = 1'000'000;

// Feeds steps to a SlowSteps as a recorder would, one second apart.
class Steps {
 public:
  explicit Steps(SlowStepRule rule) : slow_(rule) {}

  // A step of `ms` whose time went as `fill` says; the dumps it completed.
  std::optional<nlohmann::json> step(double ms, StepHealth fill = {}) {
    fill.step = next_++;
    fill.step_ns = static_cast<uint64_t>(ms * kMs);
    if (fill.thread_cpu_ns == 0 && fill.thread_cpu_wait_ns == 0) fill.thread_cpu_ns = fill.step_ns;
    if (fill.cpu_ns == 0) fill.cpu_ns = fill.thread_cpu_ns;
    history_.push_back(fill);
    now_ns_ += 1'000'000'000;
    std::optional<nlohmann::json> t = slow_.on_step(fill, history_, now_ns_, fill.step == 0);
    if (t) dumps.push_back(*t);
    return t;
  }
  void steps(int n, double ms) {
    for (int i = 0; i < n; ++i) step(ms);
  }
  std::optional<nlohmann::json> flush() { return slow_.flush(history_, now_ns_); }
  SlowSteps& slow() { return slow_; }
  uint64_t now_ns() const { return now_ns_; }

  std::vector<nlohmann::json> dumps;

 private:
  SlowSteps slow_;
  std::deque<StepHealth> history_;
  int64_t next_ = 0;
  uint64_t now_ns_ = 0;
};

SlowStepRule rule() {
  SlowStepRule r;
  r.factor = 3;
  r.window = 50;
  r.min_steps = 10;
  r.cooldown_s = 300;
  return r;
}

std::string reason(const nlohmann::json& t) {
  return t.value("reason", "");
}

TEST(SlowSteps, OneSlowStepIsDumpedWhenTheNextEndsNormally) {
  Steps s(rule());
  s.steps(21, 10);
  EXPECT_FALSE(s.step(100));  // step 21: the burst may go on
  std::optional<nlohmann::json> t = s.step(10);
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)["step"], 21);
  EXPECT_EQ((*t)["last_step"], 21);
  EXPECT_EQ(reason(*t).rfind("step 21 took 100.0 ms, 10x the median of the last 20 steps (10.0 ms)", 0), 0u)
      << reason(*t);
}

// A burst after a smaller incident within the cooldown: one dump holding
// every slow step, its reason giving their range and ratios.
TEST(SlowSteps, ABurstAfterASmallerIncidentIsOneDump) {
  Steps s(rule());
  s.steps(20, 10);
  s.step(50);  // step 20, 5x
  s.steps(10, 10);
  ASSERT_EQ(s.dumps.size(), 1u);
  s.steps(5, 300);  // steps 31-35, 26-30x
  EXPECT_EQ(s.dumps.size(), 1u) << "written when the burst ends";
  s.steps(5, 10);
  ASSERT_EQ(s.dumps.size(), 2u);
  const nlohmann::json& burst = s.dumps[1];
  EXPECT_EQ(burst["step"], 31);
  EXPECT_EQ(burst["last_step"], 35);
  EXPECT_EQ(reason(burst).rfind("steps 31-35 slow, ", 0), 0u) << reason(burst);
  EXPECT_NE(reason(burst).find("x the median of the last "), std::string::npos) << reason(burst);
  EXPECT_NE(reason(burst).find("; larger than the one dumped "), std::string::npos) << reason(burst);
}

// The other order: the burst first; a smaller slow step within the
// cooldown is a repeat, not dumped; once it has passed, it is.
TEST(SlowSteps, ASmallerStepAfterABurstWaitsForTheCooldown) {
  SlowStepRule r = rule();
  r.cooldown_s = 30;
  Steps s(r);
  s.steps(20, 10);
  s.steps(4, 300);
  s.steps(2, 10);
  ASSERT_EQ(s.dumps.size(), 1u);
  EXPECT_EQ(reason(s.dumps[0]).rfind("steps 20-23 slow, 30x ", 0), 0u) << reason(s.dumps[0]);
  s.step(50);
  s.steps(10, 10);
  EXPECT_EQ(s.dumps.size(), 1u);
  s.steps(30, 10);  // past the cooldown (a step a second here)
  s.step(50);
  s.step(10);
  ASSERT_EQ(s.dumps.size(), 2u);
  EXPECT_EQ(reason(s.dumps[1]).rfind("step 67 took 50.0 ms", 0), 0u) << reason(s.dumps[1]);
}

// A slow phase that never ends is written after kMaxBurstSteps steps, once.
TEST(SlowSteps, ABurstThatNeverEndsIsWrittenAfterItsBound) {
  Steps s(rule());
  s.steps(20, 10);
  s.steps(static_cast<int>(kMaxBurstSteps) - 1, 200);
  EXPECT_TRUE(s.dumps.empty());
  s.step(200);
  ASSERT_EQ(s.dumps.size(), 1u);
  const nlohmann::json& t = s.dumps[0];
  EXPECT_EQ(t["step"], 20);
  EXPECT_EQ(t["last_step"], 20 + kMaxBurstSteps - 1);
  EXPECT_TRUE(t.value("still_slow", false));
  EXPECT_NE(reason(t).find("and still slow: written after "), std::string::npos) << reason(t);
  s.steps(100, 200);
  EXPECT_EQ(s.dumps.size(), 1u);
}

// Recording stops inside a burst: the burst is written.
TEST(SlowSteps, AnOpenBurstIsWrittenWhenRecordingStops) {
  Steps s(rule());
  s.steps(20, 10);
  s.steps(3, 100);
  EXPECT_TRUE(s.dumps.empty());
  std::optional<nlohmann::json> t = s.flush();
  ASSERT_TRUE(t);
  EXPECT_EQ(reason(*t).rfind("steps 20-22 slow, 10x ", 0), 0u) << reason(*t);
  EXPECT_FALSE(s.flush());
}

// Another rank dumped the incident: this rank's burst in it is not dumped again.
TEST(SlowSteps, APeersIncidentTakesTheBurstItCovers) {
  Steps s(rule());
  s.steps(20, 10);
  s.steps(2, 100);
  s.slow().absorb(21, s.now_ns());
  s.steps(5, 10);
  EXPECT_TRUE(s.dumps.empty());
}

// The start-up phase and the first min_steps steps are never slow.
TEST(SlowSteps, NoDumpBeforeTheFirstStepsAreMeasured) {
  Steps s(rule());
  s.step(5000);  // start-up
  s.steps(9, 10);
  s.step(500);
  s.steps(5, 10);
  EXPECT_TRUE(s.dumps.empty());
}

// Whose time the slow step was, from its health against the median step's.
struct Planted {
  const char* kind;
  StepHealth health;  // of the slow step (60 ms; the others: 10 ms on the CPU)
  const char* says;
};

TEST(SlowSteps, TheReasonSaysWhoseTimeTheStepWas) {
  auto health = [](uint64_t thread_cpu, uint64_t wait, uint64_t data, uint64_t comm, uint64_t process_cpu) {
    StepHealth h;
    h.thread_cpu_ns = thread_cpu * kMs;
    h.thread_cpu_wait_ns = wait * kMs;
    h.data_wait_ns = data * kMs;
    h.comm_ns = comm * kMs;
    h.cpu_ns = process_cpu * kMs;
    return h;
  };
  std::vector<Planted> planted = {
      {"cpu_contention", health(10, 48, 0, 0, 11),
       "; the process ran 11.0 of 60.0 ms and its training thread waited 48.0 ms for a CPU: another process "
       "or the system held the CPU"},
      {"data", health(10, 0, 49, 0, 10), "; 49.0 of 60.0 ms waiting for data (a median step: 0.0 ms)"},
      {"communication", health(10, 0, 0, 49, 10), "; 49.0 of 60.0 ms in communication"},
      {"compute", health(59, 1, 0, 0, 59),
       "; the training thread computed 59.0 of 60.0 ms (a median step: 10.0 ms)"},
      {"blocked", health(10, 1, 0, 0, 10), "; the process ran 10.0 of 60.0 ms, waiting for neither a CPU"},
  };
  for (const Planted& p : planted) {
    Steps s(rule());
    s.steps(20, 10);
    s.step(60, p.health);
    s.step(10);
    ASSERT_EQ(s.dumps.size(), 1u) << p.kind;
    EXPECT_EQ(s.dumps[0]["cause"]["kind"], p.kind) << s.dumps[0].dump();
    EXPECT_NE(reason(s.dumps[0]).find(p.says), std::string::npos) << reason(s.dumps[0]);
  }
}

// Without the scheduler's statistics the thread's wait is unknown: the
// process's CPU time says whether the job computed.
TEST(SlowSteps, WithoutSchedulerStatisticsTheProcessCpuTimeDecides) {
  std::vector<StepHealth> normal(20), slow(1);
  for (StepHealth& h : normal) {
    h.step_ns = 10 * kMs;
    h.cpu_ns = 10 * kMs;
  }
  slow[0].step_ns = 60 * kMs;
  slow[0].cpu_ns = 58 * kMs;
  nlohmann::json cause;
  EXPECT_EQ(whose_time(slow, normal, &cause).rfind("the process computed 58.0 of 60.0 ms", 0), 0u);
  EXPECT_EQ(cause["kind"], "compute");
  EXPECT_FALSE(cause.contains("thread_cpu_wait_ms"));
  slow[0].cpu_ns = 10 * kMs;
  EXPECT_NE(whose_time(slow, normal, &cause).find("blocked"), std::string::npos);
  EXPECT_EQ(cause["kind"], "blocked");
}

}  // namespace
}  // namespace trainprof::core
