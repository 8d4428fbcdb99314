// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Incidents of all ranks: the board where the ranks' flight recorders meet
// (core/flight_incident.h), a recorder that announces and joins incidents in
// process (the other ranks played by boards), and the incident's report
// (analysis/incident_report.h). The real jobs are in tests/mpi_test.cc (MPI)
// and python/tests/test_distributed.py (Gloo).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "analysis/incident_report.h"
#include "core/clock.h"
#include "core/flight_incident.h"
#include "test_util.h"
#include "trainprof/analyse.h"
#include "trainprof/flight_recorder.h"

namespace trainprof {
namespace {

using nlohmann::json;
using test::TempDir;

namespace fs = std::filesystem;

std::vector<std::string> incident_dirs(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("flight_incident_")) found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Waits up to 20 s for `path` (the recorder's thread writes it).
bool eventually_exists(const std::string& path) {
  for (int i = 0; i < 200 && !fs::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return fs::exists(path);
}

// The first rank to announce a key owns the incident; the others get it
// back; a board made later sees no old incident; the last of the world to
// mark its dump claims the cluster pass, once.
TEST(IncidentBoard, TheFirstAnnouncementWinsAndTheLastDumpClaimsTheClusterPass) {
  TempDir dir;
  uint64_t start = detail::realtime_now_ns();
  core::IncidentBoard rank0(dir.path(), 0, start), rank1(dir.path(), 1, start), rank2(dir.path(), 2, start);
  json trigger = {{"trigger", "hang"}, {"reason", "no step ended"}, {"step", 29}};
  EXPECT_EQ(core::IncidentBoard::key_of(trigger), "hang_29");
  EXPECT_EQ(core::IncidentBoard::key_of({{"trigger", "../odd name"}, {"step", 3}}), "___odd_name_3");
  core::Incident first, second;
  std::string error;
  ASSERT_TRUE(rank0.announce("hang_29", trigger, &first, &error)) << error;
  EXPECT_EQ(first.announced_by, 0);
  ASSERT_TRUE(rank1.announce("hang_29", json{{"trigger", "hang"}, {"step", 29}}, &second, &error)) << error;
  EXPECT_EQ(second.announced_by, 0);
  EXPECT_EQ(second.dir, first.dir);
  EXPECT_EQ(second.trigger["reason"], "no step ended");
  EXPECT_EQ(incident_dirs(dir.path()).size(), 1u);
  EXPECT_TRUE(rank1.poll().empty()) << "rank 1 knows it: it announced it too";
  std::vector<core::Incident> seen = rank2.poll();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].key, "hang_29");
  EXPECT_TRUE(rank2.poll().empty()) << "once";
  core::IncidentBoard later(dir.path(), 3, detail::realtime_now_ns() + 10'000'000'000);
  EXPECT_TRUE(later.poll().empty()) << "an incident from before the recorder started is old";
  core::IncidentBoard made_late(dir.path(), 3, start);
  EXPECT_EQ(made_late.poll().size(), 1u) << "a board made after its recorder started misses nothing";

  EXPECT_FALSE(rank0.mark_dumped(first, 3));
  EXPECT_FALSE(rank1.mark_dumped(first, 3));
  EXPECT_TRUE(rank2.mark_dumped(first, 3));
  EXPECT_FALSE(core::IncidentBoard::claim_cluster(first)) << "claimed once";
  EXPECT_EQ(core::IncidentBoard::dumped_ranks(first), (std::vector<int>{0, 1, 2}));
}

// An announcement planted to send dumps elsewhere is not followed, and a
// link planted where the announcements go stops no dump: the rank dumps on
// its own, with a message.
TEST(IncidentBoard, PlantedAnnouncementsAndLinksAreNotFollowed) {
  TempDir dir, elsewhere;
  core::IncidentBoard board(dir.path(), 1, 0);
  ASSERT_EQ(::mkdir(dir.sub(".flight_incidents").c_str(), 0700), 0);
  test::write_bytes(dir.sub(".flight_incidents/hang_1"), R"({"dir": "../../tmp", "rank": 0})");
  test::write_bytes(dir.sub(".flight_incidents/hang_2"), "not json");
  EXPECT_TRUE(board.poll().empty());

  TempDir other;
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), other.sub(".flight_incidents").c_str()), 0);
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  FlightRecorderOptions o;
  o.profiler.output_path = other.path();
  o.ring_mb = 8;
  o.analyse = false;
  {
    FlightRecorder recorder(o);
    recorder.step();
    FlightDump d = recorder.dump("by hand");
    ASSERT_FALSE(d.run_dir.empty()) << d.error;
    EXPECT_EQ(fs::path(d.run_dir).parent_path(), fs::path(other.path())) << "on its own";
  }
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
}

