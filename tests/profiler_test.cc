// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Profiler lifecycle, schedules, run directories, metadata.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "test_util.h"
#include "trainprof/frontend.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::run_dirs;
using test::TempDir;

ProfilerOptions options_in(const TempDir& dir) {
  ProfilerOptions o;
  o.output_path = dir.path();
  o.buffer_mb = 4;
  return o;
}

std::vector<int64_t> step_numbers(const raw::RawFile& f) {
  std::vector<int64_t> steps;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == raw::EventKind::kStep) {
      EXPECT_EQ(f.name(e.name_id), "ProfilerStep#" + std::to_string(e.b));
      steps.push_back(static_cast<int64_t>(e.b));
    }
  }
  return steps;
}

TEST(Profiler, StartStopWritesARunDirectory) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.start_profile = false;
  Profiler prof(o);
  EXPECT_FALSE(prof.started());
  EXPECT_TRUE(run_dirs(dir.path()).empty());
  prof.start();
  std::string run = prof.current_run_dir();
  ASSERT_FALSE(run.empty());
  { TRAINPROF_RANGE("work"); }
  prof.step();
  { TRAINPROF_RANGE("work"); }
  prof.stop();
  EXPECT_TRUE(prof.current_run_dir().empty());
  EXPECT_EQ(prof.last_run().run_dir, run);
  EXPECT_TRUE(prof.last_run().ok);

  // {host}_{pid}_{yyyymmddHHMMSSmmm}_trainprof, owner-only.
  std::string name = run.substr(run.rfind('/') + 1);
  EXPECT_TRUE(std::regex_match(name, std::regex(".+_[0-9]+_[0-9]{17}_trainprof"))) << name;
  struct stat st {};
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((run + "/raw").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  raw::RawFile f = test::read_run(run);
  EXPECT_TRUE(f.issues.empty());
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_EQ(test::count_by_name(f)["work"], 2u);
  EXPECT_EQ(step_numbers(f), (std::vector<int64_t>{0, 1}));

  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["events_recorded"], f.events.size());
  EXPECT_EQ(info["events_dropped"], 0);
  EXPECT_EQ(info["complete"], true);
  EXPECT_EQ(info["stop_reason"], "stop");
  EXPECT_EQ(info["pid"], getpid());
  EXPECT_EQ(info["trainprof_version"], std::string(version()));
  EXPECT_TRUE(info["clock"]["anchor_realtime_ns"].is_number());
  EXPECT_GT(info["stop_time_ns"].get<uint64_t>(), info["start_time_ns"].get<uint64_t>());
  EXPECT_EQ(info["options"]["buffer_mb"], 4);
  EXPECT_TRUE(nlohmann::json::parse(test::read_text(run + "/profiler_metadata.json")).is_object());
}

TEST(Profiler, MisuseIsLoggedNeverThrown) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.start_profile = false;
  Profiler prof(o);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(prof.stop());
  EXPECT_NO_THROW(prof.step());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("stop() called while the profiler is not started"), std::string::npos) << err;
  EXPECT_NE(err.find("step() called while the profiler is stopped"), std::string::npos) << err;
  EXPECT_EQ(prof.step_num(), 0);

  prof.start();
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(prof.start());
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("already started"), std::string::npos) << err;
  prof.stop();
  EXPECT_EQ(run_dirs(dir.path()).size(), 1u);  // the second start() made no run
}

TEST(Profiler, SecondProfilerCannotStartWhileOneRecords) {
  TempDir dir;
  Profiler first(options_in(dir));
  testing::internal::CaptureStderr();
  Profiler second(options_in(dir));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("another profiler is already recording"), std::string::npos) << err;
  EXPECT_TRUE(second.current_run_dir().empty());
  second.stop();
  first.stop();
  EXPECT_EQ(run_dirs(dir.path()).size(), 1u);
}

