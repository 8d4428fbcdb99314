// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster pass (analysis/cluster.h) and the rank summaries it reads, on
// summaries made by hand: the arithmetic of waiting, the straggler and its
// cause, transfers paired across ranks, the communication tables
// (export/communication_json.h), slow links, and damaged summaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/advisor.h"
#include "analysis/cluster.h"
#include "analysis/cluster_path.h"
#include "analysis/collective_numbering.h"
#include "analysis/comm_digest.h"
#include "analysis/rank_summary.h"
#include "analysis/rank_summary_bytes.h"
#include "exporter/communication_json.h"
#include "raw/format.h"

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
    world.world_ranks = GroupMembers::consecutive(0, ranks);
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
  // The advisor's finding: each other rank waited 40 ms for it per step.
  std::vector<Finding> advice = advise_cluster(r, {});
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].rule, "straggler");
  EXPECT_EQ(advice[0].rank, 2);
  EXPECT_DOUBLE_EQ(advice[0].saving_ms, 40.0);
  EXPECT_NE(advice[0].change.find("a slower or throttled device"), std::string::npos) << advice[0].change;
  // Re-timed (analysis/cluster_path.h), the saving is the estimate's, and
  // under a twentieth of the job's step it is not worth a finding.
  advice = advise_cluster(r, {}, 100, 95);
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_DOUBLE_EQ(advice[0].saving_ms, 5);
  EXPECT_EQ(advice[0].saving_basis, "re-timed: the job's steps with its work at the others' median");
  EXPECT_TRUE(advise_cluster(r, {}, 100, 95.1).empty());
}

TEST(Cluster, NoStragglerWhenRanksTakeTurns) {
  // Each step another rank is last: none accounts for half of the waiting.
  StragglerReport r =
      find_straggler(world(4, 8, [](int rank, int step) { return rank == step % 4 ? 30.0 : 10.0; }));
  EXPECT_GT(r.total_wait_ns, 0u);
  EXPECT_EQ(r.straggler, -1);
  EXPECT_NE(straggler_text(r).find("No straggler"), std::string::npos);
  EXPECT_TRUE(advise_cluster(r, {}).empty());
}

// The job's path and the straggler what-if on the steps of `world`: rank 2
// arrives at 50 ms, the others at 10, the allreduce ends at 95, the steps at
// 100. Each step's path: rank 2's work, the allreduce, the step's end.
// Re-timed with rank 2 at the median, the allreduce starts at 10 ms and its
// 45 ms after the last arrival and the 5 ms tail follow: 60 ms.
TEST(ClusterPath, TheStepGoesThroughTheLastArrivalAndShrinksWithTheStragglerAtTheMedian) {
  std::vector<RankSummary> ranks = world(4, 3, [](int rank, int) { return rank == 2 ? 50.0 : 10.0; });
  ClusterPath path = cluster_critical_path(ranks, 2);
  ASSERT_EQ(path.segments.size(), 3u * 3);
  EXPECT_FALSE(path.segments[0].communication);
  EXPECT_EQ(path.segments[0].rank, 2);
  EXPECT_EQ(path.segments[0].dur_ns, 50 * kMs);
  EXPECT_EQ(path.segments[0].name, "before MPI_Allreduce #1 (123)");
  EXPECT_TRUE(path.segments[1].communication);
  EXPECT_EQ(path.segments[1].dur_ns, 45 * kMs);
  EXPECT_EQ(path.segments[2].name, "to the step's end");
  EXPECT_EQ(path.segments[2].dur_ns, 5 * kMs);
  ASSERT_EQ(path.straggler_at_median.size(), 3u);
  for (const StepEstimate& e : path.straggler_at_median) {
    EXPECT_EQ(e.recorded_ns, 100 * kMs);
    EXPECT_EQ(e.estimated_ns, 60 * kMs);
  }
  // A rank that is not slow: nothing changes (its pieces never grow).
  for (const StepEstimate& e : cluster_critical_path(ranks, 1).straggler_at_median)
    EXPECT_EQ(e.estimated_ns, e.recorded_ns);
}

// DDP's buckets on two ranks: each rank posts a bucket's all-reduce and
// goes on (in flight); rank 0 posts at 10 and 20 ms, rank 1, 30 ms of extra
// work later, at 40 and 50; the buckets complete at 45 and 55 on both, and
// each rank ends its step 5 ms after the last (the optimizer), at 60. No
// collective holds a rank, yet rank 0 waits: re-timed with rank 1 at rank
// 0's pace, the buckets complete at 15 and 25 and the step ends at 30.
TEST(ClusterPath, AStragglerLateToInFlightCollectivesIsReTimed) {
  std::vector<RankSummary> ranks = world(2, 3, [](int, int) { return 0.0; });
  for (RankSummary& s : ranks) {
    s.collectives.clear();
    uint64_t late = s.rank == 1 ? 30 * kMs : 0;
    for (int step = 0; step < 3; ++step) {
      RankStep& st = s.steps[static_cast<size_t>(step)];
      st.end_ns = st.start_ns + 60 * kMs;
      for (int bucket = 0; bucket < 2; ++bucket) {
        uint64_t call = st.start_ns + late + static_cast<uint64_t>(10 + 10 * bucket) * kMs;
        uint64_t done = st.start_ns + static_cast<uint64_t>(45 + 10 * bucket) * kMs;
        s.collectives.push_back(
            RankCollective{0, 2 * step + bucket + 1, "allreduce", call, done, 800, step, 0, true});
      }
    }
  }
  ClusterPath path = cluster_critical_path(ranks, 1);
  ASSERT_EQ(path.straggler_at_median.size(), 3u);
  for (const StepEstimate& e : path.straggler_at_median) {
    EXPECT_EQ(e.recorded_ns, 60 * kMs);
    EXPECT_EQ(e.estimated_ns, 30 * kMs);
  }
  for (const StepEstimate& e : cluster_critical_path(ranks, 0).straggler_at_median)
    EXPECT_EQ(e.estimated_ns, e.recorded_ns);  // rank 0's pieces are never longer than rank 1's
  // The chain follows blocking collectives only: each step's is its last rank's work.
  ASSERT_EQ(path.segments.size(), 3u);
  for (const ClusterPathSegment& s : path.segments) EXPECT_FALSE(s.communication);
}

