// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster pass spread over processes (ClusterOptions::exchange): the same
// outputs, byte for byte, as the pass in one process. The processes here are
// threads meeting at a barrier; the MPI command (`mpirun trainprof cluster
// --mpi`) is tested in mpi_test.cc.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <algorithm>
#include <barrier>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "analysis/rank_summary.h"
#include "analysis/rank_summary_bytes.h"
#include "exporter/cluster_database.h"
#include "synthetic_job.h"
#include "test_util.h"
#include "trainprof/analyse.h"
#include "trainprof/shard_meeting.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

// `size` threads' all-to-all: each leaves its messages in a shared box,
// all meet, each takes what was left for it, all meet again.
class ThreadExchange final : public ClusterExchange {
 public:
  struct Box {
    explicit Box(int size) : meet(size), messages(static_cast<size_t>(size)) {}
    std::barrier<> meet;
    std::vector<std::vector<std::string>> messages;  // [from][to]
    int calls = 0;                                   // by process 0
  };
  ThreadExchange(Box* box, int index) : box_(box), index_(index) {}
  int index() const override { return index_; }
  int size() const override { return static_cast<int>(box_->messages.size()); }
  std::vector<std::string> all_to_all(std::vector<std::string> outgoing) override {
    EXPECT_EQ(outgoing.size(), box_->messages.size());
    box_->messages[static_cast<size_t>(index_)] = std::move(outgoing);
    if (index_ == 0) ++box_->calls;
    box_->meet.arrive_and_wait();
    std::vector<std::string> incoming;
    for (auto& from : box_->messages) incoming.push_back(from[static_cast<size_t>(index_)]);
    box_->meet.arrive_and_wait();
    return incoming;
  }

 private:
  Box* box_;
  int index_;
};

// The cluster pass on `dir` over `processes` threads: process 0's report,
// and the others' (empty but for warnings).
std::vector<ClusterReport> cluster_over(const std::string& dir, int processes, int* exchanges,
                                        size_t full_json_max_ranks = 1024,
                                        size_t database_split_rows = ClusterOptions{}.database_split_rows) {
  ThreadExchange::Box box(processes);
  std::vector<ClusterReport> reports(static_cast<size_t>(processes));
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      ThreadExchange exchange(&box, p);
      ClusterOptions options;
      options.analyse_missing = false;
      options.exchange = &exchange;
      options.msprof_dir = dir + "/msprof";
      options.full_json_max_ranks = full_json_max_ranks;
      options.database_split_rows = database_split_rows;
      reports[static_cast<size_t>(p)] = cluster(dir, {}, options);
    });
  }
  for (std::thread& t : threads) t.join();
  *exchanges = box.calls;
  return reports;
}

// Every file of `one` in `spread` with the same bytes, and no other.
void expect_same_files(const std::map<std::string, std::string>& one,
                       const std::map<std::string, std::string>& spread) {
  ASSERT_EQ(spread.size(), one.size());
  for (const auto& [name, text] : one) {
    auto it = spread.find(name);
    ASSERT_NE(it, spread.end()) << name;
    EXPECT_TRUE(it->second == text) << name << " differs";
  }
}

// The pass in this process alone, with the msprof-analyze layout.
ClusterReport one_process(const std::string& dir, size_t full_json_max_ranks = 1024) {
  ClusterOptions alone;
  alone.analyse_missing = false;
  alone.msprof_dir = dir + "/msprof";
  alone.full_json_max_ranks = full_json_max_ranks;
  return cluster(dir, {}, alone);
}

