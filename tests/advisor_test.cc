// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The advisor (analysis/advisor.h, trainprof/advise.h): each rule fires at its
// threshold and not below it on facts written by hand; recorded workloads that
// plant one problem get that finding first, a clean one gets none; `trainprof
// advise` prints them.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
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
  // 400 operators a call of 10 us each, 18 ms a call: a multi-tensor step
  // saves a third, 6 ms of the 100 ms step.
  f.host.push_back(NameFacts{"Optimizer.step#SGD.step", false, 10, 180'000'000, 140'000'000, 4000});
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"unfused_optimizer"});
  EXPECT_EQ(x[0].title, "the optimizer runs per parameter (SGD)");
  EXPECT_NE(x[0].change.find("torch.optim.SGD(..., foreach=True), or fused=True (torch 2.4"),
            std::string::npos)
      << x[0].change;
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 6);
  EXPECT_NE(x[0].evidence.find("400 operators per call averaging 10.0 us"), std::string::npos)
      << x[0].evidence;
  f.device_time = true;
  EXPECT_NE(analysis::advise(f)[0].change.find("fused=True (one kernel for all parameters on the GPU)"),
            std::string::npos);
  f.device_time = false;
  f.host[0].child_calls = 390;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].child_calls = 4000;
  // A smaller share of the step: 14 ms a call, 4.7 ms saved, under a twentieth.
  f.host[0].total_ns = 140'000'000;
  f.host[0].self_ns = 100'000'000;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  // Long child operators (40 us): the arithmetic dominates, and a
  // multi-tensor step promises nothing.
  f.host[0].total_ns = 180'000'000;
  f.host[0].self_ns = 20'000'000;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].self_ns = 140'000'000;
  f.host.push_back(NameFacts{"aten::_foreach_mul_", true, 10, 1'000'000, 1'000'000, 0});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
}

// An optimizer's operators are tiny, and its step's: the same time is not
// tiny_operators' too.
TEST(Advisor, AnOptimizersOperatorsAreNotAlsoTinyOperators) {
  AdviceFacts f = ten_steps();
  f.host.push_back(NameFacts{"Optimizer.step#Adam.step", false, 10, 300'000'000, 100'000'000, 20'000});
  // 10 us each, 20,000 of them in the optimizer's steps.
  f.host.push_back(NameFacts{"aten::mul_", true, 25'000, 250'000'000, 250'000'000, 0, 20'000, 200'000'000});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{"unfused_optimizer"});
  f.host[1].optimizer_calls = f.host[1].optimizer_self_ns = 0;  // a loop of the user's own
  EXPECT_EQ(rules(analysis::advise(f)), (Rules{"tiny_operators", "unfused_optimizer"}));
}

TEST(Advisor, NoSavingExceedsTheMedianStep) {
  AdviceFacts f = ten_steps();
  // Collections on several threads add up to more than the steps' time.
  f.host.push_back(NameFacts{"gc.collect (generation 2)", false, 40, 1'500'000'000, 1'500'000'000, 0});
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"gc_pauses"});
  EXPECT_DOUBLE_EQ(x[0].saving_ms, 100);
  EXPECT_EQ(x[0].saving_basis, "at most: the collections' time per step (capped at the median step)");
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

// The first full collection after set-up, however long, is an event, not
// collections pausing the steps.
TEST(Advisor, OneOrTwoCollectionsAreNotPauses) {
  AdviceFacts f = ten_steps();
  f.host.push_back(NameFacts{"gc.collect (generation 2)", false, 2, 200'000'000, 200'000'000, 0});
  EXPECT_EQ(rules(analysis::advise(f)), Rules{});
  f.host[0].calls = 3;
  EXPECT_EQ(rules(analysis::advise(f)), Rules{"gc_pauses"});
}