// Rank 1's extra 25 ms per step is Python outside operators: the cause
// names it and its functions, and the advice says which function to move.
TEST(Cluster, HostWorkOutsideOperatorsIsTheCauseAndItsFunctionsAreNamed) {
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 1 ? 35.0 : 10.0; });
  for (RankSummary& s : ranks) {
    for (RankStep& st : s.steps) {
      st.row.computing_ns = 10 * kMs;
      st.outside_ns = s.rank == 1 ? 26 * kMs : 1 * kMs;
    }
  }
  ranks[1].outside_functions = {{"rerank (train.py:18)", 25 * kMs}, {"main (train.py:30)", 1 * kMs}};
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 1);
  EXPECT_EQ(r.cause, "host work outside operators");
  EXPECT_DOUBLE_EQ(r.excess_outside_ns, 25.0 * kMs);
  EXPECT_NE(straggler_text(r).find("Rank 1's time outside operators, per step: rerank (train.py:18) 25.0 ms"),
            std::string::npos)
      << straggler_text(r);
  std::vector<Finding> advice = advise_cluster(r, {});
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_NE(advice[0].change.find("(rerank (train.py:18))"), std::string::npos) << advice[0].change;
  EXPECT_NE(advice[0].evidence.find("outside operators, per step: rerank (train.py:18)"), std::string::npos);
  // Through the summary's JSON and bytes.
  RankSummary back;
  ASSERT_EQ(parse_rank_summary(rank_summary_json(ranks[1]), &back), "");
  EXPECT_EQ(back.outside_functions, ranks[1].outside_functions);
  EXPECT_EQ(back.steps[2].outside_ns, 26 * kMs);
  std::string bytes;
  append_rank_summary_bytes(ranks[1], &bytes);
  std::string_view view = bytes;
  ASSERT_TRUE(read_rank_summary_bytes(&view, &back));
  EXPECT_EQ(back.outside_functions, ranks[1].outside_functions);
  EXPECT_EQ(back.steps[2].outside_ns, 26 * kMs);
}

TEST(Cluster, TheAdvisorWantsTwoThirdsOfTheWaitingOnOneRank) {
  // Rank 2 is late in steps 0-4, rank 1 in steps 5-8: the cluster report
  // names rank 2 (5/9 of the waiting), the advisor does not.
  StragglerReport r = find_straggler(world(4, 9, [](int rank, int step) {
    return (rank == 2 && step < 5) || (rank == 1 && step >= 5) ? 30.0 : 10.0;
  }));
  EXPECT_EQ(r.straggler, 2);
  EXPECT_TRUE(advise_cluster(r, {}).empty());
  r = find_straggler(world(4, 9, [](int rank, int step) {
    return (rank == 2 && step < 6) || (rank == 1 && step >= 6) ? 30.0 : 10.0;
  }));
  ASSERT_EQ(advise_cluster(r, {}).size(), 1u);  // 6/9
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

TEST(Cluster, DataWaitCountedAsComputingIsStillDataLoading) {
  // PyTorch's DataLoader wraps the loop's wait for a batch in a range of its
  // own, so the step trace counts that wait as computing: rank 1's 60 ms
  // hold its 38 ms wait for data (and 2 ms more work than the others'),
  // which, counted twice, made "compute" the larger excess.
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 1 ? 60.0 : 20.0; });
  for (RankStep& st : ranks[1].steps) st.data_wait_ns = 38 * kMs;  // computing_ns stays 60 ms
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 1);
  EXPECT_EQ(r.cause, "data loading");
  EXPECT_DOUBLE_EQ(r.excess_computing_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(r.excess_data_wait_ns, 38.0 * kMs);
}

TEST(Cluster, ADataWaitOutOfComputingIsNotTakenOutAgain) {
  // Since rank summary version 4 the step trace keeps the data wait out of
  // computing: rank 1's 60 ms are computing alone, beside 30 ms of waiting
  // for data. Taken out once more, compute would fall to 30 ms and the cause
  // would turn to data loading.
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 1 ? 60.0 : 20.0; });
  for (RankSummary& s : ranks) s.data_wait_separate = true;
  for (RankStep& st : ranks[1].steps) st.data_wait_ns = 30 * kMs;
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 1);
  EXPECT_EQ(r.cause, "compute");
  EXPECT_DOUBLE_EQ(r.excess_computing_ns, 40.0 * kMs);
  EXPECT_DOUBLE_EQ(r.excess_data_wait_ns, 30.0 * kMs);
}

TEST(Cluster, WaitsAtInFlightCollectivesCountedAsComputingAreNotTheCause) {
  // DDP over Gloo: every rank posts its bucket's all-reduce and goes on; the
  // others then wait for rank 3 inside their backward range (computing), not
  // inside a communication call. Rank 3 computed 40 ms more before it posted.
  std::vector<RankSummary> ranks = world(4, 4, [](int rank, int) { return rank == 3 ? 60.0 : 20.0; });
  for (RankSummary& s : ranks) {
    for (RankCollective& c : s.collectives) c.in_flight = true;
    for (RankStep& st : s.steps) {
      st.row.computing_ns = 65 * kMs;             // every rank computes until the result came at 65 ms
      if (s.rank != 3) st.row.free_ns = 5 * kMs;  // some of the wait fell outside any range
    }
  }
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 3);
  EXPECT_EQ(r.cause, "compute");
  // The others' 40 ms wait, less the 5 ms of free time, was counted as computing.
  EXPECT_DOUBLE_EQ(r.others_computing_ns, 30.0 * kMs);
  // Without the in-flight marks the waits are not known to be inside computing.
  for (RankSummary& s : ranks)
    for (RankCollective& c : s.collectives) c.in_flight = false;
  EXPECT_EQ(find_straggler(ranks).cause, "unknown");
}

TEST(Cluster, RanksOfOneHostShareItsClock) {
  std::vector<RankSummary> ranks = world(3, 2, [](int, int) { return 10.0; });
  for (RankSummary& s : ranks) s.host = "node7";
  StragglerReport r = find_straggler(ranks);
  EXPECT_TRUE(r.one_host);
  EXPECT_NE(straggler_text(r).find("Clocks: one host (node7), one clock"), std::string::npos);
  ranks[2].host = "node8";  // another machine, and no measured offsets
  r = find_straggler(ranks);
  EXPECT_FALSE(r.one_host);
  EXPECT_NE(straggler_text(r).find("Clocks: not aligned"), std::string::npos);
}