TEST(Profiler, ScheduleMakesOneRunPerCycle) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.schedule = Schedule{.wait = 1, .warmup = 1, .active = 2, .repeat = 2, .skip_first = 1};
  std::vector<std::string> ready;
  std::vector<int64_t> ready_at_step;
  o.on_trace_ready = [&](Profiler& p) {
    ready.push_back(p.last_run().run_dir);
    ready_at_step.push_back(p.step_num());
  };
  Profiler prof(o);
  std::string actions;
  for (int i = 0; i < 12; ++i) {
    { TRAINPROF_RANGE("forward"); }
    actions += std::string(to_string(prof.current_action())).substr(0, 2);
    prof.step();
  }
  prof.stop();
  // skip 1, then (wait 1, warmup 1, active 2) x 2.
  EXPECT_EQ(actions, "NoNoWaReReNoWaReReNoNoNo");
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready_at_step, (std::vector<int64_t>{5, 9}));
  std::vector<std::string> runs = run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 2u);
  std::set<std::string> expected(ready.begin(), ready.end());
  EXPECT_EQ(std::set<std::string>(runs.begin(), runs.end()), expected);

  raw::RawFile first = test::read_run(ready[0]);
  raw::RawFile second = test::read_run(ready[1]);
  EXPECT_EQ(step_numbers(first), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(step_numbers(second), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(test::count_by_name(first)["forward"], 2u);
  EXPECT_EQ(test::count_by_name(second)["forward"], 2u);
}

TEST(Profiler, StopDuringActiveStepsCallsTraceReady) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.schedule = Schedule{.wait = 0, .warmup = 1, .active = 5};
  int ready = 0;
  o.on_trace_ready = [&](Profiler&) { ++ready; };
  Profiler prof(o);
  prof.step();  // warmup -> record
  prof.step();
  prof.stop();
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(step_numbers(test::read_run(prof.last_run().run_dir)), (std::vector<int64_t>{1, 2}));
}

TEST(Profiler, TraceReadyExceptionDoesNotEscape) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.on_trace_ready = [](Profiler&) { throw std::runtime_error("boom"); };
  Profiler prof(o);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(prof.stop());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("on_trace_ready threw: boom"), std::string::npos);
}

TEST(Profiler, DestructorStopsAndFlushes) {
  TempDir dir;
  {
    Profiler prof(options_in(dir));
    for (int i = 0; i < 3; ++i) TRAINPROF_RANGE("inside");
  }
  auto runs = run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_EQ(test::count_by_name(f)["inside"], 3u);  // every range reached the file
  auto info = nlohmann::json::parse(test::read_text(runs[0] + "/profiler_info.json"));
  EXPECT_TRUE(info["complete"].get<bool>()) << info.dump();  // closed, not left open
  EXPECT_FALSE(info["stop_time_ns"].is_null()) << info.dump();
}

TEST(Profiler, TraceHandlerChoosesDirectoryAndWorkerName) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = "/nonexistent-should-not-be-used";
  o.on_trace_ready = trace_handler(dir.sub("traces"), "worker-7", /*analyse=*/false);
  {
    Profiler prof(o);
    prof.stop();
  }
  auto runs = run_dirs(dir.sub("traces"));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_NE(runs[0].find("/worker-7_"), std::string::npos) << runs[0];
}

TEST(Profiler, UnwritableOutputPathIsLoggedAndTrainingGoesOn) {
  TempDir dir;
  std::string file = dir.sub("plain_file");
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  ProfilerOptions o = options_in(dir);
  o.output_path = file + "/sub";  // a path through a regular file
  testing::internal::CaptureStderr();
  Profiler prof(o);
  { TRAINPROF_RANGE("still runs"); }
  prof.step();
  prof.stop();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot start profiling"), std::string::npos) << err;
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_TRUE(prof.last_run().run_dir.empty());
}

