// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The job's critical path and the straggler's what-if (analysis/cluster_path.h)
// walked over the processes of a ClusterExchange
// (include/trainprof/cluster_exchange.h).
//
// Each step's path and replay read that step alone: its ranks' spans and
// their blocking collectives in it. So each step is walked where it is
// owned (step_owner): every process sends each of its ranks' steps and
// blocking collectives to their step's owner, each owner walks its steps,
// and process 0 gathers the segments and estimates in step order. No
// process holds more than its steps' share of the collectives (a job of
// fewer steps than processes leaves some without any).
#ifndef TRAINPROF_PIPELINE_CLUSTER_PATH_SPREAD_H_
#define TRAINPROF_PIPELINE_CLUSTER_PATH_SPREAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/cluster_path.h"
#include "analysis/rank_summary.h"
#include "trainprof/cluster_exchange.h"

namespace trainprof::pipeline {

// The process that walks `step`.
inline int step_owner(int64_t step, int processes) {
  int64_t owner = step % processes;
  return static_cast<int>(owner < 0 ? owner + processes : owner);
}

// `mine`: this process's ranks' summaries (renumbered), each rank on one
// process only; `straggler`: process 0's (the others' is not read).
// Returns on process 0 what analysis::cluster_critical_path finds over
// every rank's summary, field for field; on the others, nothing. A message
// that arrives damaged is said in `error`. Two exchanges on every process.
analysis::ClusterPath spread_critical_path(const std::vector<const analysis::RankSummary*>& mine,
                                           int straggler, ClusterExchange& exchange, std::string* error);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_CLUSTER_PATH_SPREAD_H_