// A rank on another host whose clock was never aligned to rank 0's and
// that always seems to arrive last (its clock may simply run ahead) is not
// named the straggler: the report says who stood out and why it was not
// named. Aligned, the same rank is named.
TEST(Cluster, ARankWhoseClockCannotBeComparedIsNeverNamedTheStraggler) {
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 2 ? 60.0 : 10.0; });
  ranks[0].host = ranks[1].host = "a";
  ranks[2].host = "b";
  ranks[0].clock_aligned = ranks[1].clock_aligned = true;
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, -1);
  EXPECT_EQ(r.withheld_straggler, 2);
  EXPECT_EQ(r.unaligned_ranks, std::vector<int>{2});
  std::string text = straggler_text(r);
  EXPECT_NE(
      text.find("No straggler named: rank 2 accounts for most of the waiting, but rank(s) 2 are on other "
                "hosts than rank 0 with clocks not aligned to it"),
      std::string::npos)
      << text;
  ranks[2].clock_aligned = true;
  r = find_straggler(ranks);
  EXPECT_EQ(r.straggler, 2);
  EXPECT_EQ(r.withheld_straggler, -1);
  ranks[2].clock_aligned = false;
  ranks[2].host = "a";  // rank 0's host: one clock
  EXPECT_EQ(find_straggler(ranks).straggler, 2);
}

// A rank whose wall clock runs ahead of rank 0's by 300 ms at its first
// measurement and 302 ms at its second, 10 s later: its times come out on
// rank 0's clock, less the offset interpolated at each moment (this clock
// minus the reference's: a positive offset moves times earlier).
TEST(RankSummary, AMeasuredClockOffsetIsTakenOffWithItsSignAndDrift) {
  constexpr uint64_t kS = 1000 * kMs;
  TraceModel m;
  m.rank = 1;
  m.world_size = 2;
  m.realtime_offset_ns = 100 * static_cast<int64_t>(kS);  // wall = monotonic + 100 s
  m.strings = {"", "7", "allreduce"};
  m.comm_groups.push_back(CommGroup{1, {0, 1}, "torch.distributed gloo"});
  m.clock_offsets = {{101 * kS, 300 * static_cast<int64_t>(kMs), 5000},
                     {111 * kS, 302 * static_cast<int64_t>(kMs), 7000}};
  m.steps.push_back(StepWindow{0, 2 * kS, 3 * kS});  // wall 102 s: 0.2 ms of drift so far
  CommCall c{};
  c.start_ns = 6 * kS;  // wall 106 s: halfway, 301 ms
  c.end_ns = 21 * kS;   // wall 121 s: after the last measurement, its 302 ms
  c.name = 2;
  c.group = 1;
  c.flags = raw::kCommCollective;
  c.sequence = 0;
  c.peer = -1;
  c.tag = -1;
  m.comm_calls.push_back(c);
  RankSummary s = rank_summary(m, {});
  EXPECT_TRUE(s.clock_aligned);
  EXPECT_EQ(s.clock_offset_ns, 302 * kMs);
  EXPECT_EQ(s.clock_error_ns, 7000U);
  ASSERT_EQ(s.steps.size(), 1U);
  EXPECT_EQ(s.steps[0].start_ns, 102 * kS - 300 * kMs - 200000);
  EXPECT_EQ(s.steps[0].end_ns, 103 * kS - 300 * kMs - 400000);
  ASSERT_EQ(s.collectives.size(), 1U);
  EXPECT_EQ(s.collectives[0].start_ns, 106 * kS - 301 * kMs);
  EXPECT_EQ(s.collectives[0].end_ns, 121 * kS - 302 * kMs);
  EXPECT_EQ(s.collectives[0].step, -1);  // its start is after the step's window

  // A clock behind rank 0's: the times move later by the offset's size.
  m.clock_offsets = {{101 * kS, -250 * static_cast<int64_t>(kMs), 5000}};
  s = rank_summary(m, {});
  EXPECT_EQ(s.clock_offset_ns, 250 * kMs);  // the size, whatever the sign
  EXPECT_EQ(s.collectives[0].start_ns, 106 * kS + 250 * kMs);

  // No measurement: the rank's own clock, and not aligned.
  m.clock_offsets.clear();
  s = rank_summary(m, {});
  EXPECT_FALSE(s.clock_aligned);
  EXPECT_EQ(s.collectives[0].start_ns, 106 * kS);
}

// A rank whose clock exchange with rank 0 failed or had not ended says so in
// the cluster report, by rank, with the reason; the summary carries it.
TEST(Cluster, RanksWhoseClockExchangeWentShortAreNamedWithTheReason) {
  std::vector<RankSummary> ranks = world(3, 2, [](int, int) { return 10.0; });
  ranks[0].host = "a", ranks[1].host = "b", ranks[2].host = "c";
  ranks[0].clock_aligned = ranks[1].clock_aligned = true;
  ranks[2].clock_problem =
      "1 of 1 clock exchange(s) with the reference rank failed (TimeoutError: no answer)";
  RankSummary back;
  ASSERT_EQ(parse_rank_summary(rank_summary_json(ranks[2]), &back), "");
  EXPECT_EQ(back.clock_problem, ranks[2].clock_problem);
  StragglerReport r = find_straggler(ranks);
  EXPECT_FALSE(r.clocks_aligned);
  ASSERT_EQ(r.clock_problems.size(), 1U);
  EXPECT_EQ(r.clock_problems[0].first, 2);
  std::string text = straggler_text(r);
  EXPECT_NE(text.find("Clocks: not aligned"), std::string::npos) << text;
  EXPECT_NE(
      text.find(
          "  rank 2: 1 of 1 clock exchange(s) with the reference rank failed (TimeoutError: no answer).\n"),
      std::string::npos)
      << text;
}

// torch.distributed ranks that started profiling at different collectives:
// rank 1 two steps late, rank 2 three, each numbering from its first call.
std::vector<RankSummary> late_starters() {
  std::vector<RankSummary> ranks = world(3, 6, [](int rank, int) { return rank == 1 ? 60.0 : 10.0; });
  for (RankSummary& s : ranks) {
    s.host = "node1";
    s.groups[0].origin = "torch.distributed gloo";
    size_t late = s.rank == 1 ? 2 : s.rank == 2 ? 3 : 0;
    s.collectives.erase(s.collectives.begin(), s.collectives.begin() + static_cast<std::ptrdiff_t>(late));
    for (size_t i = 0; i < s.collectives.size(); ++i) s.collectives[i].sequence = static_cast<int64_t>(i);
  }
  return ranks;
}

