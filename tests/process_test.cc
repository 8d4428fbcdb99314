// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Whole-process behaviour in child processes: SIGKILL, SIGTERM/SIGINT,
// environment activation, exhausted buffers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;

using test::Child;
using test::spawn;
using test::wait_status;

std::string field(const std::string& line, int index) {
  std::istringstream in(line);
  std::string word;
  for (int i = 0; i <= index; ++i) in >> word;
  return word;
}

std::vector<double> counter_values(const raw::RawFile& f) {
  std::vector<double> v;
  for (const auto& e : f.events) {
    if (e.kind == raw::EventKind::kCounter) v.push_back(std::bit_cast<double>(e.b));
  }
  return v;
}

TEST(Process, SigkillLosesAtMostTheLastFlushInterval) {
  TempDir dir;
  Child c = spawn({test::helper_path("crash_child"), dir.path()});
  ASSERT_EQ(field(c.first_line, 0), "RUN") << c.first_line;
  std::string run = field(c.first_line, 1);
  // 1 MB flushed holds thousands of iterations (an iteration's records take
  // well under 100 bytes), whatever the load on the machine.
  ASSERT_TRUE(test::wait_for_raw_bytes(run, 1 << 20)) << "the child flushed nothing for 60 s";
  kill(c.pid, SIGKILL);
  int status = wait_status(c);
  ASSERT_TRUE(WIFSIGNALED(status));

  raw::RawFile f = test::read_run(run);
  EXPECT_FALSE(f.closed_cleanly);
  for (const raw::RawIssue& issue : f.issues) EXPECT_TRUE(issue.truncated_tail) << issue.message;
  // Everything that reached the disk is an exact prefix of the sequence.
  std::vector<double> seq = counter_values(f);
  ASSERT_GT(seq.size(), 1000u) << "1 MB of flushed recording";
  for (size_t i = 0; i < seq.size(); ++i) ASSERT_EQ(seq[i], static_cast<double>(i));
  // The last stats chunk reported at most what is there.
  EXPECT_LE(f.reported_events_written, f.events.size());
  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["complete"], false);
  EXPECT_TRUE(info["stop_time_ns"].is_null());
}

void check_signal_flush(int sig, bool chain) {
  TempDir dir;
  const int n = 50000;
  std::vector<std::string> argv = {test::helper_path("signal_child"), dir.path(), std::to_string(n)};
  if (chain) argv.push_back("chain");
  Child c = spawn(argv);
  ASSERT_EQ(field(c.first_line, 0), "READY") << c.first_line;
  std::string run = field(c.first_line, 1);
  kill(c.pid, sig);
  int status = wait_status(c);
  if (chain) {
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7) << "the user's handler must still run";
  } else {
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), sig) << "the default action must still happen";
  }
  raw::RawFile f = test::read_run(run);
  EXPECT_TRUE(f.issues.empty());
  std::vector<double> seq = counter_values(f);
  ASSERT_EQ(seq.size(), static_cast<size_t>(n)) << "the signal must flush every event";
  for (int i = 0; i < n; ++i) ASSERT_EQ(seq[i], i);
  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["stop_reason"], "signal");
  EXPECT_EQ(info["events_recorded"], n);
}

TEST(Process, SigtermFlushesEverythingThenTerminates) {
  check_signal_flush(SIGTERM, false);
}
TEST(Process, SigintFlushesEverythingThenTerminates) {
  check_signal_flush(SIGINT, false);
}
TEST(Process, SigtermChainsTheUsersHandler) {
  check_signal_flush(SIGTERM, true);
}