// 64 ranks (a shifted numbering, a group left out for one rank, a rank of
// two runs, a straggler): spread over 1, 3 and 4 processes, every output
// file is the one-process pass's, byte for byte.
TEST(ClusterDistributed, SpreadOverProcessesTheOutputsAreTheOneProcessPasses) {
  test::TempDir dir;
  test::write_synthetic_job(dir.path(), 64);
  ClusterReport expected = one_process(dir.path());
  ASSERT_TRUE(expected.ok()) << expected.error;
  EXPECT_EQ(expected.straggler, 5) << expected.text;
  EXPECT_NE(expected.text.find("rank 2 in group 1 +3"), std::string::npos) << expected.text;
  EXPECT_NE(expected.text.find("Not matched: rank 12's"), std::string::npos) << expected.text;
  std::map<std::string, std::string> one = test::cluster_outputs(dir.path());
  EXPECT_GE(one.size(), 64u * 2 + 6) << "each rank's tables and the cluster's";

  for (int processes : {1, 3, 4}) {
    SCOPED_TRACE(std::to_string(processes) + " processes");
    test::remove_cluster_outputs(dir.path());
    int exchanges = 0;
    std::vector<ClusterReport> reports = cluster_over(dir.path(), processes, &exchanges);
    EXPECT_GE(exchanges, 1);
    const ClusterReport& first = reports[0];
    ASSERT_TRUE(first.ok()) << first.error;
    EXPECT_EQ(first.text, expected.text);
    EXPECT_EQ(first.straggler, expected.straggler);
    EXPECT_EQ(first.cause, expected.cause);
    EXPECT_EQ(first.warnings, expected.warnings);
    for (size_t p = 1; p < reports.size(); ++p) {
      EXPECT_TRUE(reports[p].ok()) << reports[p].error;
      EXPECT_TRUE(reports[p].text.empty()) << "only the first process reports";
    }
    expect_same_files(one, test::cluster_outputs(dir.path()));
  }
}

// Above ClusterOptions::full_json_max_ranks (no JSON table of every rank,
// the database, the msprof-analyze layout on request), spread the same.
TEST(ClusterDistributed, AboveTheJsonLimitSpreadOverProcessesTheOutputsAreTheOneProcessPasses) {
  test::TempDir dir;
  test::write_synthetic_job(dir.path(), 80);
  ClusterReport expected = one_process(dir.path(), 64);
  ASSERT_TRUE(expected.ok()) << expected.error;
  EXPECT_EQ(expected.straggler, 5) << expected.text;
  std::map<std::string, std::string> one = test::cluster_outputs(dir.path());
  EXPECT_EQ(one.count("trainprof.db"), 1u);
  EXPECT_EQ(one.count("cluster_communication.json"), 0u);
  EXPECT_GE(one.size(), 80u * 2) << "the msprof-analyze layout's tables";
  test::remove_cluster_outputs(dir.path());
  int exchanges = 0;
  std::vector<ClusterReport> reports = cluster_over(dir.path(), 3, &exchanges, 64);
  ASSERT_TRUE(reports[0].ok()) << reports[0].error;
  EXPECT_EQ(reports[0].text, expected.text);
  EXPECT_EQ(reports[0].warnings, expected.warnings);
  expect_same_files(one, test::cluster_outputs(dir.path()));
}

// Every row of every table of the cluster database at `path` (its parts
// joined), each table's rows sorted; run_info without the pass's name.
std::map<std::string, std::vector<std::string>> database_rows(const std::string& path, std::string* error) {
  sqlite3* db = nullptr;
  *error = exporter::open_cluster_database(path, &db);
  std::map<std::string, std::vector<std::string>> tables;
  for (const char* table : {"run_info", "strings", "communication_groups", "ranks", "steps", "communication",
                            "collectives", "links"}) {
    if (!error->empty()) break;
    sqlite3_stmt* s = nullptr;
    std::string sql = std::string("SELECT * FROM ") + table;
    if (std::string(table) == "run_info") sql += " WHERE key != 'database_pass'";
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::vector<std::string>& rows = tables[table];
    while (s != nullptr && sqlite3_step(s) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const unsigned char* text = sqlite3_column_text(s, c);
        row += (text != nullptr ? reinterpret_cast<const char*>(text) : "NULL") + std::string("|");
      }
      rows.push_back(row);
    }
    sqlite3_finalize(s);
    std::sort(rows.begin(), rows.end());
  }
  sqlite3_close(db);
  return tables;
}