TEST(CollectiveNumbering, RanksThatStartedProfilingLaterAreRenumberedAndMatched) {
  std::vector<RankSummary> ranks = late_starters();
  // As numbered, rank 1's first allreduce (step 2) meets rank 0's of step 0.
  StragglerReport wrong = find_straggler(ranks);
  NumberingReport n = align_collective_numbering(ranks, 0);
  ASSERT_EQ(n.shifted.size(), 2u);
  EXPECT_EQ(n.shifted[0].rank, 1);
  EXPECT_EQ(n.shifted[0].offset, 2);
  EXPECT_EQ(n.shifted[1].rank, 2);
  EXPECT_EQ(n.shifted[1].offset, 3);
  EXPECT_TRUE(n.unaligned.empty());
  StragglerReport r = find_straggler(ranks);
  EXPECT_EQ(r.matched, 3u);    // steps 3-5: all three recorded them
  EXPECT_EQ(r.unmatched, 3u);  // steps 0-2: rank 0 alone, or ranks 0 and 1
  EXPECT_EQ(r.straggler, 1);
  EXPECT_EQ(r.total_wait_ns, 3 * 2 * 50 * kMs);  // ranks 0 and 2 wait 50 ms in each
  EXPECT_NE(wrong.total_wait_ns, r.total_wait_ns);
  EXPECT_EQ(
      numbering_text(n),
      "Collective numbering: rank 1 in group 123 +2, rank 2 in group 123 +3 (it started profiling at another "
      "collective than the others; matched by operation, bytes and time).\n");
}

// A broadcast's receivers leave it once the root's data is in: rank 1
// may be done before rank 2 (3x the batch, late) comes. Its members' spans
// need not overlap, and the ranks numbered alike stay matched.
TEST(CollectiveNumbering, ABroadcastsReceiversNeedNotMeet) {
  std::vector<RankSummary> ranks = world(3, 4, [](int rank, int) { return rank == 2 ? 60.0 : 10.0; });
  for (RankSummary& s : ranks) {
    s.host = "node1";
    s.groups[0].origin = "torch.distributed gloo";
    for (RankCollective& c : s.collectives) c.sequence *= 2;
    uint64_t start = s.steps[1].start_ns + (s.rank == 2 ? 40 : s.rank == 1 ? 5 : 1) * kMs;
    s.collectives.push_back(RankCollective{0, 5, "broadcast", start, start + kMs, 8, 1});
    std::sort(s.collectives.begin(), s.collectives.end(),
              [](const RankCollective& a, const RankCollective& b) { return a.sequence < b.sequence; });
  }
  NumberingReport n = align_collective_numbering(ranks, 0);
  EXPECT_TRUE(n.unaligned.empty()) << numbering_text(n);
  EXPECT_TRUE(n.shifted.empty()) << numbering_text(n);
  EXPECT_EQ(find_straggler(ranks).matched, 5u);
}

TEST(CollectiveNumbering, BackToBackCollectivesAreToldApartByWhenTheyEnd) {
  // With 20 ms of clock error each collective also overlaps its neighbours
  // (5 ms apart): the members of one leave it together, 0 ms apart; taken
  // one off, 100 ms.
  std::vector<RankSummary> ranks = late_starters();
  NumberingReport n = align_collective_numbering(ranks, 20 * kMs);
  ASSERT_EQ(n.shifted.size(), 2u) << numbering_text(n);
  EXPECT_EQ(n.shifted[0].offset, 2);
  EXPECT_EQ(n.shifted[1].offset, 3);
  EXPECT_TRUE(n.unaligned.empty()) << numbering_text(n);
}

TEST(CollectiveNumbering, ARankThatSharesNoCollectiveIsLeftOutAndSaid) {
  std::vector<RankSummary> ranks = late_starters();
  // Rank 2's calls are all after rank 0's and rank 1's last.
  for (RankCollective& c : ranks[2].collectives) c.start_ns += 10000 * kMs, c.end_ns += 10000 * kMs;
  NumberingReport n = align_collective_numbering(ranks, 0);
  ASSERT_EQ(n.unaligned.size(), 1u);
  EXPECT_EQ(n.unaligned[0].rank, 2);
  EXPECT_EQ(n.unaligned[0].collectives, 3u);
  EXPECT_TRUE(ranks[2].collectives.empty());  // never matched to the wrong ones
  EXPECT_NE(
      numbering_text(n).find("Not matched: rank 2's 3 collective(s) in group 123: none of its collectives"),
      std::string::npos)
      << numbering_text(n);
}

TEST(CollectiveNumbering, ConcurrentLookAlikesKeepTheirNumberingWhenItFits) {
  // Every rank started together: offset 0 fits, though each call also looks
  // like its neighbours in content.
  std::vector<RankSummary> ranks = world(2, 4, [](int, int) { return 10.0; });
  for (RankSummary& s : ranks) s.groups[0].origin = "torch.distributed gloo";
  NumberingReport n = align_collective_numbering(ranks, 1000 * kMs);  // a huge clock error
  EXPECT_TRUE(n.shifted.empty());
  EXPECT_TRUE(n.unaligned.empty());
  EXPECT_EQ(find_straggler(ranks).matched, 4u);
}

TEST(CollectiveNumbering, MpiGroupsAreNumberedFromTheirCreationAndLeftAlone) {
  std::vector<RankSummary> ranks = late_starters();
  for (RankSummary& s : ranks) s.groups[0].origin = "MPI_COMM_WORLD";
  std::vector<int64_t> before;
  for (const RankCollective& c : ranks[1].collectives) before.push_back(c.sequence);
  NumberingReport n = align_collective_numbering(ranks, 0);
  EXPECT_TRUE(n.shifted.empty() && n.unaligned.empty());
  std::vector<int64_t> after;
  for (const RankCollective& c : ranks[1].collectives) after.push_back(c.sequence);
  EXPECT_EQ(before, after);
}

TEST(CollectiveNumbering, WithoutOneClockOnlyAFittingNumberingIsKept) {
  std::vector<RankSummary> ranks = late_starters();
  ranks[1].host = "node2";  // another machine, clocks not aligned: times cannot say which call is which
  NumberingReport n = align_collective_numbering(ranks, 0);
  ASSERT_EQ(n.unaligned.size(), 0u);  // its calls look like rank 0's as numbered: kept
  ranks = late_starters();
  ranks[1].host = "node2";
  ranks[1].collectives[0].bytes = 4;  // and now they do not
  n = align_collective_numbering(ranks, 0);
  ASSERT_EQ(n.unaligned.size(), 1u);
  EXPECT_EQ(n.unaligned[0].rank, 1);
  EXPECT_NE(n.unaligned[0].why.find("without aligned clocks"), std::string::npos) << n.unaligned[0].why;
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
  // Gaps before the first rank there and after the last, in a larger world.
  ranks.erase(ranks.begin());  // ranks 2 and 3 remain
  for (RankSummary& s : ranks) s.world_size = 6;
  EXPECT_EQ(find_straggler(ranks).missing_ranks, (std::vector<int>{0, 1, 4, 5}));
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
  EXPECT_FALSE(back.data_wait_separate);
  EXPECT_EQ(back.steps[1].row.data_wait_ns, 0u);  // not a Data Wait column: in the computing
  ranks[0].data_wait_separate = true;             // as rank_summary() makes them
  ASSERT_EQ(parse_rank_summary(rank_summary_json(ranks[0]), &back), "");
  EXPECT_TRUE(back.data_wait_separate);
  EXPECT_EQ(back.steps[1].row.data_wait_ns, 7u);  // the cluster step trace's Data Wait
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
  // A world size no job has would make the cluster pass list billions of
  // missing ranks (fuzzing found it taking minutes).
  std::string huge = ok;
  huge.replace(huge.find("\"world_size\":2"), 14, "\"world_size\":2000000000");
  EXPECT_NE(parse_rank_summary(huge, &s).find("over 2^24"), std::string::npos)
      << parse_rank_summary(huge, &s);
  std::string bad_group = ok;
  bad_group.replace(bad_group.find("[0,1,\"MPI_Allreduce\""), 3, "[7,");
  EXPECT_NE(parse_rank_summary(bad_group, &s).find("group 7"), std::string::npos)
      << parse_rank_summary(bad_group, &s);
}

