// Copyright trainprof authors. The `trainprof` command: usage, exit codes, output.
#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace trainprof