// Rank 0's recorder in a world of 2 whose rank 1 is a board: its dump on
// request is an incident, which it analyses alone once rank 1 has not
// dumped within incident_wait_s; rank 1's slow step is dumped here once
// this rank has finished that step, into rank 1's incident, saying who
// announced it.
TEST(FlightRecorder, AnnouncesAndJoinsTheIncidentsOfItsRanks) {
  TempDir dir;
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  FlightRecorderOptions o;
  o.profiler.output_path = dir.path();
  o.ring_mb = 8;
  o.slow_step_factor = 0;
  o.incident_wait_s = 0.5;
  FlightRecorder recorder(o);
  core::IncidentBoard rank1(dir.path(), 1, 0);
  recorder.step();
  FlightDump mine = recorder.dump("checkpoint looked wrong");
  ASSERT_FALSE(mine.run_dir.empty()) << mine.error;
  std::vector<std::string> incidents = incident_dirs(dir.path());
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_TRUE(incidents[0].ends_with("_request_1")) << incidents[0];
  EXPECT_EQ(fs::path(mine.run_dir).parent_path(), fs::path(incidents[0]));
  // Rank 1 never dumps: the report of what is there, after the wait.
  std::string report_file = incidents[0] + "/cluster_analysis_output/straggler_report.txt";
  ASSERT_TRUE(eventually_exists(report_file));
  std::string report = test::read_text(report_file);
  EXPECT_NE(
      report.find("Flight recorder incident 'request_1': request, announced by rank 0: checkpoint looked "
                  "wrong\nDumped: 1 of 2 ranks (0); no dump from rank(s) 1.\n"),
      std::string::npos)
      << report;

  core::Incident theirs;
  std::string error;
  ASSERT_TRUE(rank1.announce("slow_step_3",
                             json{{"trigger", "slow_step"}, {"reason", "step 3 took 1 s"}, {"step", 3}},
                             &theirs, &error))
      << error;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_TRUE(fs::is_empty(theirs.dir)) << "step 3 is not finished here yet";
  for (int i = 0; i < 3; ++i) recorder.step();  // steps 1, 2, 3
  ASSERT_TRUE(eventually_exists(theirs.dir + "/.rank_0.dumped"));
  std::vector<std::string> runs = find_run_directories(theirs.dir);
  ASSERT_EQ(runs.size(), 1u);
  json f = json::parse(test::read_text(runs[0] + "/profiler_info.json"))["flight_recorder"];
  EXPECT_EQ(f["trigger"], "slow_step");
  EXPECT_EQ(f["reason"], "rank 1: step 3 took 1 s");
  EXPECT_EQ(f["incident"]["announced_by"], 1);
  EXPECT_EQ(f["incident"]["key"], "slow_step_3");
  EXPECT_EQ(f["step"], 4) << "the step under way here";
  recorder.stop();
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
}

