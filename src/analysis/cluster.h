// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster pass: the ranks' summaries (rank_summary.h) matched collective by
// collective, and the straggler named.
//
// Every member of a group calls its collectives in the same order, so one
// collective is the same (group, sequence) on every rank. A collective can
// finish only after its last member arrived: each other member waited the
// difference between that arrival and its own. Summed per rank that arrived
// last, this is the time the others lost to it; the straggler is the rank
// they lost the most to, and its cause is what it did longer than the others
// in the steps it was late in: computing, waiting for data, or communicating.
#ifndef TRAINPROF_ANALYSIS_CLUSTER_H_
#define TRAINPROF_ANALYSIS_CLUSTER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/rank_summary.h"

namespace trainprof::analysis {

struct RankWaits {
  int rank = 0;
  uint64_t waited_ns = 0;         // this rank waited for the last arrival
  uint64_t waited_for_ns = 0;     // the others waited for this rank (it arrived last)
  uint64_t late_collectives = 0;  // collectives it arrived last at
  uint64_t collectives = 0;       // matched collectives it took part in
  std::map<int64_t, uint64_t> waited_for_by_step;
  // Its waiting at in-flight collectives per step: the rank went on after
  // their call, so it waited later, where it needed their result.
  std::map<int64_t, uint64_t> in_flight_waited_by_step;
  // Per step, means over the steps it was late in (ns): for the cause.
  double computing_ns = 0, data_wait_ns = 0, in_comm_ns = 0, outside_ns = 0;
  // Its waiting at collectives of its counted steps, and how many those
  // are: the part of its exposed communication that is not a transfer.
  uint64_t waited_in_steps_ns = 0;
  size_t steps = 0;
};

struct StragglerReport {
  int world_size = 0;
  std::vector<int> ranks;          // with a summary
  std::vector<int> missing_ranks;  // of the world, without one
  // When the summaries disagree on the world's size (runs of two jobs in
  // one directory): each size with the ranks that said it. Empty: they agree.
  std::vector<std::pair<int, std::vector<int>>> world_sizes;
  uint64_t matched = 0;    // collectives every member of their group recorded
  uint64_t unmatched = 0;  // recorded by some members only
  uint64_t total_wait_ns = 0;
  std::vector<int> killed_ranks;    // runs without a final flush (SIGKILL, a crash)
  std::vector<int> signaled_ranks;  // runs flushed by a signal handler (the job aborted)
  // Ranks whose last collective in a group comes before the last one of its
  // other members there: (rank, its last sequence, the group's last).
  struct EarlyEnd {
    int rank;
    int64_t last;
    int64_t group_last;
  };
  std::vector<EarlyEnd> ended_early;
  bool clocks_aligned = false;   // every rank's times are rank 0's clock
  bool one_host = false;         // every run's host is the same: one clock, nothing to align
  std::string host;              // that host
  uint64_t clock_offset_ns = 0;  // the largest offset removed
  uint64_t clock_error_ns = 0;   // the largest error bound of the alignment
  // Ranks whose clock exchanges went short (unfinished, failed): rank, why.
  std::vector<std::pair<int, std::string>> clock_problems;
  // Ranks whose times cannot be compared with rank 0's: no clock alignment,
  // on another host than rank 0 (or than the lowest rank, without rank 0).
  std::vector<int> unaligned_ranks;
  // The rank that stood out, when unaligned_ranks kept it from being named
  // (its lateness, or the others', may be a clock's offset); -1: none.
  int withheld_straggler = -1;
  std::string numbering;            // collective_numbering.h's lines, set by the caller
  std::vector<RankWaits> per_rank;  // by rank
  int straggler = -1;               // -1: none stands out
  std::vector<int64_t> straggler_steps;
  // "compute", "data loading", "communication", "host work outside operators", "unknown"
  std::string cause;
  // The straggler's excess over the others' median in its late steps (ns per step).
  double excess_computing_ns = 0, excess_data_wait_ns = 0, excess_in_comm_ns = 0, excess_outside_ns = 0;
  double others_computing_ns = 0, others_data_wait_ns = 0, others_in_comm_ns = 0, others_outside_ns = 0;
  // The straggler's functions outside operators (RankSummary::outside_functions).
  std::vector<std::pair<std::string, uint64_t>> straggler_outside_functions;
};

// One rank's part in one communication operation: a collective matched
// across its group, where the rank waited for the last member to arrive and
// the rest is the transfer; or one side of a point-to-point transfer, where a
// receive posted before its send waited for the send (and a send before its
// receive, for the receive).
//
// Its names and its group's world ranks are owned by the summaries the
// timing came from: 10^5 ranks make 10^7 timings, and a copy of each name
// in each (a heap block where the name is long) cost gigabytes.
struct CommTiming {
  std::string_view group;
  const std::vector<int32_t>* group_ranks = nullptr;
  // A collective's sequence in its group; a transfer's count among this
  // rank's transfers of the same operation in the group.
  int64_t sequence = 0;
  std::string_view operation;
  int rank = 0;
  int64_t step = -1;  // this rank's step (-1: none)
  uint64_t start_ns = 0, end_ns = 0, bytes = 0;
  uint64_t wait_ns = 0;   // last arrival (the other side's) - own arrival, at most the elapse
  bool one_host = false;  // every member (the peer) on this rank's host
  bool transfer = false;  // point-to-point
  int32_t peer = -1;      // a transfer's other side (world rank), -1: unknown
  bool sends = false;     // a transfer's sending side
  int32_t tag = -1;       // a transfer's tag, -1: unknown
  uint32_t run = 0;       // index into the rank's RankSummary::run_dirs

