// Copyright trainprof authors. The cluster pass (analysis/cluster.h) and the
// rank summaries it reads, on summaries made by hand: the arithmetic of
// waiting, the straggler and its cause, and damaged summaries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/rank_summary.h"

namespace trainprof::analysis {
namespace {

constexpr uint64_t kMs = 1000000;

// `ranks` ranks, `steps` steps of 100 ms each with one allreduce at its end;
// rank r arrives at the allreduce `arrive_ms(r, step)` ms into the step.
template <typename Arrive>
std::vector<RankSummary> world(int ranks, int steps, Arrive arrive_ms) {
  std::vector<RankSummary> out;
  for (int r = 0; r < ranks; ++r) {
    RankSummary s;
    s.rank = r;
    s.world_size = ranks;
    RankGroup world;
    world.name = "123";
    for (int k = 0; k < ranks; ++k) world.world_ranks.push_back(k);
    world.origin = "MPI_COMM_WORLD";
    s.groups.push_back(world);
    for (int step = 0; step < steps; ++step) {
      uint64_t start = 1000 * kMs + static_cast<uint64_t>(step) * 100 * kMs;
      uint64_t at = start + static_cast<uint64_t>(arrive_ms(r, step) * kMs);
      RankStep st;
      st.row.step = step;
      st.start_ns = start;
      st.end_ns = start + 100 * kMs;
      st.row.computing_ns = at - start;  // computes until it arrives
      s.steps.push_back(st);
      s.collectives.push_back(RankCollective{0, step + 1, "MPI_Allreduce", at, start + 95 * kMs, 800, step});
    }
    out.push_back(s);
  }
  return out;
}

TEST(Cluster, WaitsAreTheLastArrivalMinusEachOwn) {
  // Rank 2 arrives at 50 ms, the others at 10 ms: each of the three waits 40 ms per step.
  StragglerReport r = find_straggler(world(4, 3, [](int rank, int) { return rank == 2 ? 50.0 : 10.0; }));
  EXPECT_EQ(r.matched, 3u);
  EXPECT_EQ(r.unmatched, 0u);
  EXPECT_EQ(r.total_wait_ns, 3 * 3 * 40 * kMs);
  ASSERT_EQ(r.per_rank.size(), 4u);
  EXPECT_EQ(r.per_rank[0].waited_ns, 3 * 40 * kMs);
  EXPECT_EQ(r.per_rank[2].waited_ns, 0u);
  EXPECT_EQ(r.per_rank[2].waited_for_ns, 9 * 40 * kMs);
  EXPECT_EQ(r.per_rank[2].late_collectives, 3u);
  EXPECT_EQ(r.straggler, 2);
  EXPECT_EQ(r.straggler_steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(r.cause, "compute");
  EXPECT_DOUBLE_EQ(r.excess_computing_ns, 40.0 * kMs);
}

TEST(Cluster, NoStragglerWhenRanksTakeTurns) {
  // Each step another rank is last: none accounts for half of the waiting.
  StragglerReport r =
      find_straggler(world(4, 8, [](int rank, int step) { return rank == step % 4 ? 30.0 : 10.0; }));
  EXPECT_GT(r.total_wait_ns, 0u);
  EXPECT_EQ(r.straggler, -1);
  EXPECT_NE(straggler_text(r).find("No straggler"), std::string::npos);
}

TEST(Cluster, DataWaitIsTheCauseWhenTheLateRankWaitedForData) {
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 1 ? 60.0 : 20.0; });
  // Rank 1 computed as long as the others; it spent its extra 40 ms waiting for data.
  for (RankStep& st : ranks[1].steps) {
    st.row.computing_ns = 20 * kMs;
    st.data_wait_ns = 40 * kMs;
  }
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 1);
  EXPECT_EQ(r.cause, "data loading");
}

TEST(Cluster, OnlyLateStepsCount) {
  // Rank 3 is late in steps 5-7 only.
  StragglerReport r = find_straggler(
      world(4, 10, [](int rank, int step) { return rank == 3 && step >= 5 && step <= 7 ? 70.0 : 10.0; }));
  EXPECT_EQ(r.straggler, 3);
  EXPECT_EQ(step_ranges(r.straggler_steps), "5-7");
}