// Python outside operators: the loop's input from an iterator is a data
// wait, the program's own function a finding of its own, each at a tenth
// of the step; what the critical path did not see is not counted.
TEST(Advisor, HostWorkOutsideOperatorsIsNamedByItsFunction) {
  AdviceFacts f = ten_steps();
  f.sampling_ms = 5;
  f.outside = {{"batches (train.py:22)", 150, true},
               {"log_metrics (train.py:9)", 99, false},
               {"forward (model.py:40)", 30, false}};
  f.outside_sampled_ms = 279;
  std::vector<Finding> x = analysis::advise(f);
  ASSERT_EQ(rules(x), Rules{"data_wait"});
  EXPECT_EQ(x[0].title, "the training loop waits for its input (a Python iterator)");
  EXPECT_NE(
      x[0].evidence.find("15.000 ms per step (15.0 % of the step time) pulling the next batch outside any "
                         "DataLoader: batches (train.py:22) 15.000 ms"),
      std::string::npos)
      << x[0].evidence;
  EXPECT_NE(x[0].change.find("make batches (train.py:22) cheaper"), std::string::npos) << x[0].change;
  f.outside[1].ms = 100;
  x = analysis::advise(f);
  ASSERT_EQ(rules(x), (Rules{"data_wait", "host_outside_operators"}));
  EXPECT_EQ(x[1].title, "host work outside operators: log_metrics (train.py:9)");
  EXPECT_DOUBLE_EQ(x[1].saving_ms, 10);
  EXPECT_NE(x[1].evidence.find("log_metrics (train.py:9) 10.000 ms, forward (model.py:40) 3.000 ms"),
            std::string::npos)
      << x[1].evidence;
  // A GPU-bound step: the critical path saw a third of it untracked.
  f.host_untracked_path_ms = 93;
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

// `ms` in a range named `name`.
void in_range(const std::string& name, int ms) {
  trainprof::Range r(name);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

const char* const kCollection = "gc.collect (generation 2)";  // as the Python front names one

// Whatever runs before the first step boundary (a script's imports and
// set-up, whose collections are the interpreter's own) is the start-up
// phase: reported with its length and what it held, never a step, and no
// rule counts it.
TEST(AdvisorWorkload, StartUpIsAPhaseOfItsOwnThatNoRuleCounts) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int i = 0; i < 20; ++i) in_range(kCollection, 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int s = 0; s < 6; ++s) {
    in_range("compute", 20);
    prof.step();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // after the last step: the tail
  prof.stop();
  std::string run = prof.last_run().run_dir;
  AdviceReport a = advise(run);
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_TRUE(a.findings.empty()) << a.text;
  nlohmann::json info =
      nlohmann::json::parse(test::read_text(run + "/PROFILER_OUTPUT/profiler_info.json"))["analysis"];
  ASSERT_TRUE(info.contains("start_up")) << info.dump();
  const nlohmann::json& start_up = info["start_up"];
  EXPECT_EQ(start_up["recorded_as_step"], 0);
  EXPECT_GE(start_up["ms"].get<double>(), 200 + 20);  // the set-up and the first batch
  EXPECT_EQ(start_up["gc_collections"], 20);
  EXPECT_GE(start_up["gc_ms"].get<double>(), 100);
  EXPECT_EQ(start_up["top_by_self_time"][0]["name"], "gc.collect (generation 2)") << start_up.dump();
  ASSERT_TRUE(info.contains("tail"));
  EXPECT_EQ(info["tail"]["recorded_as_step"], 6);
  EXPECT_GE(info["tail"]["ms"].get<double>(), 50);
  // The step table holds steps 1-5, each about the 20 ms of compute.
  std::string steps = test::read_text(run + "/PROFILER_OUTPUT/step_trace_time.csv");
  for (int s = 1; s <= 5; ++s)
    EXPECT_NE(steps.find("\n" + std::to_string(s) + ","), std::string::npos) << steps;
  EXPECT_EQ(steps.find("\n0,"), std::string::npos) << steps;
  EXPECT_EQ(steps.find("\n6,"), std::string::npos) << steps;
  std::string summary = summarize_run(run);
  EXPECT_NE(summary.find("  start-up: 0."), std::string::npos) << summary;
  EXPECT_NE(summary.find("20 garbage collections"), std::string::npos) << summary;
  // A C++ program has no Python stacks to name its time outside operators.
  EXPECT_NE(summary.find("  Python outside operators: not available (no Python stack samples"),
            std::string::npos)
      << summary;
}

// The same collections inside the steps are the steps' problem.
TEST(AdvisorWorkload, CollectionsInsideTheStepsAreNamed) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int s = 0; s < 7; ++s) {
    in_range(kCollection, 10);
    in_range("compute", 20);
    prof.step();
  }
  prof.stop();
  AdviceReport a = advise(prof.last_run().run_dir);
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  EXPECT_EQ(a.findings[0].rule, "gc_pauses") << a.text;
  EXPECT_NE(a.text.find("6 collections"), std::string::npos) << a.text;  // steps 1-6
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

