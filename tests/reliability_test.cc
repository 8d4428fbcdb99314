// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Faults that must never hurt the profiled program (issue 11): runs that cannot
// open, fork, crashes, huge buffers, thousands of threads. Each case runs in a
// child process under a time limit, so a hang fails the test instead of
// stalling the suite.
#include <gtest/gtest.h>
#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;

// Runs a helper under a time limit: a hang is killed (exit code 137).
test::ProcessResult run_limited(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env = {}, int seconds = 60) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-s", "KILL", std::to_string(seconds)};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_process(argv, env);
}

// The word after `key` on the first line that has it.
std::string word_after(const std::string& text, const std::string& key) {
  size_t at = text.find(key + " ");
  if (at == std::string::npos) return "";
  std::istringstream in(text.substr(at + key.size() + 1));
  std::string word;
  in >> word;
  return word;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::vector<double> counter_values(const raw::RawFile& f, const std::string& name) {
  std::vector<double> v;
  for (const auto& e : f.events) {
    if (e.kind == raw::EventKind::kCounter && f.name(e.name_id) == name)
      v.push_back(std::bit_cast<double>(e.b));
  }
  return v;
}

// Every value of a counter sequence from 0 up, none missing, none twice.
void expect_exact_sequence(const raw::RawFile& f, const std::string& name) {
  std::vector<double> seq = counter_values(f, name);
  ASSERT_GT(seq.size(), 0u) << name;
  for (size_t i = 0; i < seq.size(); ++i) ASSERT_EQ(seq[i], static_cast<double>(i)) << name;
}

TEST(Reliability, ARunThatCannotOpenIsSkippedAndTheNextCycleRecords) {
  TempDir dir;
  test::ProcessResult r = run_limited({test::helper_path("reliability_child"), dir.path(), "open_fails"});
  ASSERT_EQ(r.exit_code, 0) << "the program must neither hang nor die:\n" << r.output;
  EXPECT_NE(r.output.find("PARENT DONE"), std::string::npos) << r.output;
  // One message for the failed cycle, not one per step.
  EXPECT_EQ(count_of(r.output, "cannot start profiling"), 1u) << r.output;
  EXPECT_NE(r.output.find("training goes on"), std::string::npos) << r.output;
  // The failed cycle left nothing behind; the second cycle is complete.
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u) << r.output;
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  auto counts = test::count_by_name(f);
  // Warmup steps are not recorded: the active steps 4 and 5.
  EXPECT_EQ(counts["work"], 200u);
  EXPECT_EQ(counts["ProfilerStep#4"] + counts["ProfilerStep#5"], 2u);
}