// Above ClusterOptions::database_split_rows, trainprof.db's communication
// rows are split over part files the processes write: joined, every table
// holds the one-process database's rows, at 3 processes (3 parts) and at 10
// (8 parts, processes 8 and 9 send theirs to another's); the other outputs
// are the one-process pass's, byte for byte. A later pass with fewer parts
// removes the parts beyond its own; a part of another pass, or one missing,
// is refused by name.
TEST(ClusterDistributed, AtScaleTheDatabaseIsSplitOverTheProcessesAndJoinsWhole) {
  test::TempDir dir;
  test::write_synthetic_job(dir.path(), 80);
  ClusterReport expected = one_process(dir.path(), 64);
  ASSERT_TRUE(expected.ok()) << expected.error;
  const std::string out = dir.path() + "/cluster_analysis_output/";
  std::string error;
  std::map<std::string, std::vector<std::string>> one = database_rows(out + "trainprof.db", &error);
  ASSERT_EQ(error, "");
  ASSERT_GT(one["communication"].size(), 80u * 30) << "every rank's collectives and transfers";
  std::map<std::string, std::string> one_files = test::cluster_outputs(dir.path());
  one_files.erase("trainprof.db");

  test::remove_cluster_outputs(dir.path());
  for (int processes : {10, 3}) {  // the second over the first's outputs
    SCOPED_TRACE(std::to_string(processes) + " processes");
    int exchanges = 0;
    std::vector<ClusterReport> reports = cluster_over(dir.path(), processes, &exchanges, 64, 0);
    ASSERT_TRUE(reports[0].ok()) << reports[0].error;
    EXPECT_EQ(reports[0].text, expected.text);
    const int parts = std::min(processes, 8);
    for (int part = 1; part < 8; ++part) {
      EXPECT_EQ(fs::exists(out + "trainprof.db.part" + std::to_string(part)), part < parts) << part;
    }
    std::map<std::string, std::vector<std::string>> spread = database_rows(out + "trainprof.db", &error);
    ASSERT_EQ(error, "");
    for (const auto& [table, rows] : one) EXPECT_TRUE(spread[table] == rows) << table << " differs";
    // Each part holds some of the rows: the split is real.
    std::string main_rows = test::sqlite3_query(TRAINPROF_TEST_SQLITE3, out + "trainprof.db",
                                                "SELECT COUNT(*) FROM communication");
    EXPECT_LT(std::stoul(main_rows), one["communication"].size() / 2) << main_rows;
    std::map<std::string, std::string> files = test::cluster_outputs(dir.path());
    files.erase("trainprof.db");
    std::erase_if(files, [](const auto& f) { return f.first.starts_with("trainprof.db.part"); });
    expect_same_files(one_files, files);
  }

  // A part of another pass, then one missing: named, never joined.
  const std::string part2 = out + "trainprof.db.part2";
  fs::copy_file(part2, dir.path() + "/part2.saved");
  {
    int exchanges = 0;
    // Another pass over the same runs: its own name in each file.
    std::vector<ClusterReport> again = cluster_over(dir.path(), 3, &exchanges, 64, 0);
    ASSERT_TRUE(again[0].ok()) << again[0].error;
  }
  fs::copy_file(dir.path() + "/part2.saved", part2, fs::copy_options::overwrite_existing);
  database_rows(out + "trainprof.db", &error);
  EXPECT_NE(error.find("trainprof.db.part2 is a part of another cluster pass"), std::string::npos) << error;
  fs::remove(part2);
  database_rows(out + "trainprof.db", &error);
  EXPECT_NE(error.find("cannot read " + part2), std::string::npos) << error;
}

// Every process meets the others as often whatever it finds: a path with no
// run, and runs whose summaries are damaged on some processes' share only.
TEST(ClusterDistributed, ProcessesThatFindNothingOrDamageStillMeetTheOthers) {
  test::TempDir dir;
  int exchanges = 0;
  std::vector<ClusterReport> reports = cluster_over(dir.sub("nothing"), 3, &exchanges);
  EXPECT_NE(reports[0].error.find("no run directory"), std::string::npos) << reports[0].error;

  test::write_synthetic_job(dir.path(), 16);
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 17u);  // rank 9 has two
  std::ofstream(runs[4] + "/PROFILER_OUTPUT/rank_summary.json", std::ios::trunc) << "{\"version\": 99";
  reports = cluster_over(dir.path(), 3, &exchanges);
  ASSERT_TRUE(reports[0].ok()) << reports[0].error;
  ASSERT_EQ(reports[0].warnings.size(), 1u);
  EXPECT_NE(reports[0].warnings[0].find(runs[4] + "/PROFILER_OUTPUT/rank_summary.json"), std::string::npos)
      << reports[0].warnings[0];
  EXPECT_NE(reports[0].text.find("Missing: rank(s) "), std::string::npos) << reports[0].text;
}

