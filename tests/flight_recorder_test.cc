// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The flight recorder: always recording into a ring, writing a run directory
// only when a step is slow or a dump is asked for.
#include "trainprof/flight_recorder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/intern.h"
#include "core/out_of_memory.h"
#include "core/recorder.h"
#include "exporter/csv_reader.h"
#include "raw/format.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using nlohmann::json;
using test::TempDir;

// A step of `ms` milliseconds of ranges: the clock decides when it ends, so
// a thread preempted for a while still ends its step on time.
void work_for(std::chrono::milliseconds ms, int ranges_per_ms = 4) {
  auto end = std::chrono::steady_clock::now() + ms;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < ranges_per_ms; ++i) TRAINPROF_RANGE("work");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

json read_json(const std::string& path) {
  return json::parse(test::read_text(path));
}

FlightRecorderOptions options_in(const TempDir& dir) {
  FlightRecorderOptions o;
  o.profiler.output_path = dir.path();
  o.ring_mb = 8;
  return o;
}

// One step of 100 lasts 60 times as long as the others: exactly one dump,
// written without being asked, that names the step and the ratio; nothing
// else is written. A factor of 8 rather than the default 3: a 2-core machine
// busy with other tests stretches a 10 ms step now and then to 30 ms.
TEST(FlightRecorder, ASlowStepIsDumpedOnceWithItsRatio) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.slow_step_factor = 8;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  for (int step = 0; step < 100; ++step) {
    work_for(std::chrono::milliseconds(step == 60 ? 600 : 10));
    recorder.step();
  }
  recorder.wait_for_dumps();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  const FlightDump& d = dumps[0];
  ASSERT_TRUE(d.error.empty()) << d.error;
  EXPECT_EQ(d.trigger, "slow_step");
  EXPECT_EQ(d.reason.rfind("step 60 took ", 0), 0u) << d.reason;
  EXPECT_EQ(test::run_dirs(dir.path()), std::vector<std::string>{d.run_dir});

  json fired = read_json(d.run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["trigger"], "slow_step");
  EXPECT_EQ(fired["step"], 60);
  EXPECT_GT(fired["ratio"].get<double>(), 8.0);
  EXPECT_LT(fired["median_ns"].get<uint64_t>(), 75'000'000u);
  EXPECT_TRUE(fired["complete_from_monotonic_ns"].is_null());  // the ring dropped nothing
  // Analysed: the run holds the steps so far (0, the start-up, is none),
  // the slow one last.
  std::string steps = test::read_text(d.run_dir + "/PROFILER_OUTPUT/step_trace_time.csv");
  EXPECT_EQ(steps.find("\n0,"), std::string::npos) << steps;
  EXPECT_NE(steps.find("\n1,"), std::string::npos) << steps;
  EXPECT_NE(steps.find("\n60,"), std::string::npos) << steps;
  std::string summary = summarize_run(d.run_dir);
  EXPECT_NE(summary.find("  flight recorder: step 60 took "), std::string::npos) << summary;
  EXPECT_LT(summary.find("flight recorder"), summary.find("top by self time")) << summary;
}

// A small incident first, then a far larger one within the cooldown: the
// larger is dumped too, saying it is larger; one of the same size again is
// not. (A machine's noise dumped first must not hide the incident the user
// needs.)
TEST(FlightRecorder, ALargerSlowStepIsDumpedWithinTheCooldown) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.slow_step_factor = 8;
  o.analyse = false;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  for (int step = 0; step < 80; ++step) {
    int ms = step == 30 ? 200 : (step == 50 || step == 70) ? 1000 : 10;
    work_for(std::chrono::milliseconds(ms));
    recorder.step();
  }
  recorder.wait_for_dumps();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].reason.rfind("step 30 took ", 0), 0u) << dumps[0].reason;
  EXPECT_EQ(dumps[1].reason.rfind("step 50 took ", 0), 0u) << dumps[1].reason;
  EXPECT_NE(dumps[1].reason.find("; larger than the one dumped "), std::string::npos) << dumps[1].reason;
}

