// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the cluster's outputs keep of every rank's communication timings
// (cluster.h, comm_timings), in a form that adds up: made from any share of the
// timings, merged, and the same whatever the shares.
//
// At 10^5 ranks the timings are 10^7 or more; a pass spread over processes
// (pipeline/cluster_digest_spread.h) keeps each process's where they were
// made and sends process 0 their digests instead:
//   - a rank digest, from any set of whole ranks' timings: each group's and
//     operation's distributions, counts and bytes, each rank's totals, the
//     links' sums, the slowest transfers;
//   - a collective digest, from any set of whole collectives: each
//     collective's row and the slowest ones with their members' latest
//     arrivals. A collective's row adds up from parts (CollectivePart: the
//     row over the members one process holds), so its members' timings
//     never travel, only a part from each process holding some.
// Distributions are kept as each value at the resolution it is reported
// at (1e-4 ms, 1e-4 GB/s) with its count: rounding keeps the order, so the
// nearest-rank percentiles of the counts are those of the values, rounded.
#ifndef TRAINPROF_ANALYSIS_COMM_DIGEST_H_
#define TRAINPROF_ANALYSIS_COMM_DIGEST_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "analysis/cluster.h"

namespace trainprof::analysis {

// How many of the slowest collectives and transfers a digest keeps in full.
inline constexpr size_t kSlowestKept = 20;
// A collective's arrivals kept: every member in groups of up to
// kArrivalsAll, else the latest kArrivalsLatest.
inline constexpr size_t kArrivalsAll = 64;
inline constexpr size_t kArrivalsLatest = 16;

// Values at the reported resolution (units of 1e-4), with their counts,
// ascending once sealed.
class ValueCounts {
 public:
  static int64_t unit_of(double value);  // std::round(value * 1e4)
  void add(double value) { pending_.push_back(unit_of(value)); }
  // Sorts and counts what was added; merges another's sealed counts.
  void seal();
  void merge(const ValueCounts& other);
  bool empty() const { return counts_.empty(); }
  uint64_t total() const;
  // The nearest-rank value at or below which `share` of them lie, in the
  // reported unit (a value that occurred, rounded); sealed, non-empty.
  double at_share(double share) const;
  double min() const { return static_cast<double>(counts_.front().first) / 1e4; }
  double max() const { return static_cast<double>(counts_.back().first) / 1e4; }
  const std::vector<std::pair<int64_t, uint64_t>>& counts() const { return counts_; }
  std::vector<std::pair<int64_t, uint64_t>>& mutable_counts() { return counts_; }