// Runs that cannot be one more cycle of their rank's schedule are left out
// and named, in one process and spread alike: a copy of rank 3's run (it
// overlaps the original in time), a run of rank 7 from a world of 32, and
// rank 20 of that other job, whose size the report names. The straggler
// stays rank 5.
TEST(ClusterDistributed, RunsOfAnotherJobOrCopiesAreLeftOutAndNamed) {
  test::TempDir dir;
  test::write_synthetic_job(dir.path(), 16);
  std::vector<std::string> runs = test::run_dirs(dir.path());
  std::string copy = dir.path() + "/node0_1003_20261127000000009_trainprof";
  fs::copy(runs[3], copy, fs::copy_options::recursive);
  analysis::RankSummary other;
  ASSERT_EQ(
      analysis::parse_rank_summary(test::read_text(runs[4] + "/PROFILER_OUTPUT/rank_summary.json"), &other),
      "");
  other.world_size = 32;
  other.groups.resize(1);
  other.groups[0].name = "777";
  other.groups[0].world_ranks = analysis::GroupMembers::consecutive(0, 32);
  std::erase_if(other.collectives, [](const analysis::RankCollective& c) { return c.group != 0; });
  other.transfers.clear();
  for (int rank : {7, 20}) {
    other.rank = rank;
    std::string run = dir.path() + "/node9_" + std::to_string(2000 + rank) + "_20261127000000009_trainprof";
    fs::create_directories(run + "/PROFILER_OUTPUT");
    std::ofstream(run + "/profiler_info.json") << "{}\n";
    std::ofstream(run + "/PROFILER_OUTPUT/profiler_info.json") << "{}\n";
    std::ofstream(run + "/PROFILER_OUTPUT/rank_summary.json") << analysis::rank_summary_json(other);
  }
  ClusterOptions alone;
  alone.analyse_missing = false;
  ClusterReport one = cluster(dir.path(), {}, alone);
  ASSERT_TRUE(one.ok()) << one.error;
  EXPECT_EQ(one.straggler, 5) << one.text;
  EXPECT_NE(one.text.find("The runs disagree on the world's size: 16 (rank(s) 0-15) 32 (rank(s) 20)"),
            std::string::npos)
      << one.text;
  std::string said;
  for (const std::string& w : one.warnings) said += w + "\n";
  EXPECT_NE(said.find(copy + ": left out of the cluster pass: it overlaps in time rank 3's run " + runs[3]),
            std::string::npos)
      << said;
  EXPECT_NE(
      said.find("node9_2007_20261127000000009_trainprof: left out of the cluster pass: a world of 32 ranks, "
                "where rank 7's earlier run had 16"),
      std::string::npos)
      << said;
  int exchanges = 0;
  std::vector<ClusterReport> spread = cluster_over(dir.path(), 3, &exchanges);
  ASSERT_TRUE(spread[0].ok()) << spread[0].error;
  EXPECT_EQ(spread[0].text, one.text);
  EXPECT_EQ(spread[0].warnings, one.warnings);
}

// Rewrites the summary of `run` with `change`.
template <typename Change>
void change_summary(const std::string& run, Change change) {
  const std::string file = run + "/PROFILER_OUTPUT/rank_summary.json";
  analysis::RankSummary s;
  ASSERT_EQ(analysis::parse_rank_summary(test::read_text(file), &s), "") << file;
  change(s);
  std::ofstream(file, std::ios::trunc) << analysis::rank_summary_json(s);
}