TEST(Process, EnvironmentActivationProfilesAnUnmodifiedProgram) {
  TempDir dir;
  std::string opts = R"({"start": true, "output_path": ")" + dir.sub("env") + R"(", "buffer_mb": 2})";
  test::ProcessResult r = test::run_process({test::helper_path("env_child")}, {{"TRAINPROF_OPTIONS", opts}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("child done"), std::string::npos);
  auto runs = test::run_dirs(dir.sub("env"));
  ASSERT_EQ(runs.size(), 1u) << r.output;
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_EQ(test::count_by_name(f)["env_work"], 2000u);
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_EQ(info["stop_reason"], "stop");
  EXPECT_EQ(info["options"]["buffer_mb"], 2);
}

TEST(Process, BadEnvironmentOptionsAreReportedAndTheProgramRuns) {
  TempDir dir;
  struct Case {
    std::string json;
    std::string message;
  };
  std::vector<Case> cases = {
      {R"({"start": true, "output_path": )", "not valid JSON"},
      {R"({"output_path": "x"})", "\"start\" is mandatory"},
      {R"({"start": true, "bufer_mb": 3})", "\"bufer_mb\" is unknown"},
      {R"({"start": true, "flush_interval_ms": "fast"})", "flush_interval_ms"},
  };
  for (const Case& c : cases) {
    test::ProcessResult r = test::run_process({test::helper_path("env_child")},
                                              {{"TRAINPROF_OPTIONS", c.json}, {"TMPDIR", dir.path()}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("child done"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.json << " -> " << r.output;
    EXPECT_NE(r.output.find("runs without profiling"), std::string::npos) << r.output;
  }
  // start: false profiles nothing and says so.
  test::ProcessResult r = test::run_process(
      {test::helper_path("env_child")},
      {{"TRAINPROF_OPTIONS", R"({"start": false, "output_path": ")" + dir.sub("off") + "\"}"}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(test::run_dirs(dir.sub("off")).empty());
}

// What drop_child reports about its run.
struct DropReport {
  bool parsed = false;
  unsigned long long attempted = 0, recorded = 0, dropped = 0;
  unsigned block = 0;
  std::string run;
  std::string output;
};

DropReport run_drop_child(const std::string& dir, const std::string& mode) {
  DropReport d;
  test::ProcessResult r = test::run_process({test::helper_path("drop_child"), dir, mode});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  size_t at = r.output.find("ATTEMPTED");
  char run[4096] = {};
  d.parsed =
      at != std::string::npos &&
      std::sscanf(r.output.c_str() + at, "ATTEMPTED %llu RECORDED %llu DROPPED %llu BLOCK %u\nRUN %4095s",
                  &d.attempted, &d.recorded, &d.dropped, &d.block, run) == 5;
  EXPECT_TRUE(d.parsed) << r.output;
  d.run = run;
  d.output = r.output;
  if (d.dropped > 0) {
    EXPECT_NE(r.output.find(std::to_string(d.dropped) + " events were dropped"), std::string::npos)
        << r.output;
  }
  return d;
}

TEST(Process, ExhaustedBufferDropsAnExactCount) {
  TempDir dir;
  DropReport d = run_drop_child(dir.path(), "paused");
  ASSERT_TRUE(d.parsed);
  const unsigned long long kept = 16ull * d.block;  // 1 MiB = 16 blocks of 64 KiB
  EXPECT_EQ(d.dropped, 100000 - kept);
  EXPECT_EQ(d.recorded, kept + 1);  // + ProfilerStep#0
  raw::RawFile f = test::read_run(d.run);
  EXPECT_EQ(f.events.size(), d.recorded);
  EXPECT_EQ(f.reported_events_dropped, d.dropped);
  // The flusher was held: every block in use was waiting for it.
  EXPECT_NE(d.output.find("The writer is the bottleneck"), std::string::npos) << d.output;
}

TEST(Process, DropAccountingIsExactUnderLoad) {
  TempDir dir;
  DropReport d = run_drop_child(dir.path(), "threads");
  ASSERT_TRUE(d.parsed);
  EXPECT_EQ(d.recorded + d.dropped, d.attempted);
  raw::RawFile f = test::read_run(d.run);
  EXPECT_EQ(f.events.size(), d.recorded);
  auto info = nlohmann::json::parse(test::read_text(d.run + "/profiler_info.json"));
  EXPECT_EQ(info["events_dropped"], d.dropped);
  EXPECT_EQ(info["events_recorded"], d.recorded);
}

TEST(Process, ExitWithoutStopClosesTheRun) {
  TempDir dir;
  test::ProcessResult r = test::run_process({test::helper_path("scenario_child"), dir.path(), "exit"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_EQ(test::count_by_name(f)["before_exit"], 1000u);
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_EQ(info["stop_reason"], "exit");
  EXPECT_EQ(info["complete"], true);
}

TEST(Process, WriteFailureDisablesCollectionNotTraining) {
  TempDir dir;
  test::ProcessResult r = test::run_process({test::helper_path("scenario_child"), dir.path(), "io_limit"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training continues ok=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the disk refused the write"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host.tpraw"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collection disabled"), std::string::npos) << r.output;
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  // What was written before the limit is still readable.
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_GT(test::count_by_name(f)["step_work"], 10000u);
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_EQ(info["complete"], false);
  EXPECT_NE(info["io_error"].get<std::string>().find("File too large"), std::string::npos);
}

// The count of recorded events does not come from the flusher alone: the
// program knows it recorded exactly 50,000 ranges and a step before the one
// write, at stop, that the disk took only in part. Every event of a chunk it did not
// take whole is lost, and recorded = what the program recorded, exactly.
TEST(Process, EventsOfAPartlyWrittenChunkAreCountedAsLost) {
  TempDir dir;
  test::ProcessResult r =
      test::run_process({test::helper_path("scenario_child"), dir.path(), "io_limit_at_stop"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  unsigned long long attempted = 0, recorded = 0, lost = 0;
  size_t counts = r.output.find("attempted=");
  ASSERT_NE(counts, std::string::npos) << r.output;
  ASSERT_EQ(std::sscanf(r.output.c_str() + counts, "attempted=%llu recorded=%llu lost=%llu", &attempted,
                        &recorded, &lost),
            3)
      << r.output;
  EXPECT_EQ(recorded, attempted);
  EXPECT_GT(lost, 0u);
  EXPECT_LT(lost, attempted);  // the disk took a part
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_EQ(f.events.size(), attempted - lost);
}

// The events the disk refused are counted as lost, said at the cycle end and
// in profiler_info.json, and the analysis names the refused write instead of
// a killed process.
TEST(Process, EventsTheDiskRefusedAreCountedAsLostAndNamed) {
  TempDir dir;
  test::ProcessResult r = test::run_process({test::helper_path("scenario_child"), dir.path(), "io_limit"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  unsigned long long recorded = 0, lost = 0;
  size_t counts = r.output.find("recorded=");
  ASSERT_NE(counts, std::string::npos) << r.output;
  ASSERT_EQ(std::sscanf(r.output.c_str() + counts, "recorded=%llu lost=%llu", &recorded, &lost), 2)
      << r.output;
  EXPECT_GT(lost, 0u);
  EXPECT_NE(r.output.find("trace ready: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(recorded) + " events recorded, 0 dropped, " + std::to_string(lost) +
                          " lost: the disk refused the write of "),
            std::string::npos)
      << r.output;
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  // Recorded = what the disk holds + what it refused, exactly.
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_EQ(f.events.size(), recorded - lost);
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_EQ(info["events_recorded"].get<uint64_t>(), recorded);
  EXPECT_EQ(info["events_lost"].get<uint64_t>(), lost);
  std::string io_error = info["io_error"].get<std::string>();
  EXPECT_NE(io_error.find("host.tpraw: File too large"), std::string::npos) << io_error;

  AnalyseReport report = analyse(runs[0]);
  ASSERT_EQ(report.runs.size(), 1u);
  ASSERT_TRUE(report.runs[0].ok) << report.runs[0].error;
  bool named = false;
  for (const std::string& w : report.runs[0].warnings) {
    EXPECT_EQ(w.find("not closed normally"), std::string::npos) << w;
    named |= w.find("ends where the recording failed: " + io_error + " (" + std::to_string(lost) +
                    " recorded events never reached it)") != std::string::npos;
  }
  EXPECT_TRUE(named) << nlohmann::json(report.runs[0].warnings).dump(1);
}

TEST(Process, MonotonicClockFallback) {
  TempDir dir;
  std::string opts = R"({"start": true, "output_path": ")" + dir.path() + R"("})";
  test::ProcessResult r = test::run_process({test::helper_path("env_child")},
                                            {{"TRAINPROF_OPTIONS", opts}, {"TRAINPROF_CLOCK", "monotonic"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_EQ(f.header.clock_source, 2u);
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_EQ(info["clock"]["source"], "monotonic");
  EXPECT_EQ(test::count_by_name(f)["env_work"], 2000u);
  for (const auto& e : f.events) {
    EXPECT_GE(e.t0_ns, f.header.anchor_monotonic_ns);
    EXPECT_LT(e.t1_ns - e.t0_ns, 10'000'000'000ull);
  }
}

TEST(Process, PreloadProfilesAProgramThatNeverLinkedTrainprof) {
#ifdef TRAINPROF_TEST_SANITIZED
  GTEST_SKIP() << "a sanitized library cannot be preloaded into an unsanitized program";
#else
  TempDir dir;
  std::string opts = R"({"start": true, "output_path": ")" + dir.path() + R"("})";
  test::ProcessResult r = test::run_process(
      {"/bin/echo", "hello from echo"}, {{"TRAINPROF_OPTIONS", opts}, {"LD_PRELOAD", TRAINPROF_TEST_LIB}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hello from echo"), std::string::npos);
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u) << r.output;
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  ASSERT_EQ(f.events.size(), 1u);  // the process lifetime as ProfilerStep#0
  EXPECT_EQ(f.events[0].kind, raw::EventKind::kStep);
#endif
}

}  // namespace
}  // namespace trainprof
