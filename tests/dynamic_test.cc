// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Dynamic profiling: profiler_config.json, the thread that watches it, the
// steps it selects, runs recorded by a monitor while a test edits the file, two
// processes sharing one file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/dynamic_config_watcher.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::run_dirs;
using test::TempDir;

std::string config_path(const std::string& dir) {
  return dir + "/" + kDynamicConfigFileName;
}

// Replaces the file the way a careful tool does (a new file renamed over
// the old one): what the tests mean by "the user saves the config".
void save_config(const std::string& dir, const std::string& text) {
  std::string tmp = dir + "/.edit.tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  ASSERT_EQ(std::rename(tmp.c_str(), config_path(dir).c_str()), 0);
}

std::string window(int64_t start, int64_t stop, int analyse_mode = -1) {
  return R"({"start_step": )" + std::to_string(start) + R"(, "stop_step": )" + std::to_string(stop) +
         R"(, "analyse_mode": )" + std::to_string(analyse_mode) + "}";
}

// Waits until `seen()` passes `before` (the watcher took an edit); fails
// the test after 30 s. A synchronisation, not a timing assertion.
template <typename Seen>
void wait_for_new_config(Seen seen, uint64_t before) {
  for (int waited_ms = 0; waited_ms < 30'000 && seen() == before; waited_ms += 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GT(seen(), before) << "the watcher never took the edited config";
}

std::vector<int64_t> step_numbers(const std::string& run_dir) {
  raw::RawFile f = test::read_run(run_dir);
  std::vector<int64_t> steps;
  for (const raw::RawEvent& e : f.events)
    if (e.kind == raw::EventKind::kStep) steps.push_back(static_cast<int64_t>(e.b));
  return steps;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

// ---- the file ----

TEST(DynamicConfig, TheDefaultFileCollectsNothingAndHasTheSeedsFields) {
  DynamicConfig c = parse_dynamic_config(default_dynamic_config());
  EXPECT_EQ(c.start_step, -1);
  EXPECT_EQ(c.analyse_mode, -1);
  EXPECT_TRUE(c.options.data_simplification);
  EXPECT_TRUE(c.ignored.empty());
  nlohmann::json j = nlohmann::json::parse(default_dynamic_config());
  for (const char* field :
       {"start_step", "stop_step", "aicore_metrics", "profiler_level", "profile_framework", "analyse_mode",
        "profile_communication", "parallel_strategy", "with_stack", "data_simplification", "record_shapes",
        "profile_memory", "activities", "mstx"}) {
    EXPECT_TRUE(j.contains(field)) << field;
  }
}

TEST(DynamicConfig, FieldsSetTheOptions) {
  DynamicConfig c = parse_dynamic_config(R"({"start_step": 10, "stop_step": 12, "analyse_mode": 1,
      "profiler_level": 1, "with_stack": true, "record_shapes": true, "profile_memory": true,
      "activities": ["ProfilerActivity.CPU", "gpu"], "data_simplification": false, "data_process": true,
      "mstx_domain_include": ["io"], "host_sys": ["CPU", "network"]})");
  EXPECT_EQ(c.start_step, 10);
  EXPECT_EQ(c.stop_step, 12);
  EXPECT_EQ(c.analyse_mode, 1);
  EXPECT_EQ(c.options.profiler_level, ProfilerLevel::Level1);
  EXPECT_TRUE(c.options.with_stack && c.options.record_shapes && c.options.profile_memory);
  EXPECT_TRUE(c.options.data_process);
  EXPECT_FALSE(c.options.data_simplification);
  EXPECT_EQ(c.options.activities, (std::set<Activity>{Activity::CPU, Activity::GPU}));
  EXPECT_EQ(c.options.mstx_domain_include, std::vector<std::string>{"io"});
  EXPECT_EQ(c.options.host_sys, (std::set<HostSystem>{HostSystem::Cpu, HostSystem::Network}));
}

TEST(DynamicConfig, FieldsWithNoEffectHereAreReportedNotRefused) {
  DynamicConfig c = parse_dynamic_config(
      R"({"start_step": 2, "stop_step": 2, "aicore_metrics": 1, "parallel_strategy": true,
          "profile_framework": -1, "mstx": false, "prof_dir": "/x"})");
  EXPECT_EQ(c.ignored, (std::vector<std::string>{"aicore_metrics", "parallel_strategy"}));
  EXPECT_EQ(c.unknown, (std::vector<std::string>{"prof_dir"}));
}

