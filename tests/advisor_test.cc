// Copyright trainprof authors. The advisor (analysis/advisor.h,
// trainprof/advise.h): each rule fires at its threshold and not below it on
// facts written by hand; recorded workloads that plant one problem get that
// finding first, a clean one gets none; `trainprof advise` prints them.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/advisor.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using analysis::AdviceFacts;
using analysis::Finding;
using analysis::NameFacts;
using test::TempDir;

// Ten steps of 100 ms: the base every hand-written case adds its problem to.
AdviceFacts ten_steps() {
  AdviceFacts f;
  f.steps = 10;
  f.median_step_ms = 100;
  f.total_step_ms = 1000;
  return f;
}

std::vector<std::string> rules(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& x : findings) out.push_back(x.rule);
  return out;
}

using Rules = std::vector<std::string>;

TEST(Advisor, NothingFiresOnAHealthyRun) {
  AdviceFacts f = ten_steps();
  f.data_wait_ms = 50;  // 5 %
  f.exposed_comm_ms = 50;
  f.host.push_back(NameFacts{"aten::add", true, 5000, 90'000'000, 90'000'000, 0});  // 500 per step
  f.host.push_back(NameFacts{"Optimizer.step#Adam.step", false, 10, 20'000'000, 5'000'000, 150});
  f.host.push_back(NameFacts{"aten::_foreach_add_", true, 10, 1'000'000, 1'000'000, 0});
  f.host_peak_bytes = 80, f.host_limit_bytes = 100;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

TEST(Advisor, DataWaitAtATenthOfTheStep) {
  AdviceFacts f = ten_steps();
  f.data_wait_ms = 99;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.data_wait_ms = 100;
  f.data_wait_steps = 10;
  f.hide_data_wait_step_ms = 91;
  f.slowest_data_stage = "fetch (dataset), 9.000 ms per step (dataset.csv)";
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"data_wait"});
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 9);
  EXPECT_EQ(x[0].saving_basis, "re-timed: the steps with their data wait hidden");
  EXPECT_NE(x[0].evidence.find("10.000 ms of data wait per step (10.0 %"), std::string::npos)
      << x[0].evidence;
  EXPECT_NE(x[0].evidence.find("fetch (dataset)"), std::string::npos) << x[0].evidence;
  EXPECT_NE(x[0].change.find("num_workers"), std::string::npos);
}

TEST(Advisor, DeviceIdleAndSynchronizationsOnlyWithGpuActivity) {
  AdviceFacts f = ten_steps();
  f.device_idle_ms = 200, f.preparing_ms = 50;                                       // 25 %
  f.gpu.push_back(NameFacts{"cudaStreamSynchronize", false, 20, 50'000'000, 0, 0});  // 5 %
  f.host.push_back(NameFacts{"aten::_local_scalar_dense", true, 20, 52'000'000, 1'000'000, 0});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{}) << "a run without GPU activity has no device to idle";
  f.device_time = true;
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), (Rules{"device_idle", "sync_in_step"}));
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 25);
  EXPECT_DOUBLE_EQ(x[1].saving_ms, 5);
  EXPECT_NE(x[1].evidence.find("cudaStreamSynchronize: 20 calls"), std::string::npos) << x[1].evidence;
  EXPECT_NE(x[1].evidence.find("aten::_local_scalar_dense 2.0 per step"), std::string::npos) << x[1].evidence;
  f.device_idle_ms = 199;
  f.gpu[0].total_ns = 49'000'000;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

TEST(Advisor, OptimizerPerParameterUnlessMultiTensorOperatorsRun) {
  AdviceFacts f = ten_steps();
  f.host.push_back(NameFacts{"Optimizer.step#SGD.step", false, 10, 40'000'000, 1'000'000, 400});  // 40 a call
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"unfused_optimizer"});
  EXPECT_EQ(x[0].title, "the optimizer runs per parameter (SGD)");
  EXPECT_NE(x[0].change.find("torch.optim.SGD(..., foreach=True)"), std::string::npos) << x[0].change;
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 4);
  f.host[0].child_calls = 390;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].child_calls = 400;
  f.host.push_back(NameFacts{"aten::_foreach_mul_", true, 10, 1'000'000, 1'000'000, 0});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