  uint64_t elapse_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  // The elapse less the wait: the data moving.
  uint64_t transit_ns() const { return elapse_ns() - std::min(elapse_ns(), wait_ns); }
};

// Whether two of the timings' names are the same: the timings of one
// group share one view of its name, and those of one collective one of its
// operation's, so the pointers mostly answer before the bytes.
inline bool same_name(std::string_view a, std::string_view b) {
  return (a.data() == b.data() && a.size() == b.size()) || a == b;
}
// Every rank's timings of every collective that all members of its group
// recorded, by (group, sequence, rank); then every transfer, by (rank, start).
// Sends and receives pair in order per (group, sender, receiver, tag), as
// MPI delivers them. The timings view the summaries' names: `ranks` must
// outlive them.
std::vector<CommTiming> comm_timings(const std::vector<RankSummary>& ranks);
std::vector<CommTiming> comm_timings(std::vector<RankSummary>&& ranks) = delete;

// What the other ranks' records tell of one rank's communication, learnt
// where its collectives and channels are matched (a pass spread over
// processes, pipeline/cluster_spread.h): for each of its collectives (in
// RankSummary::collectives' order) the last member's arrival, and for each
// of its transfers the other side's start; kUnmatched where a collective's
// members did not all record it, or a transfer has no other side.
struct MatchedEnds {
  static constexpr uint64_t kUnmatched = UINT64_MAX;
  std::vector<uint64_t> collective_last;
  std::vector<uint64_t> transfer_other_start;
};
// The timings of `ranks` alone, those comm_timings would make of them among
// every rank's summary, in its order: `ends[i]` is ranks[i]'s, `host` every
// rank's host. (A collective's members are those of its rank's own group:
// comm_timings takes the highest rank's list, the same where they agree.)
std::vector<CommTiming> own_comm_timings(const std::vector<RankSummary>& ranks,
                                         const std::vector<MatchedEnds>& ends,
                                         const std::map<int, std::string>& host);
std::vector<CommTiming> own_comm_timings(std::vector<RankSummary>&& ranks, const std::vector<MatchedEnds>&,
                                         const std::map<int, std::string>&) = delete;

// Bytes moved over transit time per link, summed over every operation: a
// collective counts as its rank's own link (r -> r), a transfer as sender ->
// receiver (the sending side's record). Links are compared with their like
// (collectives or transfers, over the same transport). Sorted slowest first.
struct LinkBandwidth {
  int src = 0, dst = 0;    // world ranks
  bool collective = true;  // false: point-to-point transfers
  std::string transport;   // "SDMA" (one host) or "RDMA"
  uint64_t bytes = 0;
  uint64_t transit_ns = 0;
  uint64_t operations = 0;
  double gb_per_s = 0;  // bytes / transit_ns; 0 when only_waited
  bool slow = false;    // below kSlowLinkShare of the median of its like (at least 3 of them)
  // Data moved, but every operation's time was waiting for its peer: no
  // transit time to measure a bandwidth over. Kept (the link exists), apart
  // from the medians and the slow ones.
  bool only_waited = false;
};
inline constexpr double kSlowLinkShare = 0.5;
std::vector<LinkBandwidth> link_bandwidths(const std::vector<CommTiming>& timings);
// Its two halves, for timings held by several processes: each link's
// bytes, transit and operations (a link's timings are all its sending
// rank's), then the links made of the sums, every link's once.
std::vector<LinkBandwidth> link_sums(std::span<const CommTiming> timings);
std::vector<LinkBandwidth> finish_links(std::vector<LinkBandwidth> sums);

// The links part of the report: the slow ones, or the slowest few.
std::string links_text(const std::vector<LinkBandwidth>& links);

// A rank stands out when the others lost at least this share of all waiting to it.
inline constexpr double kStragglerShare = 0.5;

StragglerReport find_straggler(const std::vector<RankSummary>& ranks);

// A collective is matched when every member of its group recorded it (and
// the group has more than one): only then is its last arrival known.
inline bool recorded_by_all(size_t arrivals, size_t members) {
  return arrivals >= 2 && arrivals == members;
}

// One channel's (group, sender, receiver, tag) sends and receives, paired:
// MPI does not overtake, so the k-th send by start is the k-th receive.
// Each side keeps its order among equal starts. `pair(send, receive)` is
// called for each pair.
template <typename Side, typename StartOf, typename Pair>
void pair_in_order(std::vector<Side>& sends, std::vector<Side>& receives, StartOf start_of, Pair pair) {
  auto by_start = [&start_of](const Side& a, const Side& b) { return start_of(a) < start_of(b); };
  std::stable_sort(sends.begin(), sends.end(), by_start);
  std::stable_sort(receives.begin(), receives.end(), by_start);
  for (size_t k = 0; k < std::min(sends.size(), receives.size()); ++k) pair(sends[k], receives[k]);
}

// A member's arrival at a collective.
struct Arrival {
  int rank;
  uint64_t start_ns;
  int64_t step;
  bool in_flight;
};
// Collectives matched and not, and all the waiting at them.
struct MatchCounts {
  uint64_t matched = 0;    // every member of the group recorded it
  uint64_t unmatched = 0;  // some members only
  uint64_t total_wait_ns = 0;
};
// One collective's arrivals (from the members that recorded it) against its
// group's size: matched when every member, at least two, recorded it. Then
// each member's wait for the last arrival (by start, then rank) goes to
// waits_of(its rank): waited_ns, and its in-flight waiting per step; what
// they all lost to the last one goes to its waited_for_ns,
// late_collectives and waited_for_by_step.
void match_collective(const std::vector<Arrival>& list, size_t members,
                      const std::function<RankWaits&(int rank)>& waits_of, MatchCounts* counts);

// find_straggler's parts, for a pass spread over processes
// (pipeline/cluster_spread.h), which matches the collectives itself:
// What the summaries say of their ranks (the world, the missing, those that
// ended abnormally, the clocks), with per_rank made, by rank, and no waits.
// Only the summaries' rank, world size, host, clock and end are read.
StragglerReport describe_ranks(const std::vector<RankSummary>& ranks);
// Each rank's last collective sequence per group: those behind their
// group's last, into r.ended_early (a rank once, at its first group by name).
void add_ended_early(StragglerReport& r, const std::map<std::string, std::map<int, int64_t>>& last_by_group);
// With the waits in per_rank and total_wait_ns: the straggler (r.straggler,
// r.straggler_steps) when one stands out; returns its late steps (empty: none).
std::vector<int64_t> name_straggler(StragglerReport& r);
// A rank's means of computing, data wait and time in communication over the
// straggler's late steps, into `w` (its in-flight waiting per step already there).
void late_step_means(const RankSummary& s, const std::vector<int64_t>& late_steps, RankWaits* w);
// With every rank's means in per_rank: the others' medians, the straggler's
// excess over them, and its cause.
void explain_straggler(StragglerReport& r);

// The report as the command prints it (and straggler_report.txt holds).
std::string straggler_text(const StragglerReport& r);

// Its table of each rank's waiting: every rank, or above kRankTableRows
// ranks the distribution of their waiting and the kRankTableListed ranks the
// others waited for most.
inline constexpr size_t kRankTableRows = 64;
inline constexpr size_t kRankTableListed = 20;
std::string rank_table(const std::vector<RankWaits>& per_rank);

// The value at or below which `share` (0-1) of the sorted, non-empty
// `values` lie: the nearest-rank percentile, a value that occurred.
// Its index among `n` sorted values: nearest_rank(share, n).
inline size_t nearest_rank(double share, size_t n) {
  size_t rank = static_cast<size_t>(std::ceil(share * static_cast<double>(n)));
  return std::clamp<size_t>(rank, 1, n) - 1;
}
template <typename T>
T at_share(const std::vector<T>& sorted, double share) {
  return sorted[nearest_rank(share, sorted.size())];
}

// "1-5,7,9-10".
std::string step_ranges(const std::vector<int64_t>& steps);

// The median of `values` (the mean of the middle two of an even count), 0
// for none: the others' median a straggler is measured against.
double median(std::vector<double> values);

// "rerank (train.py:18) 24.400 ms, ...": a rank's functions outside
// operators with their time per step (RankSummary::outside_functions).
std::string outside_function_list(const std::vector<std::pair<std::string, uint64_t>>& functions);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_CLUSTER_H_