TEST(DynamicConfig, AMistypedFieldIsUnknownWithTheFieldItIsCloseTo) {
  DynamicConfig c = parse_dynamic_config(R"({"start_stpe": 5, "stop_step": 6, "with_stak": true})");
  EXPECT_EQ(c.start_step, -1);  // not read: nothing is collected
  EXPECT_EQ(c.unknown, (std::vector<std::string>{"start_stpe (did you mean start_step?)",
                                                 "with_stak (did you mean with_stack?)"}));
  // The fields of the file the monitor writes are among those the message lists.
  nlohmann::json defaults = nlohmann::json::parse(default_dynamic_config());
  EXPECT_TRUE(parse_dynamic_config(defaults.dump()).unknown.empty());
  const std::vector<std::string>& listed = dynamic_config_fields();
  for (const auto& [field, value] : defaults.items())
    EXPECT_NE(std::find(listed.begin(), listed.end(), field), listed.end()) << field;
}

TEST(DynamicConfig, BadValuesNameTheField) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"({"start_step": "10"})", "\"start_step\" must be an integer"},
           {R"({"start_step": 0, "stop_step": 3})", "\"start_step\" must be -1"},
           {R"({"start_step": 5, "stop_step": 4})", "\"stop_step\" must be >= start_step"},
           {R"({"start_step": 5, "stop_step": 5, "analyse_mode": 2})", "\"analyse_mode\" must be in [-1, 1]"},
           {R"({"with_stack": 1})", "\"with_stack\" must be true or false"},
           {R"({"profiler_level": 3})", "\"profiler_level\" must be in [-1, 2]"},
           {R"({"activities": ["TPU"]})", "\"activities\" must list"},
           {R"({"activities": []})", "\"activities\" must name at least one"},
           {R"({"host_sys": ["gpu"]})", "\"host_sys\" must list"},
           {R"({"mstx_domain_include": ["a"], "mstx_domain_exclude": ["b"]})", "\"mstx_domain_exclude\""},
           {R"({"start_step": 18446744073709551615})", "\"start_step\" must be in"},
           {R"([1, 2])", "must hold a JSON object"},
           {R"({"start_step": 1,)", "is not valid JSON"},
       }) {
    try {
      parse_dynamic_config(c.text);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

// ---- the watcher ----

TEST(DynamicConfigWatcher, CreatesTheDirectoryAndTheDefaultFileButNeverReplacesOne) {
  TempDir dir;
  std::string cfg = dir.sub("a/b");
  {
    core::DynamicConfigWatcher w(cfg, 3600);
    EXPECT_EQ(w.version(), 1u);
    EXPECT_EQ(w.latest().start_step, -1);
  }
  struct stat st {};
  ASSERT_EQ(stat(cfg.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(test::read_text(config_path(cfg)), default_dynamic_config());

  save_config(cfg, window(7, 9));
  core::DynamicConfigWatcher again(cfg, 3600);
  EXPECT_EQ(test::read_text(config_path(cfg)), window(7, 9));  // the user's file stays
  EXPECT_EQ(again.latest().start_step, 7);
}

TEST(DynamicConfigWatcher, RefusesABadIntervalAndASymlinkedDirectory) {
  TempDir dir;
  EXPECT_THROW(core::DynamicConfigWatcher(dir.sub("c"), 0), std::invalid_argument);
  EXPECT_THROW(core::DynamicConfigWatcher(dir.sub("c"), 7200), std::invalid_argument);
  EXPECT_THROW(core::DynamicConfigWatcher("", 1), std::invalid_argument);
  std::filesystem::create_directory(dir.sub("real"));
  std::filesystem::create_directory_symlink(dir.sub("real"), dir.sub("link"));
  EXPECT_THROW(core::DynamicConfigWatcher(dir.sub("link"), 1), std::invalid_argument);
}

// Two looks: a change is taken once the file stayed the same for a poll.
void settle(core::DynamicConfigWatcher& w) {
  w.poll();
  w.poll();
}

TEST(DynamicConfigWatcher, TakesEachNewValidVersionOnceItIsStableAndKeepsTheLastOnABadOne) {
  TempDir dir;
  core::DynamicConfigWatcher w(dir.path(), 3600);  // the thread never polls: the test does
  ASSERT_EQ(w.version(), 1u);
  save_config(dir.path(), window(3, 4));
  w.poll();  // first sight of the change: not yet
  EXPECT_EQ(w.version(), 1u);
  w.poll();
  EXPECT_EQ(w.version(), 2u);
  EXPECT_EQ(w.latest().start_step, 3);
  settle(w);  // unchanged: nothing read
  EXPECT_EQ(w.version(), 2u);
  save_config(dir.path(), window(3, 4));  // saved again, same text
  settle(w);
  EXPECT_EQ(w.version(), 2u);

  save_config(dir.path(), R"({"start_step": 5, "stop_step": )");  // left half written
  settle(w);
  EXPECT_EQ(w.version(), 2u);  // reported; the config before it stays
  EXPECT_EQ(w.latest().start_step, 3);
  save_config(dir.path(), window(5, 3));  // stop before start
  settle(w);
  EXPECT_EQ(w.latest().start_step, 3);

  save_config(dir.path(), window(8, 9));
  settle(w);
  EXPECT_EQ(w.version(), 3u);
  EXPECT_EQ(w.latest().stop_step, 9);
}

TEST(DynamicConfigWatcher, AFileWrittenInPiecesIsTakenWhole) {
  TempDir dir;
  core::DynamicConfigWatcher w(dir.path(), 3600);
  // Two configs of one length: the second's first half with the first's
  // second half would be a valid third one ({"start_step": 30, ...: 50}).
  std::string first = window(10, 50), second = window(30, 40);
  ASSERT_EQ(first.size(), second.size());
  save_config(dir.path(), first);
  settle(w);
  ASSERT_EQ(w.latest().start_step, 10);
  // The kernel's file times are coarse (a few ms): each piece gets a time
  // of its own here, as pieces written a poll interval apart would.
  auto stamp = [&](time_t seconds) {
    timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, config_path(dir.path()).c_str(), times, 0), 0);
  };
  {
    std::fstream f(config_path(dir.path()), std::ios::in | std::ios::out);  // in place, no truncation
    f << second.substr(0, second.size() / 2) << std::flush;
    stamp(1000);
    w.poll();  // sees a change in the middle of the write: waits
    f << second.substr(second.size() / 2) << std::flush;
  }
  stamp(2000);
  w.poll();  // changed again since the last look: waits
  EXPECT_EQ(w.latest().start_step, 10);
  w.poll();
  EXPECT_EQ(w.latest().start_step, 30);
  EXPECT_EQ(w.latest().stop_step, 40);
}

// How many times `needle` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(DynamicConfigWatcher, EachChangeToANonRegularFileIsOneMessageNamingWhatItIs) {
  TempDir dir;
  core::DynamicConfigWatcher w(dir.path(), 3600);
  std::string file = config_path(dir.path());
  std::string said;
  auto replace_and_look = [&](const std::function<void()>& make) {
    std::filesystem::remove(file);
    make();
    testing::internal::CaptureStderr();
    settle(w);
    w.poll();  // unchanged since: nothing more is said
    said = testing::internal::GetCapturedStderr();
  };
  replace_and_look([&] { ASSERT_EQ(mkfifo(file.c_str(), 0600), 0); });
  EXPECT_EQ(occurrences(said, "is a FIFO, not a regular file"), 1u) << said;
  EXPECT_EQ(said.find("not valid JSON"), std::string::npos) << said;  // it is not read as empty text
  replace_and_look([&] { std::filesystem::create_directory(file); });
  EXPECT_EQ(occurrences(said, "is a directory, not a regular file"), 1u) << said;
  replace_and_look([&] { std::filesystem::create_symlink("/dev/zero", file); });
  EXPECT_EQ(occurrences(said, "is a symlink to a character device, not a regular file"), 1u) << said;
  EXPECT_EQ(w.version(), 1u);  // the config before them stays
  replace_and_look([&] { save_config(dir.path(), window(4, 5)); });
  EXPECT_EQ(said.find("not a regular file"), std::string::npos) << said;
  EXPECT_EQ(w.version(), 2u);  // a regular file again is read
  EXPECT_EQ(w.latest().start_step, 4);
}

TEST(DynamicConfigWatcher, AFileThatIsNotARegularFileOrTooLargeIsNotRead) {
  TempDir dir;
  core::DynamicConfigWatcher w(dir.path(), 3600);
  std::filesystem::remove(config_path(dir.path()));
  ASSERT_EQ(mkfifo(config_path(dir.path()).c_str(), 0600), 0);  // reading it would block
  settle(w);
  EXPECT_EQ(w.version(), 1u);
  std::filesystem::remove(config_path(dir.path()));
  std::string big = window(2, 3) + std::string(core::DynamicConfigWatcher::kMaxFileBytes, ' ');
  save_config(dir.path(), big);
  settle(w);
  EXPECT_EQ(w.version(), 1u);
  std::filesystem::remove(config_path(dir.path()));  // the file gone is fine too
  settle(w);
  EXPECT_EQ(w.version(), 1u);
}

// ---- which steps ----

// Runs `steps` steps of a schedule; returns, per step, "s" (collection ends
// with it), "b" (one begins after it), "." otherwise.
std::string actions(DynamicSchedule& s, int steps) {
  std::string out;
  for (int i = 0; i < steps; ++i) {
    DynamicSchedule::Action a = s.step();
    out += a.stop ? (a.start ? 'x' : 's') : (a.start ? 'b' : '.');
  }
  return out;
}

TEST(DynamicSchedule, RecordsExactlyTheStepsAsked) {
  TempDir dir;
  save_config(dir.path(), window(3, 5));
  DynamicSchedule s(dir.path(), dir.sub("out"), 3600);
  EXPECT_FALSE(s.collecting());
  // step 2 ends: collection from step 3; step 5 ends: it stops.
  EXPECT_EQ(actions(s, 2), ".b");
  ASSERT_TRUE(s.collecting());
  EXPECT_EQ(s.collection()->start_step, 3);
  EXPECT_EQ(s.collection()->stop_step, 5);
  EXPECT_EQ(s.collection()->options.output_path, dir.sub("out"));
  EXPECT_TRUE(s.collection()->options.on_trace_ready);
  EXPECT_EQ(actions(s, 5), "..s..");
  EXPECT_FALSE(s.collecting());
}

TEST(DynamicSchedule, AConfigForStepOneRecordsFromTheStart) {
  TempDir dir;
  save_config(dir.path(), window(1, 2));
  DynamicSchedule s(dir.path(), dir.sub("out"), 3600);
  EXPECT_TRUE(s.collecting());
  EXPECT_EQ(actions(s, 3), ".s.");
}

TEST(DynamicSchedule, EditsWhileTrainingStartLateWindowsAtOnceAndQueueBehindARunningOne) {
  TempDir dir;
  DynamicSchedule s(dir.path(), dir.sub("out"), 0.005);
  EXPECT_EQ(actions(s, 10), "..........");
  uint64_t read = s.configs_read();
  save_config(dir.path(), window(4, 6));  // passed: as many steps from the next one
  wait_for_new_config([&] { return s.configs_read(); }, read);
  EXPECT_EQ(actions(s, 1), "b");
  EXPECT_EQ(s.collection()->start_step, 12);
  EXPECT_EQ(s.collection()->stop_step, 14);

  read = s.configs_read();
  save_config(dir.path(), window(15, 16));  // saved during the collection: waits for its end
  wait_for_new_config([&] { return s.configs_read(); }, read);
  EXPECT_EQ(actions(s, 5), "..x.s");  // 14 ends the first and 15 begins the next
  EXPECT_EQ(s.step_num(), 16);

  read = s.configs_read();
  save_config(dir.path(), window(18, 1000));
  wait_for_new_config([&] { return s.configs_read(); }, read);
  EXPECT_EQ(actions(s, 3), "b..");
  read = s.configs_read();
  save_config(dir.path(), window(-1, -1));  // "start_step": -1 ends it at the next step
  wait_for_new_config([&] { return s.configs_read(); }, read);
  EXPECT_EQ(actions(s, 2), "s.");
  EXPECT_FALSE(s.collecting());
}

// ---- a monitor recording a training loop ----

TEST(DynamicProfilerMonitor, TheRunCoversExactlyTheStepsOfTheEditedConfigAndIsAnalysed) {
  TempDir dir;
  std::string cfg = dir.sub("cfg"), out = dir.sub("out");
  DynamicProfilerMonitor monitor(cfg, out, 0.005);
  for (int step = 1; step <= 60; ++step) {
    { TRAINPROF_RANGE("train_step"); }
    monitor.step();
    if (step == 5) {
      uint64_t read = monitor.configs_read();
      save_config(cfg, window(20, 24, 0));
      wait_for_new_config([&] { return monitor.configs_read(); }, read);
    }
    EXPECT_EQ(monitor.collecting(), step >= 19 && step < 24) << step;
  }
  ASSERT_EQ(monitor.runs().size(), 1u);
  std::string run = monitor.runs()[0];
  EXPECT_EQ(run_dirs(out), std::vector<std::string>{run});
  EXPECT_EQ(std::filesystem::path(run).filename().string().rfind("rank0_start20_stop24_", 0), 0u) << run;
  // analyse_mode 0: analysed when the collection ended; data_simplification
  // (the default here) removed the raw data, so the steps are read from
  // step_trace_time.csv.
  std::string csv = test::read_text(run + "/PROFILER_OUTPUT/step_trace_time.csv");
  std::vector<int64_t> steps;
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) steps.push_back(std::stoll(line.substr(0, line.find(','))));
  EXPECT_EQ(steps, range(20, 24));
}

