// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// cluster_trace_view.json: every rank's communication on one timeline (Chrome
// trace event format, as trace_view.json), rank 0's clock, with flows between
// the matched operations of different ranks.
//
// One process per rank ("rank N (host)"), one track "Communication": each
// collective and transfer a slice (args: group, sequence, bytes, wait and
// transit in ms), with a child slice "wait" over the time it waited for the
// last member or the other side. Flows: a transfer from its send to its
// receive; a collective from the last member to arrive to each other member
// (it released them), for groups of at most kMaxFlowGroup members (beyond,
// the flows would outnumber the slices by the group's size).
#ifndef TRAINPROF_EXPORTER_CLUSTER_TRACE_H_
#define TRAINPROF_EXPORTER_CLUSTER_TRACE_H_

#include <map>
#include <string>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/cluster_path.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

inline constexpr size_t kMaxFlowGroup = 64;

// Written to `path` as it is made; returns "" or the error. The job's
// critical path (analysis/cluster_path.h) goes on a "Critical path" track of
// each rank it passes through, cat "critical_path", with a flow where it
// moves from one rank to another.
std::string write_cluster_trace(const std::vector<analysis::CommTiming>& timings,
                                const std::vector<analysis::ClusterPathSegment>& critical_path,
                                const std::map<int, std::string>& hosts, const OutputPath& path);

// The same as a Perfetto protobuf trace (cluster_trace_view.pftrace): a
// process track per rank, its communication on thread tracks ("Communication",
// and "Communication #2"... where operations overlap, since Perfetto's slices
// on a track nest), the same slices with debug annotations, the same flows as
// flow ids from one operation's begin to the other's; the critical path on a
// "Critical path" thread track of each rank it passes through, its moves
// between ranks as flows.
std::string write_cluster_perfetto_trace(const std::vector<analysis::CommTiming>& timings,
                                         const std::vector<analysis::ClusterPathSegment>& critical_path,
                                         const std::map<int, std::string>& hosts, const OutputPath& path);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CLUSTER_TRACE_H_