// A rank that crashes announces it from its crash dump: the other ranks dump
// too, into its incident, and one of them runs the cluster pass once the
// crashed rank's dump is there.
TEST(FlightRecorder, ACrashOfOneRankIsDumpedByTheOthersToo) {
#ifdef TRAINPROF_TEST_SANITIZED
  GTEST_SKIP() << "the sanitizers report faults themselves";
#endif
  TempDir dir;
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  FlightRecorderOptions o;
  o.profiler.output_path = dir.path();
  o.ring_mb = 8;
  o.slow_step_factor = 0;
  o.hang_timeout_s = 0;
  FlightRecorder recorder(o);
  recorder.step();
  test::ProcessResult crashed = test::run_process(
      {"/usr/bin/timeout", "-s", "KILL", "60", test::helper_path("flight_child"), dir.path(), "segv"},
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_EQ(crashed.term_signal, SIGSEGV) << crashed.output;
  std::vector<std::string> incidents = incident_dirs(dir.path());
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_TRUE(incidents[0].ends_with("_crash_30")) << incidents[0];
  std::string report_file = incidents[0] + "/cluster_analysis_output/straggler_report.txt";
  if (!eventually_exists(report_file)) {
    (void)std::system(("find " + dir.path() + " -maxdepth 3 | sort >&2").c_str());
    FAIL() << crashed.output;
  }
  std::string report = test::read_text(report_file);
  EXPECT_EQ(report.rfind(
                "Flight recorder incident 'crash_30': crash, announced by rank 1: SIGSEGV (a crash) during "
                "step 30\nDumped: 2 of 2 ranks (0, 1).\n",
                0),
            0u)
      << report;
  std::vector<std::string> runs = find_run_directories(incidents[0]);
  ASSERT_EQ(runs.size(), 2u);
  for (const std::string& run : runs) {
    json info = json::parse(test::read_text(run + "/profiler_info.json"));
    if (info["rank"] == 0) {
      EXPECT_EQ(info["flight_recorder"]["reason"], "rank 1: SIGSEGV (a crash) during step 30");
    } else {
      EXPECT_EQ(info["flight_recorder"]["signal"], "SIGSEGV");
    }
  }
  recorder.stop();
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
}

// A loss that went wrong: the first step and the ranks it went wrong on,
// and the ranks still fine when they dumped (they joined the incident).
TEST(IncidentReport, NamesTheFirstRankWhoseLossWentWrong) {
  std::vector<analysis::IncidentRank> ranks(3);
  const int64_t first_wrong[] = {31, 30, -1};
  for (int r = 0; r < 3; ++r) {
    json f = {{"trigger", "non_finite_loss"},
              {"reason", "the loss is nan at step 30"},
              {"incident", {{"key", "non_finite_loss"}, {"announced_by", 1}, {"world_size", 3}}}};
    if (first_wrong[r] >= 0) f["first_non_finite_loss"] = {{"step", first_wrong[r]}, {"value", "nan"}};
    ASSERT_TRUE(analysis::parse_incident_rank(f, &ranks[static_cast<size_t>(r)]));
    ranks[static_cast<size_t>(r)].rank = r;
  }
  analysis::IncidentReport r = analysis::incident_report(ranks);
  EXPECT_EQ(r.first_non_finite_step, 30);
  EXPECT_EQ(r.first_non_finite_ranks, (std::vector<int>{1}));
  std::string text = analysis::incident_text(r, ranks);
  EXPECT_NE(text.find("Non-finite loss: first at step 30, on rank(s) 1; rank(s) 2 still had a finite loss "
                      "when they dumped.\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(analysis::incident_json(r)["first_non_finite_loss_ranks"], json({1}));
  // None went wrong: no such line.
  for (analysis::IncidentRank& rank : ranks) rank.first_non_finite_loss_step = -1;
  EXPECT_EQ(analysis::incident_text(analysis::incident_report(ranks), ranks).find("Non-finite"),
            std::string::npos);
}

// The report from the ranks' progress: the highest collective entered in a
// group, the ranks inside it and the members that never entered it.
TEST(IncidentReport, NamesTheCollectiveSomeRanksEnteredAndTheOthersDidNot) {
  std::vector<analysis::IncidentRank> ranks(3);
  for (int r = 0; r < 3; ++r) {
    json f = {
        {"trigger", "hang"},
        {"reason", "no step ended"},
        {"incident", {{"key", "hang_7"}, {"announced_by", 1}, {"world_size", 4}}},
        {"collectives",
         {{{"group", "world"}, {"entered", r == 2 ? 6 : 7}, {"returned", 6}, {"entered_name", "allreduce"}},
          {{"group", "pair"}, {"entered", 3}, {"returned", 3}, {"entered_name", "broadcast"}}}}};
    ASSERT_TRUE(analysis::parse_incident_rank(f, &ranks[static_cast<size_t>(r)]));
    ranks[static_cast<size_t>(r)].rank = r;
    ranks[static_cast<size_t>(r)].pid = 100 + r;
  }
  ranks[2].native_stacks = "thread 101 (x):\na\nthread 102 (main):\nlibc(clock_nanosleep+0x1)\nmain\n";
  EXPECT_FALSE(analysis::parse_incident_rank(json{{"trigger", "hang"}}, &ranks[0])) << "a rank's own dump";
  analysis::IncidentReport r = analysis::incident_report(ranks);
  EXPECT_EQ(r.announced_by, 1);
  EXPECT_EQ(r.not_dumped, (std::vector<int>{3}));
  ASSERT_EQ(r.stuck.size(), 1u) << "the pair's last collective returned everywhere";
  EXPECT_EQ(r.stuck[0].group, "world");
  EXPECT_EQ(r.stuck[0].sequence, 7);
  EXPECT_EQ(r.stuck[0].inside, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.stuck[0].missing, (std::vector<int>{2}));
  std::string text = analysis::incident_text(r, ranks);
  EXPECT_NE(text.find("Dumped: 3 of 4 ranks (0, 1, 2); no dump from rank(s) 3.\n"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("Stuck collective: allreduce #7 of group 'world': rank(s) 0, 1 entered it and wait "
                "inside; rank(s) 2 never entered it.\nRank 2 (last collective entered in the group: #6) "
                "was at:\n  main thread, native:\n    thread 102 (main):\n    "
                "libc(clock_nanosleep+0x1)\n    main\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("thread 101"), std::string::npos) << "only its main thread" << text;
  // The same progress in a slow step's incident: the ranks were moving, nobody is stuck.
  for (analysis::IncidentRank& rank : ranks) rank.trigger = "slow_step";
  EXPECT_TRUE(analysis::incident_report(ranks).stuck.empty());
}

}  // namespace
}  // namespace trainprof