// Two ranks: rank 0 sends to rank 1 twice on tag 5 (and once with a tag the
// receive never resolved). The first receive is posted 5 ms before its send
// (it waits for it), the second send 3 ms before its receive.
std::vector<RankSummary> two_ranks_with_transfers() {
  std::vector<RankSummary> ranks = world(2, 1, [](int, int) { return 90.0; });
  uint64_t t = 1000 * kMs;
  auto transfer = [](uint64_t start, uint64_t end, int32_t peer, int32_t tag, bool send) {
    return RankTransfer{0, send ? "MPI_Send" : "MPI_Recv", start, end, 4000000, 0, peer, tag, send};
  };
  ranks[0].transfers = {transfer(t + 10 * kMs, t + 11 * kMs, 1, 5, true),
                        transfer(t + 20 * kMs, t + 25 * kMs, 1, 5, true)};
  ranks[1].transfers = {transfer(t + 5 * kMs, t + 11 * kMs, 0, 5, false),
                        transfer(t + 23 * kMs, t + 25 * kMs, 0, 5, false),
                        transfer(t + 30 * kMs, t + 31 * kMs, 0, -1, false)};
  return ranks;
}

const CommTiming* find_timing(const std::vector<CommTiming>& all, int rank, const std::string& op,
                              int64_t seq) {
  for (const CommTiming& t : all) {
    if (t.rank == rank && t.operation == op && t.sequence == seq) return &t;
  }
  return nullptr;
}

TEST(Cluster, TransfersPairInOrderAndTheEarlierSideWaits) {
  const std::vector<RankSummary> ranks = two_ranks_with_transfers();
  std::vector<CommTiming> all = comm_timings(ranks);
  const CommTiming* send0 = find_timing(all, 0, "MPI_Send", 0);
  const CommTiming* send1 = find_timing(all, 0, "MPI_Send", 1);
  const CommTiming* recv0 = find_timing(all, 1, "MPI_Recv", 0);
  const CommTiming* recv1 = find_timing(all, 1, "MPI_Recv", 1);
  const CommTiming* unresolved = find_timing(all, 1, "MPI_Recv", 2);
  ASSERT_TRUE(send0 && send1 && recv0 && recv1 && unresolved);
  EXPECT_EQ(recv0->wait_ns, 5 * kMs);  // posted 5 ms before the send
  EXPECT_EQ(send0->wait_ns, 0u);
  EXPECT_EQ(send1->wait_ns, 3 * kMs);  // sent 3 ms before the receive was posted
  EXPECT_EQ(recv1->wait_ns, 0u);
  EXPECT_EQ(unresolved->wait_ns, 0u);  // no pair: nothing known of its wait
  EXPECT_TRUE(send0->transfer && send0->sends && !recv0->sends);
  EXPECT_EQ(send0->peer, 1);
  // The allreduces are there as well, one per rank.
  EXPECT_NE(find_timing(all, 0, "MPI_Allreduce", 1), nullptr);
}