TEST(Advisor, TinyOperatorsByCountAndShare) {
  AdviceFacts f = ten_steps();
  f.total_step_ms = 500;  // steps of 50 ms
  // 1,000 calls per step of 9.9 us: 99 ms of self time per 500 ms, 19.8 %.
  f.host.push_back(NameFacts{"aten::mul", true, 10'000, 99'000'000, 99'000'000, 0});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].self_ns = f.host[0].total_ns = 100'000'000;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{"tiny_operators"});
  f.host[0].calls = 9'999;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].calls = 10'000;
  f.host[0].total_ns = 200'000'000;  // 20 us each: not tiny
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

TEST(Advisor, ExposedCommunicationGarbageCollectionAndMemory) {
  AdviceFacts f = ten_steps();
  f.exposed_comm_ms = 100;
  f.overlap_comm_step_ms = 92;
  f.host.push_back(NameFacts{"gc.collect (generation 2)", false, 4, 50'000'000, 50'000'000, 0});
  f.host_peak_bytes = 90, f.host_limit_bytes = 100;
  f.host_limit_source = "cgroup memory limit", f.host_peak_source = "the process' peak resident set";
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), (Rules{"exposed_communication", "gc_pauses", "memory_near_limit"}));
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 8);
  EXPECT_DOUBLE_EQ(x[1].saving_ms, 5);
  EXPECT_LT(x[2].saving_ms, 0);  // memory is not step time
  EXPECT_NE(x[2].evidence.find("90.0 % of the"), std::string::npos) << x[2].evidence;
  EXPECT_NE(x[2].evidence.find("cgroup memory limit (the process' peak resident set)"), std::string::npos);
  f.exposed_comm_ms = 99;
  f.host[0].total_ns = 49'000'000;
  f.host_peak_bytes = 89;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

TEST(Advisor, HostCpuSaturatedInAQuarterOfTheSteps) {
  AdviceFacts f = ten_steps();
  f.cpu_saturated_steps = {1, 2};
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.cpu_saturated_steps = {1, 2, 3};
  f.cpu_saturated_mean_percent = 97.5;
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"host_cpu_saturated"});
  EXPECT_NE(x[0].evidence.find("in 3 of 10 steps (97.5 %"), std::string::npos) << x[0].evidence;
}

TEST(Advisor, TheLargestSavingFirstAndTheUnestimatedLast) {
  AdviceFacts f = ten_steps();
  f.cpu_saturated_steps = {1, 2, 3, 4};
  f.data_wait_ms = 150;  // 15 ms per step, at most
  f.exposed_comm_ms = 300;
  f.overlap_comm_step_ms = 70;  // 30 ms re-timed
  EXPECT_EQ(rules(analysis::advise(f)), (Rules{"exposed_communication", "data_wait", "host_cpu_saturated"}));
}

// ---------------------------------------------------------------------------
// Recorded workloads.

// `steps` steps of a loop that waits `wait_ms` for a batch (a data stage
// "wait") and computes `compute_ms` in a range.
std::string record_loop(const std::string& dir, int steps, int wait_ms, int compute_ms,
                        const ProfilerOptions& base = {}) {
  ProfilerOptions o = base;
  o.output_path = dir;
  o.data_process = true;
  Profiler prof(o);
  for (int s = 0; s < steps; ++s) {
    if (wait_ms > 0) {
      DataStage wait("loader", kStageLoaderWait);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    }
    {
      TRAINPROF_RANGE("compute");
      std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
    }
    if (s + 1 < steps) prof.step();  // the last step ends at stop()
  }
  prof.stop();
  return prof.last_run().run_dir;
}

TEST(AdvisorWorkload, ALoopThatWaitsForDataIsToldToFeedItFaster) {
  TempDir dir;
  std::string run = record_loop(dir.path(), 6, 30, 20);
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  const Advice& first = a.findings[0];
  EXPECT_EQ(first.rule, "data_wait") << a.text;
  EXPECT_EQ(first.saving_basis, "re-timed: the steps with their data wait hidden") << a.text;
  // The wait is 30 of the 50 ms step: hiding it leaves about the compute.
  EXPECT_GT(first.saving_ms, 0.5 * 30) << a.text;
  EXPECT_LT(first.saving_ms, first.step_ms) << a.text;
  EXPECT_EQ(a.text.rfind("advice for " + run +
                             " (1 run(s)), the largest saving first:\n1. the training loop "
                             "waits for data\n   worth: ",
                         0),
            0u)
      << a.text;
  // The summary starts with it too.
  std::string summary = summarize_run(run);
  size_t advice = summary.find("  advice (evidence and changes: trainprof advise ");
  ASSERT_NE(advice, std::string::npos) << summary;
  EXPECT_LT(advice, summary.find("top by self time")) << summary;
  EXPECT_NE(summary.find("    1. the training loop waits for data: worth "), std::string::npos) << summary;
}