// A burst of slow steps after a smaller incident: one dump, written when the
// burst ends, whose run holds every one of its steps and the steps before.
TEST(FlightRecorder, ABurstOfSlowStepsIsOneDumpHoldingThemAll) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.slow_step_factor = 8;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  for (int step = 0; step < 60; ++step) {
    int ms = step == 20 ? 120 : (step >= 40 && step <= 43) ? 600 : 10;
    work_for(std::chrono::milliseconds(ms));
    recorder.step();
  }
  recorder.wait_for_dumps();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].reason.rfind("step 20 took ", 0), 0u) << dumps[0].reason;
  const FlightDump& burst = dumps[1];
  EXPECT_EQ(burst.reason.rfind("steps 40-43 slow, ", 0), 0u) << burst.reason;
  EXPECT_NE(burst.reason.find("; larger than the one dumped "), std::string::npos) << burst.reason;
  json fired = read_json(burst.run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["step"], 40);
  EXPECT_EQ(fired["last_step"], 43);
  exporter::CsvRows steps = exporter::read_csv_file(burst.run_dir + "/PROFILER_OUTPUT/step_trace_time.csv");
  std::set<std::string> numbers;
  for (size_t i = 1; i < steps.size(); ++i) numbers.insert(steps[i][0]);
  for (int step = 30; step <= 44; ++step) EXPECT_TRUE(numbers.count(std::to_string(step))) << step;
}

// Processes that spin on the training thread's one CPU make a step slow
// while the process's own CPU time stays that of a normal step: the dump
// says another process held the CPU (the training thread's wait for one,
// from the kernel's scheduler statistics). The spinners are made before
// recording, blocked on a pipe, let go as the planted step begins and
// stopped as it ends: the step holds their competition and nothing of
// making or reaping them (slow under a sanitizer).
TEST(FlightRecorder, ASlowStepOfAnotherProcessesCpuUseIsSaidToBeSo) {
  if (access("/proc/thread-self/schedstat", R_OK) != 0) GTEST_SKIP() << "no scheduler statistics here";
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &before)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // this thread: the training thread
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  constexpr int kSpinners = 8;
  std::vector<pid_t> spinners;
  for (int i = 0; i < kSpinners; ++i) {
    pid_t pid = fork();  // inherits the one CPU
    if (pid == 0) {
      char byte;
      if (read(go[0], &byte, 1) != 1) _exit(0);
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    ASSERT_GT(pid, 0);
    spinners.push_back(pid);
  }
  close(go[0]);
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.analyse = false;
  o.cooldown_s = 0;  // a step stretched by other tests first must not hold the planted one back
  std::vector<FlightDump> dumps;
  {
    FlightRecorder recorder(o);
    ASSERT_TRUE(recorder.recording());
    // Each step is 15 ms of this thread's CPU time, however long that takes.
    auto compute = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      double end = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9 + 0.015;
      volatile uint64_t n = 0;
      for (;;) {
        for (int i = 0; i < 1000; ++i) n = n + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        if (static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9 >= end) return;
      }
    };
    for (int step = 0; step < 30; ++step) {
      if (step == 25) {
        char bytes[kSpinners] = {};
        ASSERT_EQ(write(go[1], bytes, sizeof(bytes)), static_cast<ssize_t>(sizeof(bytes)));
      }
      compute();
      if (step == 25) {
        for (pid_t pid : spinners) kill(pid, SIGSTOP);
      }
      recorder.step();
    }
    recorder.wait_for_dumps();
    dumps = recorder.dumps();
  }
  for (pid_t pid : spinners) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  close(go[1]);
  ASSERT_EQ(sched_setaffinity(0, sizeof(before), &before), 0);
  auto planted = std::find_if(dumps.begin(), dumps.end(), [](const FlightDump& d) {
    return d.reason.rfind("step 25 took ", 0) == 0 || d.reason.rfind("steps 25-", 0) == 0;
  });
  ASSERT_NE(planted, dumps.end()) << "step 25 not dumped: " << dumps.size() << " dumps";
  EXPECT_NE(planted->reason.find("for a CPU: another process or the system held the CPU"), std::string::npos)
      << planted->reason;
  json fired = read_json(planted->run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["cause"]["kind"], "cpu_contention") << fired.dump();
  double longer = fired["cause"]["step_ms"].get<double>() - fired["cause"]["median_step_ms"].get<double>();
  EXPECT_GT(fired["cause"]["thread_cpu_wait_ms"].get<double>(), 0.5 * longer) << fired.dump();
}