TEST(CommunicationJson, RankTablesInTheSeedsSchema) {
  std::vector<RankSummary> ranks = two_ranks_with_transfers();
  ranks[0].host = ranks[1].host = "node";
  std::vector<CommTiming> all = comm_timings(ranks);
  std::vector<const CommTiming*> rank1;
  for (const CommTiming& t : all) {
    if (t.rank == 1) rank1.push_back(&t);
  }
  nlohmann::json c = nlohmann::json::parse(exporter::rank_communication_json(rank1));
  const nlohmann::json& p2p = c.at("step0").at("p2p");
  const nlohmann::json& time = p2p.at("MPI_Recv_0@123").at("Communication Time Info");
  EXPECT_DOUBLE_EQ(time.at("Elapse Time(ms)").get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(time.at("Wait Time(ms)").get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(time.at("Transit Time(ms)").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(time.at("Wait Time Ratio").get<double>(), 0.8333);
  const nlohmann::json& sdma = p2p.at("MPI_Recv_0@123").at("Communication Bandwidth Info").at("SDMA");
  EXPECT_DOUBLE_EQ(sdma.at("Transit Size(MB)").get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(sdma.at("Bandwidth(GB/s)").get<double>(), 4.0);  // 4 MB in 1 ms
  EXPECT_TRUE(p2p.contains("Total Op Info"));
  EXPECT_DOUBLE_EQ(p2p.at("Total Op Info").at("Communication Time Info").at("Wait Time(ms)").get<double>(),
                   5.0);
  EXPECT_TRUE(c.at("step0").at("collective").contains("MPI_Allreduce_1@123"));

  // The receiver's matrix names only its own place; the data is on the sender's link.
  nlohmann::json m = nlohmann::json::parse(exporter::rank_communication_matrix_json(rank1));
  const nlohmann::json& recv_top = m.at("step0").at("p2p").at("recv-top1@123");
  EXPECT_EQ(recv_top.size(), 1u);
  EXPECT_DOUBLE_EQ(recv_top.at("1-1").at("Transit Size(MB)").get<double>(), 0.0);
  EXPECT_TRUE(m.at("step0").at("p2p").contains("recv-bottom3@123"));  // three receives
  nlohmann::json cluster = nlohmann::json::parse(exporter::cluster_communication_matrix_json(all));
  const nlohmann::json& total = cluster.at("(0, 1)").at("step0").at("Total Op Info@123");
  EXPECT_DOUBLE_EQ(total.at("0-1").at("Transit Size(MB)").get<double>(), 8.0);  // both sends, once each
  EXPECT_DOUBLE_EQ(total.at("0-1").at("Transit Time(ms)").get<double>(), 1.0 + 2.0);
  nlohmann::json times = nlohmann::json::parse(exporter::cluster_communication_json(all));
  EXPECT_TRUE(times.at("(0, 1)").at("step0").at("MPI_Send_1@123").contains("0"));
  EXPECT_TRUE(times.at("(0, 1)").at("step0").contains("Total Op Info@123"));
}

// The tables are written as they are made, not as a tree: their text is
// the one nlohmann dumps for the same document (sorted keys, its spacing and
// numbers), each operation's entry in the cluster files too.
TEST(CommunicationJson, TheStreamedTablesAreTheTextATreeWouldDump) {
  std::vector<RankSummary> ranks = two_ranks_with_transfers();
  ranks[0].host = "node";
  ranks[1].host = "other";  // a transport of each kind
  std::vector<CommTiming> all = comm_timings(ranks);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<const CommTiming*> mine;
    for (const CommTiming& t : all) {
      if (t.rank == rank) mine.push_back(&t);
    }
    for (const std::string& text :
         {exporter::rank_communication_json(mine), exporter::rank_communication_matrix_json(mine)}) {
      EXPECT_EQ(text, nlohmann::json::parse(text).dump(1) + "\n");
      EXPECT_GT(text.size(), 1000u);
    }
  }
  // The cluster files: an entry per rank of each operation (times), or per
  // operation (links), each its tree's one-line text.
  for (bool per_rank : {true, false}) {
    std::string text = per_rank ? exporter::cluster_communication_json(all)
                                : exporter::cluster_communication_matrix_json(all);
    size_t entries = 0;
    const nlohmann::json doc = nlohmann::json::parse(text);
    for (const auto& [tuple, steps] : doc.items()) {
      for (const auto& [step, ops] : steps.items()) {
        for (const auto& [op, value] : ops.items()) {
          for (const auto& [name, entry] : per_rank ? value.items() : ops.items()) {
            std::string line = "\"" + name + "\": " + entry.dump();
            EXPECT_NE(text.find(line), std::string::npos) << line;
            ++entries;
          }
          if (!per_rank) break;  // the operations were the entries
        }
      }
    }
    EXPECT_GT(entries, 5u);
  }
}

TEST(CommunicationJson, EachMembersCollectiveWaitIsTheLastArrivalMinusItsOwn) {
  // Three ranks reach the allreduce at 10, 30 and 50 ms into the step; all
  // leave it at 95 ms. The last (rank 2) starts it at 50 ms: the others
  // waited 40 and 20 ms, and every member's transit is 95 - 50 = 45 ms.
  std::vector<RankSummary> ranks = world(3, 1, [](int rank, int) { return 10.0 + 20.0 * rank; });
  for (RankSummary& s : ranks) s.host = "node";
  std::vector<CommTiming> all = comm_timings(ranks);
  const double wait_ms[] = {40.0, 20.0, 0.0};
  nlohmann::json cluster = nlohmann::json::parse(exporter::cluster_communication_json(all));
  const nlohmann::json& op = cluster.at("(0, 1, 2)").at("step0").at("MPI_Allreduce_1@123");
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<const CommTiming*> mine;
    for (const CommTiming& t : all) {
      if (t.rank == rank) mine.push_back(&t);
    }
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_EQ(mine[0]->wait_ns, static_cast<uint64_t>(wait_ms[rank] * kMs)) << rank;
    const nlohmann::json own = nlohmann::json::parse(exporter::rank_communication_json(mine));
    for (const nlohmann::json* time :
         {&own.at("step0").at("collective").at("MPI_Allreduce_1@123").at("Communication Time Info"),
          &op.at(std::to_string(rank)).at("Communication Time Info")}) {
      EXPECT_DOUBLE_EQ(time->at("Elapse Time(ms)").get<double>(), 85.0 - 20.0 * rank) << rank;
      EXPECT_DOUBLE_EQ(time->at("Wait Time(ms)").get<double>(), wait_ms[rank]) << rank;
      EXPECT_DOUBLE_EQ(time->at("Transit Time(ms)").get<double>(), 45.0) << rank;
    }
  }
}

TEST(CommunicationJson, GroupNamesHoldingTheKeysSeparatorsAreTheirOwnGroups) {
  // A process group may be named anything: "a@b-total@c" holds the '@' that
  // ends a matrix key's operation and the "-total" that marks a sum. The
  // cluster matrix still finds the group (it threw before) and sums only the
  // totals.
  std::vector<RankSummary> ranks = world(2, 1, [](int rank, int) { return 10.0 + 20.0 * rank; });
  for (RankSummary& s : ranks) {
    s.host = "node";
    s.groups[0].name = "a@b-total@c";
  }
  std::vector<CommTiming> all = comm_timings(ranks);
  ASSERT_EQ(all.size(), 2u);
  nlohmann::json cluster = nlohmann::json::parse(exporter::cluster_communication_matrix_json(all));
  const nlohmann::json& step = cluster.at("(0, 1)").at("step0");
  ASSERT_TRUE(step.contains("Total Op Info@a@b-total@c")) << step.dump();
  EXPECT_TRUE(step.contains("allreduce-top1@a@b-total@c"));
  // Both ranks' own links, summed once from the "-total" entry alone.
  EXPECT_DOUBLE_EQ(step.at("Total Op Info@a@b-total@c").at("0-0").at("Transit Size(MB)").get<double>(),
                   step.at("allreduce-total@a@b-total@c").at("0-0").at("Transit Size(MB)").get<double>());
  std::vector<const CommTiming*> rank0{&all[0]};
  nlohmann::json own = nlohmann::json::parse(exporter::rank_communication_matrix_json(rank0));
  EXPECT_TRUE(own.at("step0").at("collective").contains("allreduce-top1@a@b-total@c"));
}

TEST(Cluster, ALinkFarBelowItsLikeIsSlow) {
  // Four ranks pass 8 MB around a ring in 1 ms per step, except 2 -> 3 (10 ms).
  std::vector<RankSummary> ranks = world(4, 2, [](int, int) { return 10.0; });
  for (RankSummary& s : ranks) {
    s.host = "node";
    int next = (s.rank + 1) % 4, previous = (s.rank + 3) % 4;
    for (int step = 0; step < 2; ++step) {
      uint64_t t = 1000 * kMs + static_cast<uint64_t>(step) * 100 * kMs + 50 * kMs;
      uint64_t took = (s.rank == 2 ? 10 : 1) * kMs, took_in = (previous == 2 ? 10 : 1) * kMs;
      s.transfers.push_back(RankTransfer{0, "MPI_Send", t, t + took, 8000000, step, next, 1, true});
      s.transfers.push_back(RankTransfer{0, "MPI_Recv", t, t + took_in, 8000000, step, previous, 1, false});
    }
  }
  std::vector<LinkBandwidth> links = link_bandwidths(comm_timings(ranks));
  std::vector<LinkBandwidth> transfers;
  for (const LinkBandwidth& l : links) {
    if (!l.collective) transfers.push_back(l);
  }
  ASSERT_EQ(transfers.size(), 4u);
  EXPECT_EQ(transfers[0].src, 2);  // slowest first
  EXPECT_EQ(transfers[0].dst, 3);
  EXPECT_TRUE(transfers[0].slow);
  EXPECT_NEAR(transfers[0].gb_per_s, 0.8, 1e-9);
  EXPECT_FALSE(transfers[1].slow);
  EXPECT_NE(links_text(links).find("SLOW 2->3"), std::string::npos) << links_text(links);
  // The advisor names that link, and no other.
  std::vector<Finding> advice = advise_cluster(find_straggler(ranks), links);
  ASSERT_EQ(advice.size(), 1u);
  EXPECT_EQ(advice[0].rule, "slow_link");
  EXPECT_EQ(advice[0].title, "the link from rank 2 to rank 3 is slow");
  EXPECT_NE(advice[0].evidence.find("0.800 GB/s over 2 operations"), std::string::npos) << advice[0].evidence;
}

TEST(Cluster, ALinkWhoseTransfersOnlyWaitedStaysAndIsMarked) {
  // Rank 0 sends 4 MB to rank 1 twice; rank 1 posts each receive 5 ms after
  // the send started and the data is there at once: all of the send's time
  // is waiting. Rank 1's replies of 1 MB take 1 ms of transit each.
  std::vector<RankSummary> ranks = world(2, 2, [](int, int) { return 10.0; });
  for (RankSummary& s : ranks) {
    s.host = "node";
    for (int step = 0; step < 2; ++step) {
      uint64_t t = 1000 * kMs + static_cast<uint64_t>(step) * 100 * kMs + 50 * kMs;
      if (s.rank == 0) {
        s.transfers.push_back(RankTransfer{0, "MPI_Send", t, t + 5 * kMs, 4000000, step, 1, 1, true});
        s.transfers.push_back(
            RankTransfer{0, "MPI_Recv", t + 10 * kMs, t + 11 * kMs, 1000000, step, 1, 2, false});
      } else {
        s.transfers.push_back(
            RankTransfer{0, "MPI_Recv", t + 5 * kMs, t + 5 * kMs, 4000000, step, 0, 1, false});
        s.transfers.push_back(
            RankTransfer{0, "MPI_Send", t + 10 * kMs, t + 11 * kMs, 1000000, step, 0, 2, true});
      }
    }
  }
  std::vector<LinkBandwidth> transfers;
  for (const LinkBandwidth& l : link_bandwidths(comm_timings(ranks))) {
    if (!l.collective) transfers.push_back(l);
  }
  ASSERT_EQ(transfers.size(), 2u);
  EXPECT_EQ(transfers[0].src, 1);  // the measured link first
  EXPECT_FALSE(transfers[0].only_waited);
  EXPECT_NEAR(transfers[0].gb_per_s, 1.0, 1e-9);
  EXPECT_EQ(transfers[1].src, 0);
  EXPECT_EQ(transfers[1].dst, 1);
  EXPECT_TRUE(transfers[1].only_waited);
  EXPECT_EQ(transfers[1].bytes, 8000000u);
  EXPECT_EQ(transfers[1].operations, 2u);
  EXPECT_EQ(transfers[1].transit_ns, 0u);
  EXPECT_FALSE(transfers[1].slow);
  std::string text = links_text(link_bandwidths(comm_timings(ranks)));
  EXPECT_NE(text.find("transfers within a host (SDMA): 1 links, median 1.000 GB/s"), std::string::npos)
      << text;
  EXPECT_NE(text.find("only waited 0->1: 8.000 MB in 2 operations"), std::string::npos) << text;
  // In the matrix too: the link with its bytes, marked.
  nlohmann::json matrix =
      nlohmann::json::parse(exporter::cluster_communication_matrix_json(comm_timings(ranks)));
  const nlohmann::json& total = matrix.at("(0, 1)").at("step0").at("Total Op Info@123");
  EXPECT_DOUBLE_EQ(total.at("0-1").at("Transit Size(MB)").get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(total.at("0-1").at("Transit Time(ms)").get<double>(), 0.0);
  EXPECT_TRUE(total.at("0-1").value("Only Waited", false)) << total.dump();
  EXPECT_FALSE(total.at("1-0").contains("Only Waited")) << total.dump();  // the measured reply
}

TEST(RankSummary, TransfersRoundTripAndVersion1IsRead) {
  std::vector<RankSummary> ranks = two_ranks_with_transfers();
  RankSummary back;
  std::string text = rank_summary_json(ranks[1]);
  ASSERT_EQ(parse_rank_summary(text, &back), "");
  ASSERT_EQ(back.transfers.size(), 3u);
  EXPECT_EQ(back.transfers[0].peer, 0);
  EXPECT_EQ(back.transfers[0].tag, 5);
  EXPECT_FALSE(back.transfers[0].send);
  EXPECT_EQ(back.transfers[2].tag, -1);
  // A summary written before transfers existed.
  // A summary written before transfers existed, with 7-element collectives.
  nlohmann::json old = nlohmann::json::parse(text);
  old["version"] = 1;
  old.erase("transfers");
  for (nlohmann::json& c : old["collectives"]) c.erase(c.size() - 1);
  ASSERT_EQ(parse_rank_summary(old.dump(), &back), "");
  EXPECT_TRUE(back.transfers.empty());
  ASSERT_EQ(back.collectives.size(), 1u);
  EXPECT_FALSE(back.collectives[0].in_flight);
  old["version"] = 3;  // version 3 collectives have 8 elements
  EXPECT_NE(parse_rank_summary(old.dump(), &back).find("8-element"), std::string::npos);
  old["version"] = 6;
  EXPECT_NE(parse_rank_summary(old.dump(), &back).find("version"), std::string::npos);
}

// A group's members are written as runs of consecutive ranks, in their
// group-rank order (a world of 10^5 ranks is [[0, 99999]] in every
// summary, not 10^5 numbers); the plain lists of earlier summaries are read
// alike, and runs that cannot be are refused.
TEST(RankSummary, GroupMembersTravelAsRunsInTheirOrder) {
  std::vector<RankSummary> ranks = world(2, 2, [](int, int) { return 10.0; });
  RankSummary s = ranks[0];
  s.groups.push_back({"scattered", {3, 4, 5, 9, 1, 2, 7}, "test"});
  std::string text = rank_summary_json(s);
  nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["groups"][0]["ranks"], nlohmann::json::parse("[[0, 1]]"));
  EXPECT_EQ(j["groups"].back()["ranks"], nlohmann::json::parse("[[3, 5], 9, [1, 2], 7]"));
  RankSummary back;
  ASSERT_EQ(parse_rank_summary(text, &back), "");
  EXPECT_EQ(back.groups.back().world_ranks, (std::vector<int32_t>{3, 4, 5, 9, 1, 2, 7}));
  EXPECT_EQ(back.groups[0].world_ranks, (std::vector<int32_t>{0, 1}));
  // So do the bytes a spread pass sends them in.
  std::string bytes;
  append_rank_summary_bytes(s, &bytes);
  std::string_view in = bytes;
  RankSummary sent;
  ASSERT_TRUE(read_rank_summary_bytes(&in, &sent));
  EXPECT_EQ(sent.groups.back().world_ranks, (std::vector<int32_t>{3, 4, 5, 9, 1, 2, 7}));

  j["version"] = 4;
  j["groups"].back()["ranks"] = nlohmann::json::parse("[3, 4, 5, 9, 1, 2, 7]");
  ASSERT_EQ(parse_rank_summary(j.dump(), &back), "");
  EXPECT_EQ(back.groups.back().world_ranks, (std::vector<int32_t>{3, 4, 5, 9, 1, 2, 7}));
  for (const char* damaged : {"[[5, 3]]", "[[1, 2, 3]]", "[[0, 2147483647]]", "[\"0-3\"]", "{}"}) {
    SCOPED_TRACE(damaged);
    j["groups"].back()["ranks"] = nlohmann::json::parse(damaged);
    EXPECT_NE(parse_rank_summary(j.dump(), &back), "");
  }
}

TEST(RankSummary, InFlightCollectivesRoundTrip) {
  std::vector<RankSummary> ranks = world(2, 2, [](int, int) { return 10.0; });
  ranks[0].collectives[1].in_flight = true;
  RankSummary back;
  ASSERT_EQ(parse_rank_summary(rank_summary_json(ranks[0]), &back), "");
  ASSERT_EQ(back.collectives.size(), 2u);
  EXPECT_FALSE(back.collectives[0].in_flight);
  EXPECT_TRUE(back.collectives[1].in_flight);
}

}  // namespace
}  // namespace trainprof::analysis