TEST(AdvisorWorkload, ACleanLoopGetsNoFinding) {
  TempDir dir;
  std::string run = record_loop(dir.path(), 6, 0, 20);
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_TRUE(a.findings.empty()) << a.text;
  EXPECT_NE(a.text.find("no rule fired on its 1 run(s)"), std::string::npos) << a.text;
  EXPECT_EQ(a.json, "[]\n");
  EXPECT_NE(summarize_run(run).find("  advice: none of the advisor's rules fired"), std::string::npos);
}

TEST(AdvisorWorkload, CpusBusyWithOtherWorkAreNamed) {
  TempDir dir;
  ProfilerOptions o;
  o.host_sys = {HostSystem::Cpu};
  o.host_sys_interval_ms = 10;
  // Every core spun by threads that are not the training loop's.
  std::atomic<bool> spin{true};
  std::vector<std::thread> spinners;
  for (unsigned i = 0; i < std::max(2u, 2 * std::thread::hardware_concurrency()); ++i) {
    spinners.emplace_back([&spin] {
      while (spin.load(std::memory_order_relaxed)) {
      }
    });
  }
  std::string run = record_loop(dir.path(), 6, 0, 60, o);
  spin = false;
  for (std::thread& t : spinners) t.join();
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  EXPECT_EQ(a.findings[0].rule, "host_cpu_saturated") << a.text;
}

TEST(AdvisorWorkload, APeakNearTheMemoryLimitIsNamed) {
  TempDir dir;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // A cgroup limit 5 % above what this process has already held: its peak
  // at the end of the run is at least 95 % of it.
  uint64_t limit_mb = static_cast<uint64_t>(usage.ru_maxrss) / 1024 * 105 / 100 + 1;
  ASSERT_EQ(setenv("TRAINPROF_TEST_MEMORY_LIMIT_MB", std::to_string(limit_mb).c_str(), 1), 0);
  std::string run = record_loop(dir.path(), 4, 0, 10);
  unsetenv("TRAINPROF_TEST_MEMORY_LIMIT_MB");
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  EXPECT_EQ(a.findings[0].rule, "memory_near_limit") << a.text;
  EXPECT_NE(a.findings[0].evidence.find("cgroup memory limit (the process' peak resident set)"),
            std::string::npos)
      << a.text;
}

// Findings of the wrong shape in a hand-edited profiler_info.json: what is
// well-formed is read, the rest named, and nothing throws (advise, the
// summary, the report).
TEST(AdvisorWorkload, AHandEditedAdviceListIsReadSafely) {
  TempDir dir;
  std::string run = record_loop(dir.path(), 3, 0, 5);
  ASSERT_TRUE(advise(run).ok());
  std::string info_file = run + "/PROFILER_OUTPUT/profiler_info.json";
  nlohmann::json info = nlohmann::json::parse(test::read_text(info_file));
  info["analysis"]["advice"] = nlohmann::json::parse(
      R"([{"rule": "data_wait", "title": 5, "saving_ms": "much", "evidence": ["x"]}, 3, {"title": "no rule"}])");
  test::write_bytes(info_file, info.dump());
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_EQ(a.findings.size(), 1u) << a.text;
  EXPECT_EQ(a.findings[0].title, "data_wait");  // the rule stands for a title that is not text
  EXPECT_LT(a.findings[0].saving_ms, 0);
  EXPECT_EQ(a.warnings.size(), 2u);
  EXPECT_NE(summarize_run(run).find("    1. data_wait\n"), std::string::npos) << summarize_run(run);
  EXPECT_TRUE(write_report(run).error.empty());
}

std::string cli() {
  return std::string(TRAINPROF_TEST_BIN_DIR) + "/trainprof";
}

TEST(AdvisorCli, PrintsTextOrJsonAndNamesBadPaths) {
  TempDir dir;
  std::string run = record_loop(dir.path(), 5, 20, 10);
  test::ProcessResult r = test::run_process({cli(), "advise", run});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1. the training loop waits for data"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("   change: feed the loop faster"), std::string::npos) << r.output;
  r = test::run_process({cli(), "advise", run, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("[\n {\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("  \"rule\": \"data_wait\",\n"), std::string::npos) << r.output;
  r = test::run_process({cli(), "advise", dir.sub("missing")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing"), std::string::npos) << r.output;
  EXPECT_EQ(test::run_process({cli(), "advise"}).exit_code, 2);
  EXPECT_EQ(test::run_process({cli(), "advise", run, "--bogus"}).exit_code, 2);
}

}  // namespace
}  // namespace trainprof