// Wrong numbers: a NaN loss dumps the ring once (it stays NaN), a loss
// reported a step late lands on its step, and both are in the step
// health; a clean run's losses never dump; a spike does when asked.
TEST(FlightRecorder, ANonFiniteLossIsDumpedOnceAtTheStepItWentWrong) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.analyse = false;
  o.slow_step_factor = 0;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  for (int step = 0; step < 30; ++step) {
    if (step >= 1) recorder.loss(step < 20 ? 2.0 - step * 0.01 : std::nan(""), step - 1);  // a step late
    recorder.gradient_norm(0.5);
    recorder.step();
  }
  recorder.wait_for_dumps();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].trigger, "non_finite_loss");
  EXPECT_EQ(dumps[0].reason, "the loss is nan at step 19");
  json fired = read_json(dumps[0].run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["loss_step"], 19);
  EXPECT_EQ(fired["first_non_finite_loss"], json({{"step", 19}, {"value", "nan"}}));
  exporter::CsvRows rows = exporter::read_csv_file(dumps[0].run_dir + "/step_health.csv");
  ASSERT_GE(rows.size(), 20u);
  ASSERT_EQ(rows[0][8], "Loss");
  ASSERT_EQ(rows[0][9], "Gradient Norm");
  EXPECT_EQ(rows[19][8], "1.81") << "step 18, reported during step 19";
  EXPECT_EQ(rows[20][8], "nan") << "step 19";
  EXPECT_EQ(rows[5][9], "0.5");
}

TEST(FlightRecorder, ACleanRunsLossesNeverDumpAndASpikeDoesWhenAsked) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.analyse = false;
  o.slow_step_factor = 0;
  o.loss_spike_factor = 10;
  FlightRecorder recorder(o);
  for (int step = 0; step < 60; ++step) {
    recorder.loss(step == 50 ? 40.0 : 2.0 / (1 + step * 0.1));  // falling, then one spike
    recorder.step();
  }
  recorder.wait_for_dumps();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].trigger, "loss_spike");
  EXPECT_EQ(dumps[0].reason.rfind("the loss at step 50 is 40, ", 0), 0u) << dumps[0].reason;
}

// A ring smaller than what is recorded keeps the latest steps; a dump on
// request holds them, says from when they are complete, and the recorder
// goes on.
TEST(FlightRecorder, TheRingKeepsTheLastStepsWithinItsSize) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.ring_mb = 1;  // 16 blocks of 2,046 events
  o.slow_step_factor = 0;
  FlightRecorder recorder(o);
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 1000; ++i) TRAINPROF_RANGE("work");
    recorder.step();
  }
  FlightDump d = recorder.dump("the test asked");
  ASSERT_TRUE(d.error.empty()) << d.error;
  EXPECT_EQ(d.trigger, "request");
  json fired = read_json(d.run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["reason"], "the test asked");
  EXPECT_EQ(fired["step"], 200);  // the step under way
  ASSERT_TRUE(fired["complete_from_monotonic_ns"].is_number_unsigned());

  KeyAverages k = key_averages(d.run_dir, {.include_steps = true});
  ASSERT_TRUE(k.error.empty()) << k.error;
  std::map<std::string, uint64_t> count;
  for (const KeyAverage& row : k.rows) count[row.name] = row.count;
  // 200,000 ranges recorded; the ring held at most 16 blocks and the live one.
  EXPECT_GT(count["work"], 10'000u);
  EXPECT_LE(count["work"], 17u * 2046u);
  CallEvents calls = call_events(d.run_dir);
  ASSERT_TRUE(calls.error.empty()) << calls.error;
  bool last_step = false, first_step = false;
  for (const CallKey& key : calls.keys) {
    last_step |= key.name == "ProfilerStep#199";
    first_step |= key.name == "ProfilerStep#0";
  }
  EXPECT_TRUE(last_step);
  EXPECT_FALSE(first_step);

  // Recording goes on: a second dump holds the steps since.
  for (int step = 0; step < 5; ++step) recorder.step();
  FlightDump again = recorder.dump("again");
  ASSERT_TRUE(again.error.empty()) << again.error;
  EXPECT_NE(again.run_dir, d.run_dir);
  EXPECT_EQ(recorder.dumps().size(), 2u);
}