namespace trainprof::analysis {
namespace {

// A collective's members split over processes (rank % 3, as the spread
// pass holds them), each share's part merged in any order: the row, its
// arrivals and its operations are those of the part over every member.
// Starts tie (the last arrival is then the higher rank, the first the
// lower); one member names another operation.
TEST(CommDigest, PartsOfACollectiveAddUpToItsWholeRow) {
  for (int members : {10, 64, 65, 300}) {
    SCOPED_TRACE(std::to_string(members) + " members");
    std::vector<CommTiming> timings;
    for (int rank = 0; rank < members; ++rank) {
      CommTiming t;
      t.group = "world";
      t.sequence = 7;
      t.operation = rank == 4 ? "allreduce_coalesced" : "allreduce";
      t.rank = rank;
      t.step = rank % 5;
      t.start_ns = 1000 + static_cast<uint64_t>((rank * 37) % 50) * 10;  // ties among ranks
      t.end_ns = 9000 + static_cast<uint64_t>(rank % 7);
      t.wait_ns = static_cast<uint64_t>(rank) * 3;
      t.bytes = 1024 + static_cast<uint64_t>(rank % 2);
      timings.push_back(t);
    }
    std::vector<CollectivePart> whole;
    collective_parts(timings, [&](CollectivePart&& p) { whole.push_back(std::move(p)); });
    ASSERT_EQ(whole.size(), 1u);
    for (std::vector<int> order : {std::vector<int>{0, 1, 2}, {2, 0, 1}, {1, 2, 0}}) {
      std::vector<CollectivePart> shares(3);
      for (int share = 0; share < 3; ++share) {
        std::vector<CommTiming> mine;
        for (const CommTiming& t : timings) {
          if (t.rank % 3 == share) mine.push_back(t);
        }
        collective_parts(mine,
                         [&](CollectivePart&& p) { shares[static_cast<size_t>(share)] = std::move(p); });
      }
      CollectivePart merged = std::move(shares[static_cast<size_t>(order[0])]);
      merge_part(std::move(shares[static_cast<size_t>(order[1])]), &merged);
      merge_part(std::move(shares[static_cast<size_t>(order[2])]), &merged);
      const CollectiveRow& a = merged.row;
      const CollectiveRow& b = whole[0].row;
      EXPECT_EQ(std::tie(a.group, a.sequence, a.operation, a.last_operation, a.step, a.members, a.bytes),
                std::tie(b.group, b.sequence, b.operation, b.last_operation, b.step, b.members, b.bytes));
      EXPECT_EQ(std::tie(a.first_start_ns, a.first_rank, a.last_start_ns, a.last_rank, a.end_ns, a.wait_ns),
                std::tie(b.first_start_ns, b.first_rank, b.last_start_ns, b.last_rank, b.end_ns, b.wait_ns));
      EXPECT_EQ(a.all_arrivals, b.all_arrivals);
      EXPECT_EQ(a.all_arrivals, members <= 64);
      ASSERT_EQ(a.arrivals.size(), b.arrivals.size());
      EXPECT_EQ(a.arrivals.size(), members <= 64 ? static_cast<size_t>(members) : 16u);
      for (size_t i = 0; i < a.arrivals.size(); ++i) {
        EXPECT_EQ(std::tie(a.arrivals[i].rank, a.arrivals[i].start_ns, a.arrivals[i].wait_ns,
                           a.arrivals[i].elapse_ns),
                  std::tie(b.arrivals[i].rank, b.arrivals[i].start_ns, b.arrivals[i].wait_ns,
                           b.arrivals[i].elapse_ns))
            << i;
      }
      EXPECT_EQ(merged.lowest_rank, 0);
      std::vector<std::string> ops_a = merged.operations, ops_b = whole[0].operations;
      std::sort(ops_a.begin(), ops_a.end());
      std::sort(ops_b.begin(), ops_b.end());
      EXPECT_EQ(ops_a, ops_b);
      EXPECT_EQ(ops_b.size(), 2u);
    }
  }
}

}  // namespace
}  // namespace trainprof::analysis