TEST(DynamicProfilerMonitor, WithoutAnalysisTheRawRunHoldsTheStepsAndADestroyedMonitorClosesItsRun) {
  TempDir dir;
  std::string cfg = dir.sub("cfg"), out = dir.sub("out");
  std::filesystem::create_directory(cfg);
  save_config(cfg, window(2, 100));
  {
    DynamicProfilerMonitor monitor(cfg, out, 3600);
    for (int step = 1; step <= 6; ++step) monitor.step();
    EXPECT_TRUE(monitor.collecting());
  }  // steps 2..6 recorded, the 7th (begun) closes the run
  std::vector<std::string> runs = run_dirs(out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(step_numbers(runs[0]), range(2, 7));
}

TEST(DynamicProfilerMonitor, AnalyseModeOneAnalysesInAChildProcessWhileTrainingGoesOn) {
  TempDir dir;
  std::string cfg = dir.sub("cfg"), out = dir.sub("out");
  std::filesystem::create_directory(cfg);
  save_config(cfg, window(2, 3, 1));
  DynamicProfilerMonitor monitor(cfg, out, 3600);
  for (int step = 1; step <= 5; ++step) monitor.step();
  ASSERT_EQ(monitor.runs().size(), 1u);
  // The outputs appear when the child is done (a synchronisation, 60 s at most).
  std::string csv = monitor.runs()[0] + "/PROFILER_OUTPUT/step_trace_time.csv";
  for (int waited_ms = 0; waited_ms < 60'000 && !std::filesystem::exists(csv); waited_ms += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(csv));
  EXPECT_NE(test::read_text(csv).find("\n3,"), std::string::npos);
}

TEST(DynamicProfilerMonitor, TwoProcessesSharingOneConfigRecordTheSameSteps) {
  TempDir dir;
  std::string cfg = dir.sub("cfg"), out = dir.sub("out");
  test::Child a = test::spawn({test::helper_path("dynamic_child"), "0", cfg, out, "10", "40"});
  test::Child b = test::spawn({test::helper_path("dynamic_child"), "1", cfg, out, "10", "40"});
  ASSERT_EQ(a.first_line, "READY");
  ASSERT_EQ(b.first_line, "READY");
  save_config(cfg, window(20, 25));
  int status_a = test::wait_status(a), status_b = test::wait_status(b);
  ASSERT_TRUE(WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0) << status_a;
  ASSERT_TRUE(WIFEXITED(status_b) && WEXITSTATUS(status_b) == 0) << status_b;
  std::vector<std::string> runs = run_dirs(out);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(std::filesystem::path(runs[0]).filename().string().rfind("rank0_start20_stop25_", 0), 0u);
  EXPECT_EQ(std::filesystem::path(runs[1]).filename().string().rfind("rank1_start20_stop25_", 0), 0u);
  for (const std::string& run : runs) EXPECT_EQ(step_numbers(run), range(20, 25)) << run;
}

}  // namespace
}  // namespace trainprof