// Two jobs of one world size in one directory, their runs an hour apart (a
// job run again into the same directory, half of its ranks recorded):
// without their job ids the second's runs would pass for further cycles of
// the first's ranks 0-7, their collectives' numbers meeting the first's. The
// job with the most ranks is analysed, exactly as if it were alone, the
// other named and left out; --job-id picks the other; a job no run recorded
// is an error naming those there are. Spread over 3 processes, the same.
TEST(ClusterDistributed, RunsOfTwoJobsAreToldApartByTheirJobIds) {
  test::TempDir dir, second;
  test::write_synthetic_job(dir.path(), 16);
  for (const std::string& run : test::run_dirs(dir.path()))
    change_summary(run, [](analysis::RankSummary& s) { s.job = "602669057"; });
  ClusterReport alone = one_process(dir.path());
  ASSERT_TRUE(alone.ok()) << alone.error;
  ASSERT_EQ(alone.straggler, 5) << alone.text;
  std::map<std::string, std::string> outputs_alone = test::cluster_outputs(dir.path());
  test::remove_cluster_outputs(dir.path());

  test::write_synthetic_job(second.path(), 16);
  constexpr uint64_t kHour = 3600ull * 1000000000ull;
  for (const std::string& run : test::run_dirs(second.path())) {
    analysis::RankSummary s;
    ASSERT_EQ(analysis::parse_rank_summary(test::read_text(run + "/PROFILER_OUTPUT/rank_summary.json"), &s),
              "");
    if (s.rank >= 8) continue;  // ranks 8-15 left nothing
    change_summary(run, [&](analysis::RankSummary& later) {
      later.job = "602669123";
      for (analysis::RankStep& st : later.steps) st.start_ns += kHour, st.end_ns += kHour;
      for (analysis::RankCollective& c : later.collectives) c.start_ns += kHour, c.end_ns += kHour;
      for (analysis::RankTransfer& t : later.transfers) t.start_ns += kHour, t.end_ns += kHour;
    });
    std::string name = fs::path(run).filename().string();
    name.replace(name.find("20261127"), 8, "20261128");
    fs::copy(run, dir.path() + "/" + name, fs::copy_options::recursive);
  }
  ASSERT_EQ(test::run_dirs(dir.path()).size(), 17u + 8u);

  ClusterReport both = one_process(dir.path());
  ASSERT_TRUE(both.ok()) << both.error;
  const std::string jobs_line =
      "Jobs: these runs are of 2 jobs; analysed job '602669057' (16 rank(s), 17 run(s)), the one with the "
      "most "
      "ranks, the latest started among equals; left out '602669123' (8 rank(s), 8 run(s)) (`trainprof "
      "cluster "
      "--job-id ID` analyses another).\n";
  EXPECT_EQ(both.text, jobs_line + alone.text);
  EXPECT_EQ(both.straggler, 5);
  EXPECT_EQ(both.warnings, alone.warnings);
  std::map<std::string, std::string> outputs_both = test::cluster_outputs(dir.path());
  const std::string analysis_json = "cluster_analysis.json", report = "straggler_report.txt";
  nlohmann::json analysis_both = nlohmann::json::parse(outputs_both.at(analysis_json));
  ASSERT_EQ(analysis_both["jobs"].size(), 2u) << analysis_both.dump(1);
  EXPECT_EQ(analysis_both["jobs"][0], nlohmann::json({{"job", "602669057"},
                                                      {"ranks", 16},
                                                      {"runs", 17},
                                                      {"start_ns", 1795551497000000000ull},
                                                      {"analysed", true}}));
  EXPECT_EQ(analysis_both["jobs"][1]["analysed"], false);
  analysis_both.erase("jobs");
  EXPECT_EQ(analysis_both, nlohmann::json::parse(outputs_alone.at(analysis_json)));
  EXPECT_EQ(outputs_both.at(report), jobs_line + outputs_alone.at(report));
  for (auto* outputs : {&outputs_both, &outputs_alone}) outputs->erase(analysis_json), outputs->erase(report);
  expect_same_files(outputs_alone, outputs_both);

  int exchanges = 0;
  test::remove_cluster_outputs(dir.path());
  std::vector<ClusterReport> spread = cluster_over(dir.path(), 3, &exchanges);
  ASSERT_TRUE(spread[0].ok()) << spread[0].error;
  EXPECT_EQ(spread[0].text, both.text);

  ClusterOptions asked;
  asked.analyse_missing = false;
  asked.job_id = "602669123";
  ClusterReport other = cluster(dir.path(), {}, asked);
  ASSERT_TRUE(other.ok()) << other.error;
  EXPECT_NE(other.text.find("analysed job '602669123' (8 rank(s), 8 run(s)), as asked (--job-id); left out "
                            "'602669057' (16 rank(s), 17 run(s))"),
            std::string::npos)
      << other.text;
  EXPECT_EQ(other.missing_ranks, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15})) << other.text;
  // Its world collectives lack ranks 8-15: none is matched, none with the other job's.
  EXPECT_NE(other.text.find("0 collectives matched across their groups"), std::string::npos) << other.text;
  EXPECT_EQ(other.straggler, -1) << other.text;

  asked.job_id = "42";
  ClusterReport none = cluster(dir.path(), {}, asked);
  EXPECT_EQ(
      none.error,
      "no run of job '42' (--job-id); the runs are of '602669057' (16 rank(s), 17 run(s)), '602669123' (8 "
      "rank(s), 8 run(s))");
  asked.exchange = nullptr;
  std::vector<ClusterReport> spread_none(3);
  {
    ThreadExchange::Box box(3);
    std::vector<std::thread> threads;
    for (int p = 0; p < 3; ++p) {
      threads.emplace_back([&, p] {
        ThreadExchange exchange(&box, p);
        ClusterOptions o = asked;
        o.exchange = &exchange;
        spread_none[static_cast<size_t>(p)] = cluster(dir.path(), {}, o);
      });
    }
    for (std::thread& t : threads) t.join();  // every process returns: none waits for another
  }
  for (const ClusterReport& r : spread_none) EXPECT_EQ(r.error, none.error);

  // A run without a job id (a rank whose exchange with rank 0 failed, where
  // the front end names the job): beside two named jobs, left out too ...
  std::string rank7;
  for (const std::string& run : test::run_dirs(dir.path())) {
    if (run.find("_1007_20261127") != std::string::npos) rank7 = run;
  }
  ASSERT_FALSE(rank7.empty());
  change_summary(rank7, [](analysis::RankSummary& s) { s.job.clear(); });
  ClusterReport without = one_process(dir.path());
  ASSERT_TRUE(without.ok()) << without.error;
  EXPECT_EQ(
      without.text.rfind("Jobs: these runs are of 3 jobs; analysed job '602669057' (15 rank(s), 16 run(s)), "
                         "the one with the most ranks, the latest started among equals; left out runs "
                         "without a job id (1 rank(s), 1 run(s)), '602669123' (8 rank(s), 8 run(s))",
                         0),
      0u)
      << without.text;
  EXPECT_EQ(without.missing_ranks, std::vector<int>{7});
  // ... and with the only job named, analysed with it, as before job ids.
  for (const std::string& run : test::run_dirs(dir.path())) {
    if (run.find("20261128") != std::string::npos) fs::remove_all(run);
  }
  ClusterReport one_named = one_process(dir.path());
  ASSERT_TRUE(one_named.ok()) << one_named.error;
  EXPECT_EQ(one_named.text, alone.text);
}