// Waits up to 10 s for `n` dumps.
std::vector<FlightDump> wait_for(const FlightRecorder& recorder, size_t n) {
  for (int i = 0; i < 1000 && recorder.dumps().size() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return recorder.dumps();
}

// From outside the process: SIGUSR1, or a file that appears (removed once
// its dump is written). After stop() the signal's handler is the program's again.
TEST(FlightRecorder, ASignalOrATouchedFileAsksForADump) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.dump_file = dir.sub("dump_now");
  o.analyse = false;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  sigaction(SIGUSR1, &ignore, &before);
  FlightRecorder recorder(o);
  recorder.step();
  kill(getpid(), SIGUSR1);
  std::vector<FlightDump> dumps = wait_for(recorder, 1);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].trigger, "signal");
  EXPECT_EQ(dumps[0].reason, "SIGUSR1 received");
  EXPECT_TRUE(dumps[0].error.empty()) << dumps[0].error;

  // A storm of requests costs one dump a second: those that come within a
  // second of a dump wait for the next, as one.
  for (int i = 0; i < 20; ++i) {
    kill(getpid(), SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  dumps = recorder.dumps();
  ASSERT_GE(dumps.size(), 1u);
  ASSERT_LE(dumps.size(), 2u);
  for (const FlightDump& d : dumps) EXPECT_EQ(d.trigger, "signal");
  size_t signal_dumps = dumps.size();
  test::write_bytes(o.dump_file, "");
  dumps = wait_for(recorder, signal_dumps + 1);
  ASSERT_EQ(dumps.size(), signal_dumps + 1);
  const FlightDump& file_dump = dumps.back();
  EXPECT_EQ(file_dump.trigger, "file");
  EXPECT_EQ(read_json(file_dump.run_dir + "/profiler_info.json")["flight_recorder"]["trigger"], "file");
  struct stat st;
  EXPECT_NE(stat(o.dump_file.c_str(), &st), 0);  // one touch, one dump
  recorder.stop();
  struct sigaction after {};
  sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
  sigaction(SIGUSR1, &before, nullptr);
  EXPECT_EQ(test::run_dirs(dir.path()).size(), signal_dumps + 1);
}

// Recording every operator costs more than 1 % of a step (LibTorch's
// callbacks alone): by default a recorder samples 1 call in 100, unless it
// records torch.distributed's calls, which come through the same callbacks
// and must all be seen, or memory, whose allocations are placed by operator;
// a Profiler records every call; what is asked for stands. The dump's
// profiler_info.json says what the analysis scales by.
TEST(FlightRecorder, OperatorsAreSampledUnlessCommunicationOrMemoryIsRecorded) {
  auto sampling_of = [](FlightRecorderOptions o) {
    o.analyse = false;
    o.dump_signal = 0;
    FlightRecorder recorder(o);
    recorder.step();
    FlightDump d = recorder.dump();
    EXPECT_TRUE(d.error.empty()) << d.error;
    return read_json(d.run_dir + "/profiler_info.json")["options"]["sample_operators"].get<uint32_t>();
  };
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  EXPECT_EQ(sampling_of(o), kFlightRecorderOperatorSampling);
  EXPECT_EQ(kFlightRecorderOperatorSampling, 100u);
  o.profiler.profiler_level = ProfilerLevel::Level1;
  EXPECT_EQ(sampling_of(o), 1u);
  o.profiler.profiler_level = ProfilerLevel::Level0;
  o.profiler.profile_communication = true;
  EXPECT_EQ(sampling_of(o), 1u);
  o.profiler.profile_communication = false;
  o.profiler.profile_memory = true;  // an allocation's site is the operator around it
  EXPECT_EQ(sampling_of(o), 1u);
  o.profiler.sample_operators = 7;
  EXPECT_EQ(sampling_of(o), 7u);

  ProfilerOptions p;
  p.output_path = dir.sub("profile");
  Profiler profiler(p);
  profiler.stop();
  std::vector<std::string> runs = test::run_dirs(p.output_path);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(read_json(runs[0] + "/profiler_info.json")["options"]["sample_operators"], 1);
}

// No step for hang_timeout_s gives one dump naming the step that did not
// finish; the next step re-arms the watchdog. Before the first step it is
// not armed (setup may take long).
TEST(FlightRecorder, AHangIsDumpedOncePerHang) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.hang_timeout_s = 0.3;
  o.analyse = false;
  o.hang_stacks_file = dir.sub("stacks_of_the_hang");  // as faulthandler's watchdog writes it in Python
  test::write_bytes(o.hang_stacks_file, "");
  FlightRecorder recorder(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(recorder.dumps().empty());
  for (int i = 0; i < 3; ++i) recorder.step();
  test::write_bytes(o.hang_stacks_file, "Thread 1: stuck_in_allreduce\n");
  std::vector<FlightDump> dumps = wait_for(recorder, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // still hung: no second dump
  dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].trigger, "hang");
  EXPECT_EQ(dumps[0].reason.rfind("no step ended for ", 0), 0u) << dumps[0].reason;
  EXPECT_NE(dumps[0].reason.find("step 3 has not finished"), std::string::npos) << dumps[0].reason;
  json fired = read_json(dumps[0].run_dir + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["step"], 3);
  EXPECT_GE(fired["waited_ns"].get<uint64_t>(), 300'000'000u);
  EXPECT_EQ(test::read_text(dumps[0].run_dir + "/hang_stacks.txt"), "Thread 1: stuck_in_allreduce\n");
  EXPECT_EQ(test::read_text(o.hang_stacks_file), "");  // emptied for the next hang
  recorder.step();                                     // re-armed
  EXPECT_EQ(wait_for(recorder, 2).size(), 2u);
}