// A training script may chdir() while it trains: runs land, and are
// analysed, where the relative output path named when the profiler was made.
TEST(Profiler, ARelativeOutputPathIsResolvedWhenTheProfilerIsMade) {
  TempDir dir;
  std::filesystem::create_directories(dir.sub("start"));
  std::filesystem::create_directories(dir.sub("elsewhere"));
  std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.sub("start"));
  ProfilerOptions o;
  o.on_trace_ready = trace_handler("./prof", "", /*analyse=*/true, /*async=*/false);
  o.schedule = Schedule{0, 1, 1, 2, 0};
  testing::internal::CaptureStderr();
  Profiler prof(o);
  for (int step = 0; step < 4; ++step) {
    if (step == 1) std::filesystem::current_path(dir.sub("elsewhere"));
    { TRAINPROF_RANGE("work"); }
    prof.step();
  }
  prof.stop();
  std::string err = testing::internal::GetCapturedStderr();
  std::filesystem::current_path(before);
  std::vector<std::string> runs = run_dirs(dir.sub("start/prof"));
  ASSERT_EQ(runs.size(), 2u) << err;  // the cycle before the chdir and the one after
  for (const std::string& run : runs) {
    EXPECT_TRUE(std::filesystem::exists(run + "/PROFILER_OUTPUT/op_statistic.csv")) << run << "\n" << err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.sub("elsewhere/prof")));
  EXPECT_EQ(err.find("does not exist"), std::string::npos) << err;
}

TEST(Profiler, RankComesFromTheLauncherEnvironment) {
  TempDir dir;
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  Profiler prof(options_in(dir));
  prof.stop();
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  std::string run = prof.last_run().run_dir;
  auto info = nlohmann::json::parse(test::read_text(run + "/profiler_info.json"));
  EXPECT_EQ(info["rank"], 3);
  EXPECT_EQ(info["world_size"], 8);
  EXPECT_EQ(info["rank_source"], "OMPI_COMM_WORLD_RANK");
  raw::RawFile f = test::read_run(run);
  EXPECT_EQ(f.header.rank, 3);
  EXPECT_EQ(f.header.world_size, 8);
}