// The bytes a summary travels in: read back whole; cut or damaged, refused.
TEST(ClusterDistributed, SummariesTravelWholeAndDamagedBytesAreRefused) {
  test::TempDir dir;
  test::write_synthetic_job(dir.path(), 16);
  std::vector<std::string> runs = test::run_dirs(dir.path());
  analysis::RankSummary s;
  ASSERT_EQ(analysis::parse_rank_summary(test::read_text(runs[2] + "/PROFILER_OUTPUT/rank_summary.json"), &s),
            "");
  s.run_dirs = {"a", "b"};
  s.collectives[3].in_flight = true;
  std::string bytes;
  analysis::append_rank_summary_bytes(s, &bytes);
  analysis::append_rank_summary_bytes(s, &bytes);  // two, one after the other
  std::string_view in = bytes;
  analysis::RankSummary back, again;
  ASSERT_TRUE(analysis::read_rank_summary_bytes(&in, &back));
  ASSERT_TRUE(analysis::read_rank_summary_bytes(&in, &again));
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(analysis::rank_summary_json(back), analysis::rank_summary_json(s));
  EXPECT_EQ(back.run_dirs, s.run_dirs);
  EXPECT_TRUE(back.collectives[3].in_flight);
  EXPECT_EQ(back.groups.size(), s.groups.size());
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2 - 1}) {
    std::string_view part = std::string_view(bytes).substr(0, cut);
    EXPECT_FALSE(analysis::read_rank_summary_bytes(&part, &back)) << cut;
  }
  std::string huge = bytes;
  std::fill(huge.begin() + 8, huge.begin() + 16, '\xff');  // the host's length
  std::string_view damaged = huge;
  EXPECT_FALSE(analysis::read_rank_summary_bytes(&damaged, &back));
}