 private:
  std::vector<int64_t> pending_;
  std::vector<std::pair<int64_t, uint64_t>> counts_;
};

// One operation of one group, over every rank's part in it.
struct OperationDigest {
  uint64_t operations = 0;  // collectives (distinct sequences) or transfers (sending sides)
  uint64_t parts = 0;       // every rank's part
  uint64_t bytes = 0;       // collectives: each member's; transfers: the sending sides'
  ValueCounts elapse_ms, wait_ms, transit_ms, gb_per_s;
};

struct GroupDigest {
  // Its size, as its first part in comm_timings' order said: (sequence,
  // rank) for collectives, (rank, the rank's count of transfers) for
  // transfers; the smallest key stands. kUnknownMembers: it named no list
  // (the group's ranks with a part are said instead).
  static constexpr uint64_t kUnknownMembers = UINT64_MAX;
  uint64_t members = kUnknownMembers;
  std::pair<int64_t, int64_t> members_said_at{INT64_MAX, INT64_MAX};
  uint64_t ranks = 0;  // ranks with a part in it
  std::map<std::string, OperationDigest> operations;
};

struct RankTotals {
  uint64_t operations = 0, elapse_ns = 0, wait_ns = 0, transit_ns = 0, bytes = 0;
};

// One side of a transfer, listed among the slowest.
struct SlowTransfer {
  std::string group, operation;
  int rank = 0, peer = -1, tag = -1;
  bool sends = false;
  int64_t step = -1;
  uint64_t bytes = 0, start_ns = 0, elapse_ns = 0, wait_ns = 0, transit_ns = 0;
  int64_t index = 0;  // its count among its rank's transfers: ties go to the earlier
};

// A member's arrival at a collective.
struct MemberArrival {
  int rank = 0;
  uint64_t start_ns = 0, wait_ns = 0, elapse_ns = 0;
};

// A matched collective: its collectives table row, and what the summary
// lists of it among the slowest.
struct CollectiveRow {
  std::string group;
  int64_t sequence = 0;
  std::string operation;       // as its lowest rank's part names it
  std::string last_operation;  // as the last to arrive names it
  int64_t step = -1;           // the last arrival's
  uint64_t members = 0, bytes = 0;
  uint64_t first_start_ns = 0, last_start_ns = 0, end_ns = 0, wait_ns = 0;
  int first_rank = 0, last_rank = 0;  // first and last arrivals (by start, then rank)
  uint64_t duration_ns() const { return end_ns - std::min(end_ns, first_start_ns); }
  // Kept for the slowest only: latest first.
  std::vector<MemberArrival> arrivals;
  bool all_arrivals = true;  // every member's, or the latest kArrivalsLatest
};

struct CommDigest {
  // Of whole ranks.
  std::map<std::pair<bool, std::string>, GroupDigest> groups;  // (transfer, name)
  uint64_t ranks = 0, parts = 0, transfers = 0;
  std::map<int, RankTotals> totals;          // by rank
  std::vector<LinkBandwidth> link_sums;      // bytes, transit, operations only; in any order
  std::vector<SlowTransfer> slow_transfers;  // the slowest first, at most kSlowestKept
  // Of whole collectives.
  uint64_t collectives = 0;
  std::vector<CollectiveRow> rows;              // by (group, sequence)
  std::vector<CollectiveRow> slow_collectives;  // the slowest first, at most kSlowestKept
  // Collectives per (group, operation), for the groups' operation counts.
  std::map<std::pair<std::string, std::string>, uint64_t> collective_operations;
};

// `timings` of whole ranks, in comm_timings' order for them.
void add_rank_timings(std::span<const CommTiming> timings, CommDigest* digest);
// `timings`: collectives' every member's part, by (group, sequence, rank).
void add_collective_timings(std::span<const CommTiming> timings, CommDigest* digest);

// A collective's row over some of its members (those one process holds):
// the parts of one collective add up (merge_part) to its row over every
// member, so that a collective's members' timings need not travel to one
// process to be digested, only a part per process.
struct CollectivePart {
  // Over these members. Its arrivals, latest first: every member's while
  // they are at most kArrivalsAll, else the latest kArrivalsLatest.
  CollectiveRow row;
  int lowest_rank = 0;                  // the member whose operation names the row
  std::vector<std::string> operations;  // the names these members used, each once
};
// Calls `each` with the part of each collective in `timings` (collectives'
// members, by (group, sequence, rank)), one at a time, in their order.
void collective_parts(std::span<const CommTiming> timings, const std::function<void(CollectivePart&&)>& each);
// Adds `more`, a part of the same collective, to `into`.
void merge_part(CollectivePart&& more, CollectivePart* into);
// A whole collective (every part merged) into the digest: its row, and
// with its arrivals among the slowest.
void add_collective(CollectivePart&& whole, CommDigest* digest);
// Both, from comm_timings' whole output: the one-process digest.
CommDigest digest_timings(const std::vector<CommTiming>& timings);
// `more`'s into `into`: the shares must not overlap (no rank, no
// collective in both).
void merge_digest(CommDigest&& more, CommDigest* into);
// Sealed and in order: the distributions counted, the rows by (group,
// sequence), the groups' collective counts added. After the merges.
void finish_digest(CommDigest* digest);
// The links from their sums (link_bandwidths' result, from the digest).
std::vector<LinkBandwidth> links_of(const CommDigest& digest);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_COMM_DIGEST_H_