// A dump that cannot be written is one message; the recorder goes on.
// A thread stuck in a call of a shared library (the C library's sleep, as
// a collective would be in a communication library's): a hang's dump shows
// it by name in the thread's native stack; the other threads are there too.
TEST(FlightRecorder, AHangsDumpHoldsEveryThreadsNativeStack) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.slow_step_factor = 0;
  o.hang_timeout_s = 0.3;
  FlightRecorder recorder(o);
  std::atomic<bool> stop{false};
  std::thread waiting([&] {
    pthread_setname_np(pthread_self(), "stuck_peer");
    while (!stop.load()) sleep(1);  // the libc call it is stuck in
  });
  for (int i = 0; i < 3; ++i) recorder.step();
  for (int waited = 0; recorder.dumps().empty() && waited < 100; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  recorder.wait_for_dumps();
  stop.store(true);
  waiting.join();
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  ASSERT_EQ(dumps[0].trigger, "hang");
  std::string stacks = test::read_text(dumps[0].run_dir + "/native_stacks.txt");
  size_t stuck = stacks.find("(stuck_peer):\n");
  ASSERT_NE(stuck, std::string::npos) << stacks;
  size_t next = stacks.find("\nthread ", stuck);
  std::string section = stacks.substr(stuck, next == std::string::npos ? std::string::npos : next - stuck);
  EXPECT_NE(section.find("sleep"), std::string::npos) << section;  // clock_nanosleep, nanosleep or sleep
  EXPECT_NE(stacks.find("(trainprof-flush):"), std::string::npos) << stacks;
  EXPECT_NE(stacks.find("(trainprof::core::Flusher::run()+0x"), std::string::npos) << "demangled:\n"
                                                                                   << stacks;
  EXPECT_NE(stacks.find("thread " + std::to_string(gettid()) + " "), std::string::npos)
      << "the test's own thread";
}

TEST(FlightRecorder, ADumpThatCannotBeWrittenLeavesTheRecorderRecording) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.profiler.output_path = dir.sub("not_a_directory");
  test::write_bytes(o.profiler.output_path, "a file where the runs would go");
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  recorder.step();
  FlightDump d = recorder.dump("try");
  EXPECT_TRUE(d.run_dir.empty());
  EXPECT_NE(d.error.find("not_a_directory"), std::string::npos) << d.error;
  EXPECT_TRUE(recorder.recording());
  recorder.step();
  EXPECT_EQ(recorder.step_num(), 2);
}

// A fork() child (a data-loader worker) neither records nor dumps into its
// parent's ring, and ends cleanly; the parent's recorder goes on.
std::string http_exchange(const std::string& url, const std::string& request);