// `analyse --mpi` meets through files: the first process's decision on the
// cluster pass reaches the others; the first decision made stands (another
// process that gave up waiting for the first decides "alone", and the first
// follows it); anything but the file decide() writes (a planted symlink)
// reads as "alone", so it cannot draw the processes into MPI; the place
// removed under them reads as "alone" too (they end rather than wait on).
TEST(ShardMeeting, TheFirstDecisionStandsAndAnythingElseMeansAlone) {
  test::TempDir dir;
  const std::string place = dir.path() + "/cluster_analysis_output/.analyse_mpi_job_1";
  std::string error;
  {
    ShardMeeting first(dir.path(), "job/1", 2), second(dir.path(), "job/1", 2);
    ASSERT_TRUE(first.ok()) << first.error();
    ASSERT_TRUE(second.ok()) << second.error();
    EXPECT_EQ(second.decision(), ShardMeeting::Decision::kNone);
    EXPECT_EQ(first.mark(0, true, 3), "");
    EXPECT_EQ(second.mark(1, false, 2), "");
    int failed = 0;
    EXPECT_EQ(first.marked(&failed), std::vector<bool>({true, true}));
    EXPECT_EQ(failed, 1);
    ASSERT_TRUE(std::filesystem::is_directory(place));
    EXPECT_EQ(first.decide(ShardMeeting::Decision::kSpread, &error), ShardMeeting::Decision::kSpread);
    EXPECT_EQ(error, "");
    EXPECT_EQ(second.decision(), ShardMeeting::Decision::kSpread);
    // Giving up later changes nothing: the decision stands.
    EXPECT_EQ(second.decide(ShardMeeting::Decision::kAlone, &error), ShardMeeting::Decision::kSpread);
    first.remove();
    EXPECT_FALSE(std::filesystem::exists(place));
    EXPECT_EQ(second.decision(), ShardMeeting::Decision::kAlone);
  }
  {
    ShardMeeting first(dir.path(), "job/1", 2), second(dir.path(), "job/1", 2);
    EXPECT_EQ(second.decide(ShardMeeting::Decision::kAlone, &error), ShardMeeting::Decision::kAlone);
    EXPECT_EQ(first.decide(ShardMeeting::Decision::kSpread, &error), ShardMeeting::Decision::kAlone);
    first.remove();
  }
  {
    ShardMeeting first(dir.path(), "job/1", 2), second(dir.path(), "job/1", 2);
    std::ofstream(dir.path() + "/elsewhere") << "spread\n";
    std::filesystem::create_symlink(dir.path() + "/elsewhere", place + "/decision");
    EXPECT_EQ(second.decision(), ShardMeeting::Decision::kAlone);
    EXPECT_EQ(first.decide(ShardMeeting::Decision::kSpread, &error), ShardMeeting::Decision::kAlone);
    EXPECT_EQ(test::read_text(dir.path() + "/elsewhere"), "spread\n");  // not written through
  }
}

}  // namespace
}  // namespace trainprof
