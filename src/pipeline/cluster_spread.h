// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster pass's matching spread over the processes of a ClusterExchange
// (include/trainprof/cluster_exchange.h).
//
// Each process holds the summaries of its own ranks (rank % processes).
// Collectives are matched where they are sent, not where their ranks are:
//   1. every process learns each group's size and the clocks' largest error;
//   2. the torch.distributed groups' collectives go to the process that owns
//      the group (a hash of its name), which aligns their numbering
//      (analysis/collective_numbering.h) and sends each member's offset back;
//   3. every collective's arrival goes to the process that owns its
//      (group, sequence) (a hash of both), which finds the last arrival and
//      each member's wait, and sends the sums per rank on;
//   4. the owner of each collective sends each member's process its last
//      arrival, and the owner of each channel (group, sender, receiver, tag)
//      each side's process the other side's start: every process can time
//      its own ranks' communication (analysis::own_comm_timings);
//   5. process 0 gathers the ranks' facts and waits, names the straggler,
//      and asks each process for its ranks' means over the late steps.
// The results on process 0 are those of align_collective_numbering and
// find_straggler on all the summaries in one process (analysis/cluster.h),
// field for field, but each rank's in-flight waiting per step, which stays
// where the rank is (only its means over the late steps need it). Every process calls the exchange the same
// number of times whatever it holds, so none waits for a call that never comes.
#ifndef TRAINPROF_PIPELINE_CLUSTER_SPREAD_H_
#define TRAINPROF_PIPELINE_CLUSTER_SPREAD_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/collective_numbering.h"
#include "analysis/rank_summary.h"
#include "trainprof/cluster_exchange.h"

namespace trainprof::pipeline {

struct SpreadMatch {  // on process 0; empty on the others
  analysis::NumberingReport numbering;
  analysis::StragglerReport report;  // its `numbering` text left to the caller
  std::string error;                 // a message arrived damaged (on any process)
  // On every process: its ranks' ends, in the order `mine` is left in (by
  // rank), and every rank's host (for analysis::own_comm_timings).
  std::vector<analysis::MatchedEnds> ends;
  std::map<int, std::string> hosts;
};

// `mine`: this process's ranks' summaries, one per rank, each rank held by
// process rank % exchange.size(). Renumbers them in place as
// align_collective_numbering would, with `slack_ns` added to twice the
// clocks' largest error as its tolerance.
SpreadMatch spread_match(std::vector<analysis::RankSummary>& mine, ClusterExchange& exchange,
                         uint64_t slack_ns);

// The process that holds `rank`'s summary.
inline int rank_owner(int rank, int processes) {
  return rank % processes;
}

// The process that owns a name and a number (a hash of both, the same on
// every process): that of a collective's (group, sequence) matches it.
int key_owner(std::string_view name, int64_t number, int processes);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_CLUSTER_SPREAD_H_