// The launcher's job id goes into profiler_info.json, so that the runs of
// two jobs written to one directory are told apart: the launcher nearest
// the process first (torchrun's default "none" names no job), a Slurm step
// with its job, and bytes no terminal should print replaced.
TEST(Profiler, JobIdComesFromTheLauncherEnvironment) {
  const char* const kVariables[] = {
      "TRAINPROF_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
      "SLURM_JOB_ID",     "SLURM_STEP_ID",       "LSB_JOBID",      "PBS_JOBID",
      "FLUX_JOB_ID"};
  std::map<std::string, std::string> saved;
  for (const char* name : kVariables) {
    if (const char* v = std::getenv(name); v != nullptr) saved[name] = v;
    unsetenv(name);
  }
  auto info_of_a_run = [] {
    TempDir dir;
    Profiler prof(options_in(dir));
    prof.stop();
    return nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/profiler_info.json"));
  };
  nlohmann::json none = info_of_a_run();
  EXPECT_FALSE(none.contains("job")) << none.dump();
  setenv("SLURM_JOB_ID", "4711", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  nlohmann::json slurm = info_of_a_run();
  EXPECT_EQ(slurm["job"], "4711.3");
  EXPECT_EQ(slurm["job_source"], "SLURM_JOB_ID+SLURM_STEP_ID");
  setenv("PMIX_NAMESPACE", "602669057", 1);  // an mpirun inside the allocation
  EXPECT_EQ(info_of_a_run()["job"], "602669057");
  setenv("TRAINPROF_JOB_ID", ("run\n\x1b[2J" + std::string(200, 'x')).c_str(), 1);
  nlohmann::json own = info_of_a_run();
  EXPECT_EQ(own["job_source"], "TRAINPROF_JOB_ID");
  EXPECT_EQ(own["job"], "run??[2J" + std::string(128 - 8, 'x'));
  for (const char* name : kVariables) unsetenv(name);

  // No launcher names one: the job the runtime's ranks agreed on (the Python
  // front end's, through torch.distributed's store), amending the run this
  // process closed before it came; a launcher's still comes first.
  TempDir dir;
  Profiler before(options_in(dir));
  before.stop();
  const std::string closed = before.last_run().run_dir + "/profiler_info.json";
  EXPECT_FALSE(nlohmann::json::parse(test::read_text(closed)).contains("job"));
  detail::set_runtime_job("torch.distributed-4f1c", "torch.distributed store");
  nlohmann::json amended = nlohmann::json::parse(test::read_text(closed));
  EXPECT_EQ(amended["job"], "torch.distributed-4f1c");
  EXPECT_EQ(amended["job_source"], "torch.distributed store");
  EXPECT_EQ(info_of_a_run()["job"], "torch.distributed-4f1c");
  setenv("PMIX_NAMESPACE", "602669057", 1);
  EXPECT_EQ(info_of_a_run()["job"], "602669057");
  unsetenv("PMIX_NAMESPACE");
  for (const auto& [name, value] : saved) setenv(name.c_str(), value.c_str(), 1);
}

TEST(Profiler, MetadataOverrideCapAndJson) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.metadata_limit_bytes = 64;
  Profiler prof(o);
  prof.add_metadata("model", "resnet");
  testing::internal::CaptureStderr();
  prof.add_metadata("model", "cnn \"small\"");
  prof.add_metadata("huge", std::string(100, 'x'));
  prof.add_metadata_json("bad", "{not json");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("\"model\" added again"), std::string::npos) << err;
  EXPECT_NE(err.find("\"huge\" refused"), std::string::npos) << err;
  EXPECT_NE(err.find("\"bad\" refused: not valid JSON"), std::string::npos) << err;
  prof.add_metadata_json("layers", R"({"conv": 2, "fc": [1, 2]})");
  prof.stop();
  auto meta = nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/profiler_metadata.json"));
  EXPECT_EQ(meta["model"], "cnn \"small\"");
  EXPECT_EQ(meta["layers"]["conv"], 2);
  EXPECT_EQ(meta["layers"]["fc"][1], 2);
  EXPECT_FALSE(meta.contains("huge"));
  EXPECT_FALSE(meta.contains("bad"));
}

// JSON from outside that nlohmann would throw on (1e999: out_of_range) or
// recurse into without bound (100,000 levels): refused and logged, the
// process goes on.
std::string deep_objects(int depth) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += "{\"a\":";
  text += "1";
  return text + std::string(static_cast<size_t>(depth), '}');
}

TEST(Profiler, HostileMetadataJsonIsRefusedNotThrown) {
  TempDir dir;
  Profiler prof(options_in(dir));
  testing::internal::CaptureStderr();
  prof.add_metadata_json("overflow", "1e999");
  prof.add_metadata_json("arrays", std::string(100000, '[') + std::string(100000, ']'));
  prof.add_metadata_json("objects", deep_objects(100000));
  prof.add_metadata_json("fine", deep_objects(100));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("\"overflow\" refused: not valid JSON"), std::string::npos) << err;
  EXPECT_NE(err.find("\"arrays\" refused: not valid JSON (nested deeper than 128"), std::string::npos) << err;
  EXPECT_NE(err.find("\"objects\" refused: not valid JSON (nested deeper than 128"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("\"fine\" refused"), std::string::npos) << err;
  prof.stop();
  auto meta = nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/profiler_metadata.json"));
  EXPECT_FALSE(meta.contains("overflow"));
  EXPECT_FALSE(meta.contains("arrays"));
  EXPECT_FALSE(meta.contains("objects"));
  EXPECT_TRUE(meta.contains("fine"));
}

