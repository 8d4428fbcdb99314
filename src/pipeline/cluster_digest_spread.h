// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster outputs' digest of every rank's communication timings
// (analysis/comm_digest.h) made over the processes of a ClusterExchange, the
// timings staying where they were made:
//   1. each process sends each collective's part (analysis::CollectivePart:
//      the row over its members among this process's ranks, with their
//      latest arrivals) to the owner of its (group, sequence) (process 0's
//      messages also name the ranks the timeline draws): a collective over
//      every rank travels as one part per process, not a record per member;
//   2. each process digests its own ranks' timings and the collectives it
//      owns (their parts merged as they are read), and sends process 0 the
//      digest and its drawn ranks' timings.
// Process 0 merges the digests: the one-process digest, field for field.
#ifndef TRAINPROF_PIPELINE_CLUSTER_DIGEST_SPREAD_H_
#define TRAINPROF_PIPELINE_CLUSTER_DIGEST_SPREAD_H_

#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/comm_digest.h"
#include "trainprof/cluster_exchange.h"

namespace trainprof::pipeline {

struct GatheredDigest {         // on process 0; empty on the others
  analysis::CommDigest digest;  // merged and finished
  // The drawn ranks' timings, in comm_timings' order: their names view
  // `names`, or (process 0's ranks') the timings given to spread_digest.
  std::vector<analysis::CommTiming> drawn;
  std::unordered_set<std::string> names;
};

// `timings`: this process's ranks' (analysis::own_comm_timings), every rank
// on one process; `drawn`: process 0's (the others' are not read). A
// message that arrives damaged is said in `error`. Two exchanges on every
// process.
GatheredDigest spread_digest(const std::vector<analysis::CommTiming>& timings, const std::set<int>& drawn,
                             ClusterExchange& exchange, std::string* error);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_CLUSTER_DIGEST_SPREAD_H_