TEST(FlightRecorder, AForkChildLeavesTheParentsRecorderAlone) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.analyse = false;
  o.metrics_port = 0;  // a thread and a wake-up descriptor the child must leave alone
  auto recorder = std::make_unique<FlightRecorder>(o);
  recorder->step();
  pid_t child = fork();
  if (child == 0) {
    recorder->step();
    FlightDump d = recorder->dump("from the child");
    recorder->wait_for_dumps();
    recorder->stop();
    recorder.reset();  // destroyed in the child, as at a normal exit
    _exit(d.run_dir.empty() && !d.error.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(test::run_dirs(dir.path()).empty());
  recorder->step();
  FlightDump d = recorder->dump("from the parent");
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_EQ(recorder->step_num(), 2);
  // The parent's endpoint still answers.
  std::string answer = http_exchange(recorder->metrics_url(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK", 0), 0u) << answer;
}

// An allocation that fails (core/out_of_memory.h, as the LibTorch collector
// reports it) dumps the ring on the failing thread before returning; failures
// on several threads at once make one dump (cooldown_s); a fork() child's
// failure writes nothing of its parent's ring, and after stop() nothing is
// left to call.
TEST(FlightRecorder, AnAllocationFailureDumpsTheRingOnceFromAnyThread) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.analyse = false;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  for (int i = 0; i < 3; ++i) {
    work_for(std::chrono::milliseconds(2));
    recorder.step();
  }
  const uint64_t cpu = raw::memory_device(0, -1);
  std::vector<std::thread> failing;
  std::atomic<int> saw_a_dump{0};
  for (int t = 0; t < 4; ++t) {
    failing.emplace_back([&] {
      core::note_out_of_memory(uint64_t{1} << 30, 0, 0, cpu, nullptr);
      if (!recorder.dumps().empty()) ++saw_a_dump;  // written before the failure returned
    });
  }
  for (std::thread& t : failing) t.join();
  EXPECT_EQ(saw_a_dump.load(), 4);
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].trigger, "out_of_memory");
  EXPECT_EQ(dumps[0].reason, "an allocation of 1073741824 bytes on CPU failed during step 3");
  raw::RawFile f = test::read_run(dumps[0].run_dir);
  int failed = 0;
  for (const auto& e : f.events) failed += e.kind == raw::EventKind::kMemory && raw::memory_failed(e.device);
  EXPECT_GE(failed, 1);
  pid_t child = fork();
  if (child == 0) {
    core::note_out_of_memory(uint64_t{1} << 30, 0, 0, cpu, nullptr);  // no lock the parent's threads held
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(test::run_dirs(dir.path()).size(), 1u) << "the child dumped its parent's ring";
  recorder.stop();
  core::note_out_of_memory(uint64_t{1} << 30, 0, 0, cpu, nullptr);
  EXPECT_EQ(test::run_dirs(dir.path()).size(), 1u);
}

// One profiler records at a time: a flight recorder next to a running
// profiler does not start, and says so; stopping it twice is harmless.
TEST(FlightRecorder, DoesNotStartWhileAProfilerRecords) {
  TempDir dir;
  ProfilerOptions po;
  po.output_path = dir.path();
  Profiler prof(po);
  FlightRecorder recorder(options_in(dir));
  EXPECT_FALSE(recorder.recording());
  recorder.step();
  EXPECT_FALSE(recorder.dump().error.empty());
  recorder.stop();
  recorder.stop();
  prof.stop();
  FlightRecorder later(options_in(dir));
  EXPECT_TRUE(later.recording());
}

// Always on means millions of steps: a step keeps no string of its own in
// the process (its name is made when a file is written), and the dump
// still names each step.
TEST(FlightRecorder, StepsKeepNoStringForTheLifeOfTheProcess) {
  TempDir dir;
  FlightRecorder recorder(options_in(dir));
  for (int i = 0; i < 10; ++i) recorder.step();
  size_t interned = core::interned_count();
  for (int i = 0; i < 20000; ++i) recorder.step();
  EXPECT_LT(core::interned_count(), interned + 10);
  FlightDump d = recorder.dump();
  ASSERT_TRUE(d.error.empty()) << d.error;
  raw::RawFile f = test::read_run(d.run_dir);
  std::set<std::string> steps;
  for (const auto& e : f.events) {
    if (e.kind == raw::EventKind::kStep) steps.insert(f.name(e.name_id));
  }
  EXPECT_EQ(steps.size(), 20010u);
  EXPECT_EQ(steps.count("ProfilerStep#20009"), 1u);
}

// The answer of the endpoint at `url` (http://127.0.0.1:PORT/...) to `request`.
std::string http_exchange(const std::string& url, const std::string& request) {
  int port = std::stoi(url.substr(url.rfind(':') + 1));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  if (send(fd, request.data(), request.size(), 0) < 0) return "send failed";
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;)
    answer.append(buffer, static_cast<size_t>(n));
  close(fd);
  return answer;
}

// The value of the sample `name{labels}` in Prometheus' text format, or -1.
double sample(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  size_t value = text.find("} ", at);
  return std::stod(text.substr(value + 2));
}