// A job the cluster pass found a straggler in, slow in compute: written
// by hand, each rank's operators per counted step as its analysis keeps
// them. `straggler_calls`: its aten::addmm calls over the 2 steps (the
// others make 4).
std::string job_with_a_compute_straggler(const std::string& root, int straggler_calls) {
  for (int rank = 0; rank < 3; ++rank) {
    std::string run = root + "/rank" + std::to_string(rank) + "_trainprof";
    std::filesystem::create_directories(run + "/PROFILER_OUTPUT");
    bool slow = rank == 1;
    nlohmann::json host = nlohmann::json::array(
        {{"aten::addmm", slow ? straggler_calls : 4, slow ? 30000.0 : 10000.0 + rank},
         {"aten::relu", 2, slow ? 2600.0 : 2000.0},
         {"c10d::allreduce_", 2, slow ? 90000.0 : 100.0},  // communication: never the compute's
         {"aten::zero_", 2, 50.0}});
    nlohmann::json info = {{"rank", rank},
                           {"analysis",
                            {{"advice", nlohmann::json::array()},
                             {"steps", {1, 2}},
                             {"in_steps", {{"host", host}, {"gpu", nlohmann::json::array()}}}}}};
    test::write_bytes(run + "/profiler_info.json", info.dump());
    test::write_bytes(run + "/PROFILER_OUTPUT/profiler_info.json", info.dump());
  }
  std::filesystem::create_directories(root + "/cluster_analysis_output");
  nlohmann::json straggler = {{"rule", "straggler"},
                              {"title", "rank 1 is a straggler the others wait for"},
                              {"evidence", "it arrived last in step(s) 1-2; cause: compute (...)"},
                              {"step_ms", 30.0},
                              {"saving_ms", 10.0},
                              {"cause", "compute"},
                              {"rank", 1}};
  test::write_bytes(root + "/cluster_analysis_output/cluster_analysis.json",
                    nlohmann::json({{"advice", {straggler}}}).dump());
  return root;
}

// The straggler's extra computing is named by operator against the
// others' median, and said to be more calls (more work) or as many (the
// same work, slower).
TEST(AdvisorJob, AComputeStragglersOperatorsAndCallsAreNamed) {
  TempDir dir;
  AdviceReport same = advise(job_with_a_compute_straggler(dir.path() + "/same", 4));
  ASSERT_TRUE(same.ok()) << same.error;
  ASSERT_EQ(same.findings.size(), 1u) << same.text;
  const std::string& evidence = same.findings[0].evidence;
  EXPECT_NE(
      evidence.find("; its extra computing, per step against the others' median: aten::addmm 15.000 vs "
                    "5.001 ms (+9.999), aten::relu 1.300 vs 1.000 ms (+0.300); the same operators as the "
                    "others, as many calls per step, each slower: a slower or busier processor on rank 1"),
      std::string::npos)
      << evidence;
  EXPECT_EQ(evidence.find("allreduce"), std::string::npos) << evidence;
  AdviceReport more = advise(job_with_a_compute_straggler(dir.path() + "/more", 12));
  ASSERT_EQ(more.findings.size(), 1u) << more.text;
  EXPECT_NE(more.findings[0].evidence.find("; more calls per step: aten::addmm 6.0 vs 2.0"),
            std::string::npos)
      << more.findings[0].evidence;
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