TEST(Profiler, NamesWithSpecialCharactersRoundTrip) {
  TempDir dir;
  const std::vector<std::string> names = {"quote\"d",
                                          "back\\slash",
                                          "new\nline\ttab",
                                          "\x01\x1f ctrl",
                                          "utf8 \xc3\xa9\xe6\x97\xa5\xf0\x9f\x94\xa5",
                                          "comma,semi;colon",
                                          ""};
  Profiler prof(options_in(dir));
  for (const std::string& n : names) {
    trainprof::Range r(n);
  }
  trainprof::mark("mark \"q\" \\ \n", "dom\"ain");
  prof.add_metadata("key \"with\" quotes\n", "value \\ \x01 \xc3\xa9");
  prof.stop();
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  std::vector<std::string> got;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == raw::EventKind::kRange) got.push_back(f.name(e.name_id));
    if (e.kind == raw::EventKind::kMark) {
      EXPECT_EQ(f.name(e.name_id), "mark \"q\" \\ \n");
      EXPECT_EQ(f.name(static_cast<uint32_t>(e.a)), "dom\"ain");
    }
  }
  EXPECT_EQ(got, names);
  auto meta = nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/profiler_metadata.json"));
  EXPECT_EQ(meta["key \"with\" quotes\n"], "value \\ \x01 \xc3\xa9");
}

// Issue 11 item 9: the session wrote profiler_info.json and
// profiler_metadata.json by path, so a run directory swapped for a symlink
// in a user-writable parent redirected them anywhere. Now every file of a run
// is written relative to the directory the session created and opened.
TEST(Profiler, ARunDirectorySwappedForASymlinkIsNotFollowed) {
  namespace fs = std::filesystem;
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.output_path = dir.sub("runs");
  Profiler prof(o);
  prof.add_metadata("model", "resnet");
  for (int i = 0; i < 1000; ++i) {
    TRAINPROF_RANGE("before_swap");
  }
  std::string run = prof.current_run_dir();
  ASSERT_FALSE(run.empty());
  std::string moved = dir.sub("runs/moved_trainprof");
  fs::rename(run, moved);
  fs::create_directory(dir.sub("attacker"));
  fs::create_directory_symlink(dir.sub("attacker"), run);
  for (int i = 0; i < 1000; ++i) {
    TRAINPROF_RANGE("after_swap");
  }
  prof.stop();
  EXPECT_TRUE(fs::is_empty(dir.sub("attacker")));
  auto info = nlohmann::json::parse(test::read_text(moved + "/profiler_info.json"));
  EXPECT_EQ(info["complete"], true);
  EXPECT_EQ(info["stop_reason"], "stop");
  EXPECT_NE(test::read_text(moved + "/profiler_metadata.json").find("resnet"), std::string::npos);
  auto counts = test::count_by_name(test::read_run(moved));
  EXPECT_EQ(counts["before_swap"], 1000u);
  EXPECT_EQ(counts["after_swap"], 1000u);
}

// Issue 11 item 12: worker_name "../../escape" put runs outside dir.
TEST(Profiler, AWorkerNameThatIsNotOneFileNameIsRefused) {
  namespace fs = std::filesystem;
  TempDir dir;
  for (const std::string& bad : {std::string("../../escape"), std::string("a/b"), std::string(".."),
                                 std::string("x..y"), std::string("nul\0byte", 8), std::string(300, 'w')}) {
    ProfilerOptions o = options_in(dir);
    o.start_profile = false;
    o.on_trace_ready = trace_handler(dir.sub("out"), bad);
    try {
      Profiler prof(o);
      ADD_FAILURE() << "accepted worker_name " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("worker_name"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(dir.sub("out")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 0);
  ProfilerOptions o = options_in(dir);
  o.on_trace_ready = trace_handler(dir.sub("out"), "rank-0.worker_1", /*analyse=*/false);
  Profiler ok(o);
  ok.stop();
  EXPECT_EQ(run_dirs(dir.sub("out")).size(), 1u);
}

}  // namespace
}  // namespace trainprof