// Per-step health, always: each step's time, data wait and communication
// in the dump (step_health.csv) and as metrics, in a file and at an
// endpoint only this machine reaches.
TEST(FlightRecorder, StepHealthIsKeptWrittenWithDumpsAndServedAsMetrics) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.slow_step_factor = 0;
  o.profiler.data_process = true;
  o.metrics_port = 0;
  o.metrics_file = dir.path() + "/trainprof.prom";
  o.metrics_interval_s = 0.05;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  std::string url = recorder.metrics_url();
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  for (int step = 0; step < 30; ++step) {
    {
      DataStage wait("DataLoader", "wait");  // the loop waits for its batch
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    uint64_t t0 = detail::now_ticks();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    core::record_comm(t0, detail::now_ticks(), "allreduce", 0, static_cast<uint32_t>(step), 4096, nullptr, -1,
                      0);
    recorder.step();
  }
  std::string answer = http_exchange(url, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_EQ(sample(answer, "trainprof_steps_total"), 30);
  EXPECT_GE(sample(answer, "trainprof_data_wait_seconds_total"), 30 * 0.003);
  EXPECT_GE(sample(answer, "trainprof_communication_seconds_total"), 30 * 0.002);
  EXPECT_GE(sample(answer, "trainprof_step_seconds_total"), 30 * 0.005);
  EXPECT_NE(answer.find("trainprof_steps_total{rank=\"0\",pid=\"" + std::to_string(getpid()) + "\"} 30\n"),
            std::string::npos)
      << answer;
  EXPECT_EQ(http_exchange(url, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0), 0u);  // a browser's
  EXPECT_EQ(http_exchange(url, "GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(http_exchange(url, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);

  FlightDump d = recorder.dump("health");
  ASSERT_TRUE(d.error.empty()) << d.error;
  exporter::CsvRows rows = exporter::read_csv_file(d.run_dir + "/step_health.csv");
  ASSERT_EQ(rows.size(), 31u);
  EXPECT_EQ(rows[0][0], "Step");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], std::to_string(i - 1));
    EXPECT_GE(std::stod(rows[i][3]), 3000.0) << "data wait, us";
    EXPECT_GE(std::stod(rows[i][4]), 2000.0) << "communication, us";
    EXPECT_GE(std::stod(rows[i][2]), std::stod(rows[i][3]) + std::stod(rows[i][4])) << "step time, us";
  }
  recorder.stop();
  // The file: written atomically, readable by another user's node_exporter,
  // with the last counts once the recorder stops.
  struct stat st;
  ASSERT_EQ(stat(o.metrics_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  std::string file = test::read_text(o.metrics_file);
  EXPECT_EQ(sample(file, "trainprof_steps_total"), 30);
  EXPECT_EQ(sample(file, "trainprof_flight_dumps_total"), 1);
  EXPECT_EQ(recorder.metrics_url(), "");
}

// The metrics cannot be written or served: one message each, the training
// and the recording go on.
TEST(FlightRecorder, MetricsThatCannotBeWrittenOrServedAreOneMessage) {
  TempDir dir;
  FlightRecorderOptions o = options_in(dir);
  o.metrics_file = dir.path() + "/no_such_directory/trainprof.prom";
  o.metrics_interval_s = 0.01;
  o.metrics_port = 0;
  o.metrics_address = "not an address";
  FlightRecorder recorder(o);
  EXPECT_TRUE(recorder.recording());
  EXPECT_EQ(recorder.metrics_url(), "");
  for (int i = 0; i < 5; ++i) {
    recorder.step();
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  EXPECT_TRUE(recorder.dump().error.empty());
}

// A program that ends badly (flight_child): the ring is dumped before the
// process ends with its signal, and the dump holds the 30 steps and the
// events of the step under way, every one of them.
void check_dump_at_the_end(const std::string& mode, int signo, const std::string& trigger,
                           const std::string& reason_part, bool from_env = false) {
  TempDir dir;
  std::map<std::string, std::string> env;
  if (from_env) {
    env["TRAINPROF_OPTIONS"] =
        json{{"start", true},
             {"output_path", dir.path()},
             {"flight_recorder", {{"ring_mb", 8}, {"hang_timeout_s", 0}, {"slow_step_factor", 0}}}}
            .dump();
  }
  test::ProcessResult r =
      test::run_process({"/usr/bin/timeout", "-s", "KILL", "60", test::helper_path("flight_child"),
                         dir.path(), (from_env ? "env_" : "") + mode},
                        env);
  ASSERT_EQ(r.term_signal, signo) << "the process must still end with its signal:\n" << r.output;
  ASSERT_NE(r.output.find("READY"), std::string::npos) << r.output;
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u) << r.output;
  json fired = read_json(runs[0] + "/profiler_info.json")["flight_recorder"];
  EXPECT_EQ(fired["trigger"], trigger) << fired.dump();
  EXPECT_EQ(fired["step"], 30);
  std::string reason = fired["reason"];
  EXPECT_NE(reason.find(reason_part), std::string::npos) << reason;
  EXPECT_NE(reason.find("during step 30"), std::string::npos) << reason;

  raw::RawFile f = test::read_run(runs[0]);
  size_t seq = 0, last_work = 0;
  for (const auto& e : f.events) {
    if (e.kind == raw::EventKind::kCounter && f.name(e.name_id) == "seq") ++seq;
    if (f.name(e.name_id) == "last_work") ++last_work;
  }
  EXPECT_EQ(seq, 3000u);
  EXPECT_EQ(last_work, 1u) << "the step under way is in the dump";
  // The dump is a normal run: analysed afterwards, it has every step.
  AnalyseReport report = analyse(runs[0]);
  ASSERT_TRUE(report.error.empty()) << report.error;
  std::string steps = test::read_text(runs[0] + "/PROFILER_OUTPUT/step_trace_time.csv");
  EXPECT_NE(steps.find("\n29,"), std::string::npos) << steps;
  std::string summary = summarize_run(runs[0]);
  EXPECT_NE(summary.find("flight recorder: " + reason), std::string::npos) << summary;
}

TEST(FlightRecorder, ACrashDumpsTheRingBeforeTheProcessEnds) {
#ifdef TRAINPROF_TEST_SANITIZED
  GTEST_SKIP() << "the sanitizers report faults themselves";
#endif
  check_dump_at_the_end("segv", SIGSEGV, "crash", "SIGSEGV (a crash)");
}

TEST(FlightRecorder, StdTerminateDumpsTheRingWithTheExceptionsText) {
  check_dump_at_the_end("terminate", SIGABRT, "terminate",
                        "std::terminate (uncaught exception: the loss became NaN)");
}

TEST(FlightRecorder, SigtermDumpsTheRingBeforeTheProcessEnds) {
  check_dump_at_the_end("sigterm", SIGTERM, "terminated", "SIGTERM ended the process");
}

// No line of code: TRAINPROF_OPTIONS' "flight_recorder" starts one for the process.
TEST(FlightRecorder, TrainprofOptionsStartsOneForTheProcess) {
  check_dump_at_the_end("sigterm", SIGTERM, "terminated", "SIGTERM ended the process", /*from_env=*/true);
}

TEST(FlightRecorder, TrainprofOptionsNamesABadFlightRecorderSetting) {
  auto message_of = [](const std::string& text) {
    try {
      parse_options_json(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message_of(R"({"start": true, "flight_recorder": {"ring_mb": 0}})"),
            "TRAINPROF_OPTIONS: key \"flight_recorder.ring_mb\" must be an integer in [1, 1048576], got 0");
  EXPECT_NE(message_of(R"({"start": true, "flight_recorder": {"ring": 8}})")
                .find("is unknown; known keys: ring_mb"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"start": true, "flight_recorder": 3})").find("must be true, false or an object"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"start": true, "flight_recorder": true, "schedule": {"active": 1}})")
                .find("not used by a flight recorder"),
            std::string::npos);
  EnvOptions env = parse_options_json(
      R"({"start": true, "output_path": "/tmp/x", "analyse": false,
          "flight_recorder": {"slow_step_factor": 4.5, "hang_timeout_s": 60, "dump_file": "/tmp/d"}})");
  EXPECT_TRUE(env.flight_recorder);
  EXPECT_EQ(env.flight.slow_step_factor, 4.5);
  EXPECT_EQ(env.flight.hang_timeout_s, 60);
  EXPECT_EQ(env.flight.dump_file, "/tmp/d");
  EXPECT_EQ(env.flight.ring_mb, 64u);  // the default
  EXPECT_FALSE(env.flight.analyse);    // the top-level "analyse"
  EXPECT_EQ(env.flight.profiler.output_path, "/tmp/x");
  EXPECT_FALSE(parse_options_json(R"({"start": true})").flight_recorder);
}

}  // namespace
}  // namespace trainprof
