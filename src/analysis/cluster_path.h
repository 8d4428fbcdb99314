// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A job's critical path across ranks, and the step re-timed with the straggler
// at the median, from the ranks' summaries (analysis/rank_summary.h) after
// `trainprof cluster`.
//
// In a step every rank works, then meets the others at a blocking
// collective, which ends a transfer's time after the last member arrived.
// So the step's length is decided by a chain: the rank that ended the step
// last, back through its last collective to the member that arrived last
// there, its work before that, the collective before, and so on to the
// step's start. Collectives are matched by (group, sequence); in-flight ones
// (nonblocking, DDP buckets) and point-to-point transfers do not hold a
// rank, and are left out of the chain.
//
// The what-if replays the step: each rank's work between its collectives
// keeps its length (the straggler's becomes the others' median of the same
// piece, where that is shorter), a collective starts when its last member
// arrives and keeps each member's transfer time after that. In-flight
// collectives count there too: a rank goes on after the call, and a piece
// of its work that began after one's recorded completion begins after its
// replayed one (the rank may have waited for it, as DDP waits for its
// buckets at the end of the backward), so a straggler late to the buckets
// is re-timed with 2 ranks as with 64. Unchanged, every step keeps its
// recorded length.
#ifndef TRAINPROF_ANALYSIS_CLUSTER_PATH_H_
#define TRAINPROF_ANALYSIS_CLUSTER_PATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/rank_summary.h"
#include "analysis/what_if.h"

namespace trainprof::analysis {

struct ClusterPathSegment {
  int64_t step = 0;
  bool communication = false;  // false: the rank's work before a collective (or the step's end)
  int rank = 0;                // the rank whose time it is
  std::string
      name;  // "MPI_Allreduce #3 (group)"; work: "before MPI_Allreduce #3 (group)" or "to the step's end"
  uint64_t start_ns = 0;  // wall clock (rank 0's)
  uint64_t dur_ns = 0;
};

struct ClusterPath {
  std::vector<ClusterPathSegment> segments;  // by step, in time order
  // The job's step (the first rank's start to the last rank's end),
  // recorded and with the straggler's work at the others' median; empty
  // without a straggler. summarize_what_if (analysis/what_if.h) gives the
  // medians.
  std::vector<StepEstimate> straggler_at_median;
};

// `straggler`: the rank whose work is set to the median (-1: none, no estimate).
ClusterPath cluster_critical_path(const std::vector<RankSummary>& ranks, int straggler);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_CLUSTER_PATH_H_
