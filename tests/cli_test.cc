// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The `trainprof` command: usage, exit codes, output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string cli() {
  return std::string(TRAINPROF_TEST_BIN_DIR) + "/trainprof";
}

test::ProcessResult run(std::vector<std::string> args) {
  args.insert(args.begin(), cli());
  return test::run_process(args);
}

std::string record_run(const std::string& dir, int steps) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  for (int s = 0; s < steps; ++s) {
    { TRAINPROF_RANGE("cli_work"); }
    prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

TEST(Cli, HelpVersionAndBadUsage) {
  auto r = run({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "trainprof " + std::string(version()) + "\n");
  r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("analyse PATH"), std::string::npos);
  r = run({"analyse", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos);
  EXPECT_NE(r.output.find("--jobs"), std::string::npos);
  r = run({"summary", "--help"});
  EXPECT_EQ(r.exit_code, 0);

  for (const std::vector<std::string>& bad : {std::vector<std::string>{},
                                              {"frobnicate"},
                                              {"analyse"},
                                              {"analyse", "x", "--jobs", "0"},
                                              {"analyse", "x", "--steps", "3-x"},
                                              {"analyse", "x", "--bogus"},
                                              {"analyse", "a", "b"},
                                              {"summary"}}) {
    r = run(bad);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("usage:"), std::string::npos) << r.output;
  }
}

TEST(Cli, AnalyseAndSummary) {
  TempDir dir;
  std::string run_dir = record_run(dir.path(), 4);
  auto r = run({"analyse", dir.path(), "--steps", "1-2", "--pretty"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 of 1 run(s) analysed"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  r = run({"summary", dir.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cli_work"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PROFILER_OUTPUT"), std::string::npos) << r.output;
  // Steps 1 and 2 only.
  EXPECT_NE(r.output.find("\n  1 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\n  3 "), std::string::npos) << r.output;
}

// Two runs of 5 steps: B's "compute" range sleeps 10 ms a step instead of
// 1 ms and B has an "extra" range. `trainprof diff` puts compute first,
// with the step's change, lists extra as only in B, and writes the CSV.
std::string record_variant(const std::string& dir, int compute_ms, bool extra) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  for (int s = 0; s < 5; ++s) {
    {
      TRAINPROF_RANGE("compute");
      std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
    }
    if (extra) {
      TRAINPROF_RANGE("extra");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The last step ends at stop(), not at a step() call: a step() just
    // before stop() would leave an open step of a few microseconds that a
    // loaded machine can stretch past half the median, and the run would
    // count six steps.
    if (s + 1 < 5) prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

TEST(Cli, DiffRanksWhatChangedTheStep) {
  TempDir a_dir, b_dir, out;
  // Steps of 5 and 20 ms: a loaded machine stretched two of three 1 ms
  // steps past twice the third, which the median's half then left out.
  std::string a = record_variant(a_dir.path(), 5, false), b = record_variant(b_dir.path(), 20, true);
  DiffReport d = diff_runs(a, b);  // analyses both
  ASSERT_TRUE(d.ok()) << d.error;
  // Steps 1-3: 0 is the start-up, 4 (ended by stop()) the tail; the calls
  // per step are those inside them (the start-up's compute is not one).
  EXPECT_EQ(d.steps_a, 3);
  EXPECT_EQ(d.steps_b, 3);
  ASSERT_GE(d.rows.size(), 2u);
  EXPECT_EQ(d.rows[0].name, "compute");
  EXPECT_EQ(d.rows[0].status, "both");
  EXPECT_GT(d.rows[0].delta_us(), 5000) << d.text;
  EXPECT_GT(d.step_us_b - d.step_us_a, 5000) << d.text;
  EXPECT_EQ(d.rows[0].calls_a, 1.0);
  EXPECT_EQ(d.rows[0].calls_b, 1.0);
  auto extra = std::find_if(d.rows.begin(), d.rows.end(), [](const DiffRow& r) { return r.name == "extra"; });
  ASSERT_NE(extra, d.rows.end());
  EXPECT_EQ(extra->status, "added");

  std::string csv = out.sub("diff.csv");
  auto r = run({"diff", a, b, "--csv", csv});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t changed = r.output.find("what changed per step");
  ASSERT_NE(changed, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("compute (host)", changed), std::string::npos) << r.output;
  EXPECT_LT(r.output.find("compute (host)", changed), r.output.find("extra (host)", changed)) << r.output;
  EXPECT_NE(r.output.find("only in B: extra (host)"), std::string::npos) << r.output;
  std::string table = test::read_text(csv);
  EXPECT_EQ(table.rfind("Name,Where,Status,Calls per Step A,", 0), 0u) << table;
  EXPECT_NE(table.find("\r\ncompute,host,both,1.000,1.000,"), std::string::npos) << table;

  EXPECT_EQ(run({"diff", a}).exit_code, 2);
  r = run({"diff", a, out.sub("missing")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing"), std::string::npos) << r.output;
  TempDir two;
  record_variant(two.path(), 1, false);
  record_variant(two.path(), 1, false);
  r = run({"diff", a, two.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is not one run or one job (2 runs at or below it, two of rank 0: "),
            std::string::npos)
      << r.output;
}

// A recorded loop whose step waits 2 ms for a batch, computes 8 ms in a
// range, and does a little outside every range: its critical path is those
// three, in that order, and covers each step.
TEST(Cli, TheCriticalPathOfEachStepIsWrittenAndSummarized) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.data_process = true;
  Profiler prof(o);
  for (int s = 0; s < 4; ++s) {
    {
      DataStage wait("loader", kStageLoaderWait);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    {
      TRAINPROF_RANGE("compute");
      std::this_thread::sleep_for(std::chrono::milliseconds(8));
    }
    prof.step();
  }
  prof.stop();
  std::string run_dir = prof.last_run().run_dir;
  auto r = run({"analyse", run_dir});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string table = test::read_text(run_dir + "/PROFILER_OUTPUT/critical_path.csv");
  ASSERT_EQ(table.rfind("Step,Kind,Name,Thread Id,Device Id,Stream Id,Start Time(us),Duration(us),Step "
                        "Share(%),Count,Python\r\n",
                        0),
            0u)
      << table;
  std::map<std::string, double> share_of_step;       // step -> summed share
  std::map<std::string, std::string> kinds_of_step;  // step -> its kinds in order
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 11u) << line;  // the last, Python, empty: no samples in C++
    share_of_step[f[0]] += std::stod(f[8]);
    if (f[1] == "host untracked") continue;  // between the two: the loop's own few microseconds
    std::string& kinds = kinds_of_step[f[0]];
    std::string kind = f[1] + (f[2].empty() ? "" : ":" + f[2]);
    if (kinds.rfind(kind) == std::string::npos || kinds.rfind(kind) + kind.size() != kinds.size())
      kinds += (kinds.empty() ? "" : " ") + kind;
  }
  ASSERT_GE(share_of_step.size(), 3u) << table;
  for (const std::string step :
       {"1", "2"}) {  // whole steps: the first began at start(), one is open at stop()
    double share = share_of_step[step];
    EXPECT_NEAR(share, 100.0, 0.05) << "step " << step << " is covered once\n" << table;
    EXPECT_EQ(kinds_of_step[step], "data wait:loader host:compute");
  }
  // The timeline's track of the path.
  nlohmann::json trace = nlohmann::json::parse(test::read_text(run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  bool track = false;
  size_t compute_segments = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name" &&
        e.at("args").value("name", "") == "Critical path")
      track = true;
    if (e.value("cat", "") == "critical_path" && e.value("name", "") == "host: compute") ++compute_segments;
  }
  EXPECT_TRUE(track);
  EXPECT_GE(compute_segments, 3u);  // one a step at least

  r = run({"summary", run_dir});
  EXPECT_NE(r.output.find("critical path (what decided the steps' length, critical_path.csv): host "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("longest on it: compute (host)"), std::string::npos) << r.output;
  // The default what-ifs: the data wait (on the path) hidden, the longest
  // name on it twice as fast; no communication to overlap.
  EXPECT_NE(r.output.find("what if data wait hidden: median step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("what if compute 2x faster: median step "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("communication overlapped"), std::string::npos) << r.output;
  nlohmann::json info =
      nlohmann::json::parse(test::read_text(run_dir + "/PROFILER_OUTPUT/profiler_info.json"));
  const nlohmann::json& what_if = info["analysis"]["what_if"];
  ASSERT_EQ(what_if.size(), 2u) << what_if.dump();
  for (const nlohmann::json& w : what_if)
    EXPECT_LT(w["estimated_step_ms"].get<double>(), w["median_step_ms"].get<double>()) << w.dump();
}

// Eight steps of: a wait for a batch of `wait_ms`, then "forward" holding
// "op" (`op_ms`) and 20 ms more. Tens of milliseconds: a loaded machine
// (sanitizers, parallel tests) oversleeps each sleep by up to a millisecond,
// which the 10 % comparison of two runs must not see.
std::string record_loop(const std::string& dir, int wait_ms, int op_ms) {
  ProfilerOptions o;
  o.output_path = dir;
  o.data_process = true;
  Profiler prof(o);
  for (int s = 0; s < 8; ++s) {
    if (wait_ms > 0) {
      DataStage wait("loader", kStageLoaderWait);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    }
    {
      TRAINPROF_RANGE("forward");
      {
        TRAINPROF_RANGE("op");
        std::this_thread::sleep_for(std::chrono::milliseconds(op_ms));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

// Each estimate against the run that makes the change for real: the loader
// made instant, the operator (inside "forward") made twice as fast. The
// median steps agree within 10 %.
TEST(Cli, WhatIfEstimatesMatchTheRealChangeWithinTenPercent) {
  TempDir dir;
  std::string recorded = record_loop(dir.sub("a"), 40, 60);
  WhatIfRequest hide;
  hide.hide_data_wait = true;
  WhatIfReport estimate = estimate_what_if(recorded, hide);
  ASSERT_TRUE(estimate.ok()) << estimate.error;
  EXPECT_EQ(estimate.change, "data wait hidden");
  EXPECT_GE(estimate.steps_counted, 6u) << estimate.text;
  WhatIfReport real =
      estimate_what_if(record_loop(dir.sub("b"), 0, 60), hide);  // nothing to hide: as recorded
  ASSERT_TRUE(real.ok()) << real.error;
  EXPECT_NEAR(estimate.estimated_step_ms, real.median_step_ms, 0.1 * real.median_step_ms)
      << estimate.text << real.text;
  EXPECT_LT(estimate.estimated_step_ms, estimate.median_step_ms - 3.0) << estimate.text;

  WhatIfRequest op;
  op.faster = "op";
  op.speedup = 2;
  estimate = estimate_what_if(recorded, op);
  ASSERT_TRUE(estimate.ok()) << estimate.error;
  real = estimate_what_if(record_loop(dir.sub("c"), 40, 30), hide);
  ASSERT_TRUE(real.ok()) << real.error;
  EXPECT_NEAR(estimate.estimated_step_ms, real.median_step_ms, 0.1 * real.median_step_ms)
      << estimate.text << real.text;
  EXPECT_LT(estimate.estimated_step_ms, estimate.median_step_ms - 2.0) << estimate.text;

  auto r = run({"whatif", recorded, "--faster", "op", "--speedup", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("what if op 3x faster:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("median step ("), std::string::npos) << r.output;
  EXPECT_EQ(run({"whatif", recorded}).exit_code, 2);  // no change named
  EXPECT_EQ(run({"whatif", recorded, "--faster", "op", "--speedup", "0"}).exit_code, 2);
  EXPECT_EQ(run({"whatif", recorded, "--speedup", "2"}).exit_code, 2);
  r = run({"whatif", dir.sub("missing"), "--hide-data-wait"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  // A name that matches nothing is no "+0.0 %": it is refused, with the names it is close to.
  r = run({"whatif", recorded, "--faster", "opp"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nothing named 'opp' was recorded"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean op"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("median step"), std::string::npos) << r.output;
  // A directory of runs, as every other command takes it: each run estimated.
  r = run({"whatif", dir.path(), "--hide-data-wait"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t reports = 0;
  for (size_t at = r.output.find("median step ("); at != std::string::npos;
       at = r.output.find("median step (", at + 1))
    ++reports;
  EXPECT_EQ(reports, 3u) << r.output;
}

TEST(Cli, SqlSaysWhichDatabaseAPathLacksAndWhichTablesThereAre) {
  TempDir dir;
  std::string recorded = record_run(dir.sub("runs"), 3);
  auto r = run({"sql", recorded, "SELECT 1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--export-type db"), std::string::npos) << r.output;
  r = run({"sql", dir.sub("runs"), "SELECT 1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("trainprof cluster PATH"), std::string::npos) << r.output;
  ASSERT_EQ(run({"analyse", recorded, "--export-type", "db"}).exit_code, 0);
  r = run({"sql", recorded, "SELECT COUNT(*) > 0 FROM slices"});  // the run's own database
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\n1\n"), std::string::npos) << r.output;
  r = run({"sql", recorded, "SELECT * FROM slice"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no such table: slice (did you mean slices"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the tables are: "), std::string::npos) << r.output;
  // One statement, and one that reads: the outputs are never changed here.
  r = run({"sql", recorded, "DELETE FROM slices"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("only a statement that reads"), std::string::npos) << r.output;
  r = run({"sql", recorded, "SELECT 1; DELETE FROM slices"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("one statement at a time"), std::string::npos) << r.output;
  r = run({"sql", recorded, "SELECT COUNT(*) > 0 FROM slices;"});  // a closing semicolon is no second one
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Cli, ARunsOutputsOrRawDataStandForTheRun) {
  TempDir dir;
  std::string recorded = record_run(dir.sub("runs"), 3);
  ASSERT_EQ(run({"analyse", recorded}).exit_code, 0);  // PROFILER_OUTPUT/ made
  for (const char* below : {"/PROFILER_OUTPUT", "/raw"}) {
    for (const std::vector<std::string>& command :
         {std::vector<std::string>{"summary"}, {"advise"}, {"analyse"}, {"whatif", "--hide-data-wait"}}) {
      std::vector<std::string> args = {command[0], recorded + below};
      args.insert(args.end(), command.begin() + 1, command.end());
      auto r = run(args);
      EXPECT_EQ(r.exit_code, 0) << command[0] << " " << below << ": " << r.output;
    }
  }
}

TEST(Cli, RunIsNamedInTheHelpAndExplainedWhereItIsNotThisProgramsCommand) {
  auto r = run({"--help"});
  EXPECT_NE(r.output.find("  run SCRIPT"), std::string::npos) << r.output;
  r = run({"run", "train.py"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("python -m trainprof run"), std::string::npos) << r.output;
}

TEST(Cli, FailuresAreListedAndExitOne) {
  TempDir dir;
  record_run(dir.sub("runs"), 2);
  std::string broken = record_run(dir.sub("runs"), 2);
  fs::remove_all(broken + "/raw");  // not analysable: no raw data, no outputs
  auto r = run({"analyse", dir.sub("runs"), "--jobs", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("1 of 2 run(s) analysed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 run(s) failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(broken), std::string::npos) << r.output;

  r = run({"analyse", dir.sub("nothing")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  fs::create_directories(dir.sub("empty"));
  r = run({"analyse", dir.sub("empty")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no trainprof run directory"), std::string::npos) << r.output;

  TempDir fresh;
  std::string unanalysed = record_run(fresh.path(), 1);
  r = run({"summary", fresh.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not analysed yet: trainprof analyse " + unanalysed), std::string::npos)
      << r.output;
}

TEST(Cli, SimplifyThenReanalyseSaysRawIsGone) {
  TempDir dir;
  std::string run_dir = record_run(dir.path(), 2);
  auto r = run({"analyse", run_dir + "/", "--simplify"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(run_dir + "/raw"));
  r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("removed by data simplification"), std::string::npos) << r.output;
}

bool parses(const std::string& path) {
  return nlohmann::json::accept(test::read_text(path));
}

// Issue 11 item 8: outputs were written through PROFILER_OUTPUT/NAME.tmp,
// opened O_TRUNC: a symlink planted there (by anyone who can write the
// directory) had its target overwritten, as root any file of the machine.
TEST(Cli, AnalyseNeverWritesThroughASymlinkPlantedInTheOutputDirectory) {
  TempDir dir;
  std::string run_dir = record_run(dir.sub("runs"), 3);
  std::string victim = dir.sub("victim");
  std::ofstream(victim) << "precious";
  fs::create_directory(run_dir + "/PROFILER_OUTPUT");
  for (const char* name :
       {"trace_view.json.tmp", "op_statistic.csv.tmp", "operator_details.csv.tmp", "step_trace_time.csv.tmp",
        "profiler_info.json.tmp", "profiler_metadata.json.tmp"}) {
    fs::create_symlink(victim, run_dir + "/PROFILER_OUTPUT/" + name);
  }
  auto r = run({"analyse", run_dir});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(victim), "precious");
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/profiler_info.json"));
  EXPECT_FALSE(fs::is_symlink(run_dir + "/PROFILER_OUTPUT/op_statistic.csv"));
}

TEST(Cli, ASymlinkedOutputDirectoryIsRefusedWithAMessage) {
  TempDir dir;
  std::string run_dir = record_run(dir.sub("runs"), 2);
  fs::create_directory(dir.sub("elsewhere"));
  fs::create_directory_symlink(dir.sub("elsewhere"), run_dir + "/PROFILER_OUTPUT");
  auto r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(run_dir + "/PROFILER_OUTPUT' is a symlink"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir.sub("elsewhere")));
}

// A symlink below the analysed PATH is not followed to a "run" elsewhere.
TEST(Cli, ASymlinkedRunBelowThePathIsNotAnalysed) {
  TempDir dir;
  std::string run_dir = record_run(dir.sub("elsewhere"), 1);
  fs::create_directory(dir.sub("runs"));
  fs::create_directory_symlink(run_dir, dir.sub("runs/planted_20260101000000000_trainprof"));
  auto r = run({"analyse", dir.sub("runs")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no trainprof run directory"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run_dir + "/PROFILER_OUTPUT"));
}

// A run with enough events that its analysis takes a while.
std::string record_big_run(const std::string& dir) {
  ProfilerOptions o;
  o.output_path = dir;
  o.buffer_mb = 128;
  Profiler prof(o);
  for (int s = 0; s < 20; ++s) {
    for (int i = 0; i < 50'000; ++i) {
      TRAINPROF_RANGE("outer");
      TRAINPROF_RANGE("inner");
    }
    prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

// Issue 11 item 10: two analyses of one run wrote the same temporary file
// and left an invalid trace_view.json, both exiting 0. Now one analysis of a
// run at a time holds its lock; another fails at once, saying why.
TEST(Cli, TwoAnalysesOfOneRunAtOnceLeaveValidOutputs) {
  TempDir dir;
  std::string run_dir = record_big_run(dir.path());
  test::ProcessResult results[2];
  std::thread first([&] { results[0] = run({"analyse", run_dir}); });
  std::thread second([&] { results[1] = run({"analyse", run_dir}); });
  first.join();
  second.join();
  int succeeded = 0;
  for (const test::ProcessResult& r : results) {
    if (r.exit_code == 0) {
      ++succeeded;
    } else {
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_NE(r.output.find("another analysis of this run is in progress"), std::string::npos) << r.output;
    }
  }
  EXPECT_GE(succeeded, 1);
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/profiler_info.json"));
  for (const auto& e : fs::directory_iterator(run_dir + "/PROFILER_OUTPUT")) {
    EXPECT_FALSE(e.path().filename().string().ends_with(".tmp")) << e.path();
  }
}

TEST(Cli, AnAnalysisInProgressMakesAnotherFailAtOnceWithAMessage) {
  TempDir dir;
  std::string run_dir = record_run(dir.path(), 2);
  int lock = open((run_dir + "/.analysis.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);  // as an analysis in progress holds it
  auto r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("another analysis of this run is in progress"), std::string::npos) << r.output;
  close(lock);
  r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Issue 11 item 11: `analyse --simplify` deleted raw/ of a run still being
// recorded by another process. Now the recording lock says the run is live:
// the outputs are marked partial and raw/ stays.
TEST(Cli, SimplifyKeepsTheRawDataOfARunStillBeingRecorded) {
  TempDir dir;
  test::Child child = test::spawn({test::helper_path("recording_child"), dir.path()});
  ASSERT_EQ(child.first_line.rfind("RUN ", 0), 0u) << child.first_line;
  std::string run_dir = child.first_line.substr(4);
  auto r = run({"analyse", run_dir, "--simplify"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("still being recorded"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raw/ is kept"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run_dir + "/raw/host.tpraw"));
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/trace_view.json"));

  std::ofstream(dir.sub("stop")) << "";
  int status = test::wait_status(child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  r = run({"analyse", run_dir, "--simplify"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("still being recorded"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run_dir + "/raw"));
}

// Issue 11 item 13: --trace-limit-mb 2^44 wrapped to a limit of 0 bytes.
// Every numeric option is range-checked, with a message giving the range.
TEST(Cli, NumericOptionsOutsideTheirRangeAreUsageErrors) {
  TempDir dir;
  std::string run_dir = record_run(dir.path(), 1);
  for (const char* limit : {"17592186044416", "18446744073709551616", "99999999999999999999999", "0", "-1",
                            "1048577", " 5", "5MB", ""}) {
    auto r = run({"analyse", run_dir, "--trace-limit-mb", limit});
    EXPECT_EQ(r.exit_code, 2) << limit << ": " << r.output;
    EXPECT_NE(r.output.find("--trace-limit-mb needs a number from 1 to 1048576"), std::string::npos)
        << r.output;
  }
  for (const char* jobs : {"0", "1025", "4294967297", "-3", "2x"}) {
    auto r = run({"analyse", run_dir, "--jobs", jobs});
    EXPECT_EQ(r.exit_code, 2) << jobs << ": " << r.output;
    EXPECT_NE(r.output.find("--jobs needs a number from 1 to 1024"), std::string::npos) << r.output;
  }
  auto r = run({"analyse", run_dir, "--trace-limit-mb", "1048576", "--jobs", "1024"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("trace cut"), std::string::npos) << r.output;
}

// Issue 11 item 15: a profiler_info.json field of the wrong type aborted
// analyse and summary (an uncaught nlohmann::json exception).
TEST(Cli, AnInfoFileWithFieldsOfTheWrongTypeIsReportedNotFatal) {
  TempDir dir;
  std::string run_dir = record_run(dir.path(), 2);
  std::string info_path = run_dir + "/profiler_info.json";
  auto info = nlohmann::json::parse(test::read_text(info_path));
  info["pid"] = "abc";
  info["clock"] = 5;
  std::ofstream(info_path) << info.dump();
  auto r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;  // the raw data is what is analysed
  EXPECT_NE(r.output.find("'" + info_path + "': field \"pid\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'" + info_path + "': field \"clock\""), std::string::npos) << r.output;
  EXPECT_TRUE(parses(run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  auto out_info = nlohmann::json::parse(test::read_text(run_dir + "/PROFILER_OUTPUT/profiler_info.json"));
  EXPECT_FALSE(out_info.contains("pid"));
  EXPECT_TRUE(out_info.contains("analysis"));
  r = run({"summary", run_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cli_work"), std::string::npos) << r.output;

  std::ofstream(info_path) << "[1, 2]";  // not an object at all
  r = run({"analyse", run_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("'" + info_path + "' is not a JSON object"), std::string::npos) << r.output;

  std::string out_info_path = run_dir + "/PROFILER_OUTPUT/profiler_info.json";
  for (const char* analysis : {R"({"memory": {"steps": 5}})", R"({"memory": {"steps": [{"Step": "x"}]}})",
                               R"({"memory": 7})", R"(3)"}) {
    std::ofstream(out_info_path) << R"({"pid": "abc", "analysis": )" << analysis << "}";
    r = run({"summary", run_dir});
    EXPECT_EQ(r.exit_code, 0) << analysis << ": " << r.output;
    EXPECT_NE(r.output.find("warning: '" + out_info_path + "': field \"analysis"), std::string::npos)
        << analysis << ": " << r.output;
    EXPECT_NE(r.output.find("cli_work"), std::string::npos) << r.output;
  }
}

// The option table of docs/GUIDE.md is `trainprof options --markdown`, the
// table the parser is made from: an option added, renamed or changed there
// fails here until the guide says so.
TEST(Cli, TheGuidesOptionTableIsTheOptionTable) {
  test::ProcessResult r = run({"options", "--markdown"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string guide = test::read_text(std::string(TRAINPROF_TEST_DOCS_DIR) + "/GUIDE.md");
  const std::string begin = "<!-- trainprof options --markdown -->\n",
                    end = "<!-- end of trainprof options -->";
  size_t from = guide.find(begin), to = guide.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/GUIDE.md lacks the marker " << begin;
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(guide.substr(from + begin.size(), to - from - begin.size()), r.output);
  EXPECT_NE(r.output.find("| `buffer_mb` | uint | `64` | [1, 1048576] |"), std::string::npos) << r.output;
  test::ProcessResult plain = run({"options"});
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_NE(plain.output.find("profile_memory (bool, default false)"), std::string::npos) << plain.output;
  EXPECT_EQ(run({"options", "--bogus"}).exit_code, 2);
}

}  // namespace
}  // namespace trainprof