TEST(Reliability, HugeBufferIsCappedAndTakenAsNeeded) {
  TempDir dir;
  // 1 TiB of buffers asked for, with the preload-style activation: the
  // process must neither be killed nor hang.
  std::string opts = R"({"start": true, "buffer_mb": 1048576, "output_path": ")" + dir.sub("env") + "\"}";
  test::ProcessResult r = run_limited({test::helper_path("env_child")}, {{"TRAINPROF_OPTIONS", opts}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("child done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("buffer_mb=1048576 is more than this process should take"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("capped at"), std::string::npos) << r.output;
  auto runs = test::run_dirs(dir.sub("env"));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(test::count_by_name(test::read_run(runs[0]))["env_work"], 2000u);
}

TEST(Reliability, BufferCapFollowsTheMemoryRoom) {
  TempDir dir;
  // With 64 MiB of room the buffers may take 16 MiB: 64 MiB asked for is capped.
  std::string opts = R"({"start": true, "buffer_mb": 64, "output_path": ")" + dir.sub("env") + "\"}";
  test::ProcessResult r = run_limited({test::helper_path("env_child")},
                                      {{"TRAINPROF_OPTIONS", opts}, {"TRAINPROF_TEST_MEMORY_ROOM_MB", "64"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("capped at 16 MiB"), std::string::npos) << r.output;
}

void check_fork(const std::string& mode) {
  TempDir dir;
  // LeakSanitizer cannot judge a fork() child: what only the parent's other
  // threads referenced (their stacks, their thread-local destructor lists)
  // is unreachable in it. The parent's leaks are checked by the other tests.
  test::ProcessResult r = run_limited({test::helper_path("reliability_child"), dir.path(), mode},
                                      {{"ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1"}});
  ASSERT_EQ(r.exit_code, 0) << "neither process may hang:\n" << r.output;
  EXPECT_NE(r.output.find("CHILD DONE"), std::string::npos) << r.output;
  EXPECT_EQ(word_after(r.output, "CHILD STATUS"), "0") << r.output;
  EXPECT_NE(r.output.find("PARENT DONE"), std::string::npos) << r.output;
  std::string parent_run = word_after(r.output, "PARENT_RUN");
  ASSERT_FALSE(parent_run.empty()) << r.output;
  // The parent's data is whole: both sequences exact, nothing of the child's.
  raw::RawFile f = test::read_run(parent_run);
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_TRUE(f.issues.empty());
  expect_exact_sequence(f, "seq0");
  expect_exact_sequence(f, "seq1");
  auto counts = test::count_by_name(f);
  EXPECT_EQ(counts.count("child_work"), 0u);
  EXPECT_EQ(counts.count("child_own"), 0u);
  auto info = nlohmann::json::parse(test::read_text(parent_run + "/profiler_info.json"));
  EXPECT_EQ(info["stop_reason"], "stop");
  EXPECT_EQ(info["events_recorded"], f.events.size());

  std::string child_pid = word_after(r.output, "CHILD DONE");
  std::vector<std::string> runs = test::run_dirs(dir.path());
  if (mode == "fork_own_run") {
    // The child's own profiler records into its own run, named with its pid.
    std::string child_run = word_after(r.output, "CHILD_RUN");
    ASSERT_EQ(runs.size(), 2u) << r.output;
    EXPECT_NE(child_run.find("_" + child_pid + "_"), std::string::npos) << child_run;
    raw::RawFile c = test::read_run(child_run);
    EXPECT_EQ(test::count_by_name(c)["child_own"], 1000u);
    EXPECT_EQ(test::count_by_name(c).count("child_work"), 0u);
  } else {
    EXPECT_EQ(runs.size(), 1u) << r.output;
  }
}

TEST(Reliability, ForkedChildExitsAndTheParentsRunIsIntact) {
  check_fork("fork_exit");
}
TEST(Reliability, ForkedChildRecordsIntoItsOwnRun) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
#endif
  check_fork("fork_own_run");
}
TEST(Reliability, ForkedChildSteppingTheParentsProfilerLeavesItsRunAlone) {
  check_fork("fork_inherited");
}

void check_crash(const std::string& sig, int signo) {
#ifdef TRAINPROF_TEST_SANITIZED
  if (signo == SIGSEGV || signo == SIGBUS || signo == SIGFPE) {
    GTEST_SKIP() << "the sanitizers report faults themselves";
  }
#endif
  TempDir dir;
  test::ProcessResult r = run_limited({test::helper_path("reliability_child"), dir.path(), "crash", sig});
  // timeout(1) ends itself with the signal that ended the child.
  ASSERT_EQ(r.term_signal, signo) << "the crash must still end the process with its signal:\n" << r.output;
  std::string run = word_after(r.output, "RUN");
  ASSERT_FALSE(run.empty()) << r.output;
  // Nothing was flushed before the crash (60 s interval): the crash handler
  // wrote every event, the current block's included.
  raw::RawFile f = test::read_run(run);
  std::vector<double> seq = counter_values(f, "seq");
  ASSERT_EQ(seq.size(), 5000u) << r.output;
  for (size_t i = 0; i < seq.size(); ++i) ASSERT_EQ(seq[i], static_cast<double>(i));
  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["stop_reason"], "signal");
  EXPECT_EQ(info["signal"], sig);
  EXPECT_EQ(info["events_recorded"], 5000);
}

TEST(Reliability, SegfaultKeepsEveryRecordedEvent) {
  check_crash("SIGSEGV", SIGSEGV);
}
TEST(Reliability, AbortKeepsEveryRecordedEvent) {
  check_crash("SIGABRT", SIGABRT);
}
TEST(Reliability, BusErrorKeepsEveryRecordedEvent) {
  check_crash("SIGBUS", SIGBUS);
}

TEST(Reliability, ThousandsOfLiveThreadsAllRecord) {
  TempDir dir;
  const int threads = 1100, per_thread = 50;
  test::ProcessResult r = run_limited({test::helper_path("reliability_child"), dir.path(), "threads",
                                       std::to_string(threads), std::to_string(per_thread)},
                                      {}, 240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(word_after(r.output, "DROPPED"), "0") << r.output;
  raw::RawFile f = test::read_run(word_after(r.output, "RUN"));
  std::map<uint32_t, size_t> per_tid;
  for (const raw::RawEvent& e : f.events) {
    if (f.name(e.name_id) == "thread_work") ++per_tid[e.tid];
  }
  EXPECT_EQ(per_tid.size(), static_cast<size_t>(threads));
  for (const auto& [tid, n] : per_tid) ASSERT_EQ(n, static_cast<size_t>(per_thread)) << tid;
}

TEST(Reliability, ThreadsBeyondTheMemoryCapDropExactCountsPerThread) {
  TempDir dir;
  // 4 MiB of room: buffers capped at 1 MiB (16 blocks) for 200 threads.
  const int threads = 200, per_thread = 50;
  test::ProcessResult r = run_limited({test::helper_path("reliability_child"), dir.path(), "threads",
                                       std::to_string(threads), std::to_string(per_thread)},
                                      {{"TRAINPROF_TEST_MEMORY_ROOM_MB", "4"}}, 240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  uint64_t dropped = std::stoull(word_after(r.output, "DROPPED"));
  ASSERT_GT(dropped, 0u) << r.output;
  std::string run = word_after(r.output, "RUN");
  raw::RawFile f = test::read_run(run);
  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["events_dropped"], dropped);
  // Per thread: what was written plus what was dropped is what it recorded.
  std::map<std::string, uint64_t> written;
  for (const raw::RawEvent& e : f.events) {
    if (f.name(e.name_id) == "thread_work") ++written[std::to_string(e.tid)];
  }
  uint64_t sum = 0, threads_that_dropped = 0;
  const std::string main_tid = word_after(r.output, "MAIN_TID");
  for (const auto& [tid, n] : info["events_dropped_by_thread"].items()) {
    // The main thread's is the step it records at stop (lost when the cap
    // is still full then, on a loaded machine), not thread_work.
    if (tid != main_tid) {
      EXPECT_EQ(written[tid] + n.get<uint64_t>(), static_cast<uint64_t>(per_thread)) << tid;
    }
    sum += n.get<uint64_t>();
    ++threads_that_dropped;
  }
  EXPECT_EQ(sum, dropped);
  // The message tells how many threads lost events and why.
  EXPECT_NE(r.output.find(std::to_string(dropped) + " events were dropped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on " + std::to_string(threads_that_dropped) + " of the"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("The memory cap is the limit"), std::string::npos) << r.output;
}

// Child processes of this process that have ended and were not reaped.
int zombie_children() {
  int zombies = 0;
  std::string me = std::to_string(getpid());
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state, ppid;
    rest >> state >> ppid;
    zombies += state == "Z" && ppid == me;
  }
  return zombies;
}

// A schedule of one-step cycles with the async trace handler: every cycle
// asks for an analysis process. Ended ones are reaped at the next step, at
// most max_workers run at once, and every run is analysed in the end.
TEST(Reliability, AsyncAnalysesLeaveNoZombiesAndEveryRunIsAnalysed) {
  TempDir dir;
  ProfilerOptions o;
  o.schedule = Schedule{.wait = 0, .warmup = 0, .active = 1, .repeat = 0};
  o.on_trace_ready = trace_handler(dir.path(), "zombies", /*analyse=*/true, /*async=*/true);
  const int cycles = 150;
  int most_zombies = 0;
  {
    Profiler prof(o);
    for (int step = 0; step < cycles; ++step) {
      for (int i = 0; i < 200; ++i) {
        TRAINPROF_RANGE("work");
      }
      prof.step();
      if (step % 10 == 0) most_zombies = std::max(most_zombies, zombie_children());
    }
    prof.stop();
    EXPECT_TRUE(prof.wait_for_analysis());
  }
  // Between steps, at most the analyses that ended since the last step (one
  // at a time on this machine's max_workers) wait to be reaped.
  EXPECT_LE(most_zombies, static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 2)));
  EXPECT_EQ(zombie_children(), 0);
  std::vector<std::string> runs = test::run_dirs(dir.path());
  EXPECT_EQ(runs.size(), static_cast<size_t>(cycles + 1));  // + the partial cycle stop() closed
  for (const std::string& run : runs) {
    EXPECT_TRUE(std::filesystem::exists(run + "/PROFILER_OUTPUT/trace_view.json")) << run;
  }
}

}  // namespace
}  // namespace trainprof