TEST(Cluster, MissingRanksAndUnmatchedCollectivesAreCounted) {
  std::vector<RankSummary> ranks = world(4, 5, [](int, int) { return 10.0; });
  ranks.erase(ranks.begin() + 1);  // rank 1's run is gone
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.missing_ranks, std::vector<int>{1});
  EXPECT_EQ(r.matched, 0u);
  EXPECT_EQ(r.unmatched, 5u);
  std::string text = straggler_text(r);
  EXPECT_NE(text.find("Missing: rank(s) 1 "), std::string::npos) << text;
}

TEST(Cluster, RanksThatEndedAbnormallyOrEarlyAreNamed) {
  std::vector<RankSummary> ranks = world(3, 6, [](int, int) { return 10.0; });
  ranks[1].end = "killed";
  ranks[1].collectives.resize(3);  // sequences 1-3 of the others' 1-6
  ranks[2].end = "signal";
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.killed_ranks, std::vector<int>{1});
  EXPECT_EQ(r.signaled_ranks, std::vector<int>{2});
  ASSERT_EQ(r.ended_early.size(), 1u);
  EXPECT_EQ(r.ended_early[0].rank, 1);
  EXPECT_EQ(r.ended_early[0].last, 3);
  EXPECT_EQ(r.ended_early[0].group_last, 6);
  EXPECT_EQ(r.matched, 3u);
  EXPECT_EQ(r.unmatched, 3u);
  std::string text = straggler_text(r);
  EXPECT_NE(text.find("Ended abnormally: rank(s) 1 died without a final flush"), std::string::npos) << text;
  EXPECT_NE(text.find("Stopped by a signal: rank(s) 2"), std::string::npos) << text;
  EXPECT_NE(text.find("Ended early: rank 1 (its last collective is #3 of its group, the others reach #6)"),
            std::string::npos)
      << text;
}

TEST(Cluster, StepRangesAreCompact) {
  EXPECT_EQ(step_ranges({1, 2, 3, 5, 7, 8}), "1-3,5,7-8");
  EXPECT_EQ(step_ranges({}), "");
}

TEST(RankSummary, RoundTripsThroughJson) {
  std::vector<RankSummary> ranks = world(2, 2, [](int rank, int) { return 10.0 + rank; });
  ranks[0].steps[1].data_wait_ns = 7;
  ranks[0].steps[1].in_comm_ns = 9;
  RankSummary back;
  ASSERT_EQ(parse_rank_summary(rank_summary_json(ranks[0]), &back), "");
  EXPECT_EQ(back.rank, 0);
  EXPECT_EQ(back.world_size, 2);
  ASSERT_EQ(back.steps.size(), 2u);
  EXPECT_EQ(back.steps[1].data_wait_ns, 7u);
  EXPECT_EQ(back.steps[1].in_comm_ns, 9u);
  EXPECT_EQ(back.steps[0].row.computing_ns, ranks[0].steps[0].row.computing_ns);
  ASSERT_EQ(back.collectives.size(), 2u);
  EXPECT_EQ(back.collectives[1].sequence, 2);
  EXPECT_EQ(back.collectives[1].operation, "MPI_Allreduce");
  EXPECT_EQ(back.groups[0].world_ranks, (std::vector<int32_t>{0, 1}));
}

TEST(RankSummary, DamagedSummariesAreRefusedWithAReason) {
  RankSummary s;
  std::string ok = rank_summary_json(world(2, 1, [](int, int) { return 1.0; })[0]);
  EXPECT_NE(parse_rank_summary("", &s), "");
  EXPECT_NE(parse_rank_summary("[]", &s), "");
  EXPECT_NE(parse_rank_summary(ok.substr(0, ok.size() / 2), &s), "");
  // A float where an integer belongs (fuzzing found nlohmann's conversion of
  // an out-of-range float undefined).
  std::string big = ok;
  big.replace(big.find("\"world_size\":2"), 14, "\"world_size\":1.8e27");
  EXPECT_NE(parse_rank_summary(big, &s).find("integer"), std::string::npos) << parse_rank_summary(big, &s);
  std::string outside = ok;
  outside.replace(outside.find("\"rank\":0"), 8, "\"rank\":5");
  EXPECT_NE(parse_rank_summary(outside, &s).find("outside the world"), std::string::npos);
  std::string bad_group = ok;
  bad_group.replace(bad_group.find("[0,1,\"MPI_Allreduce\""), 3, "[7,");
  EXPECT_NE(parse_rank_summary(bad_group, &s).find("group 7"), std::string::npos)
      << parse_rank_summary(bad_group, &s);
}

}  // namespace
}  // namespace trainprof::analysis
