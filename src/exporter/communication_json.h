// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Communication tables in MindSpore's and msprof-analyze's schema
// (docs/OUTPUTS.md), from the cluster pass's timings (analysis/cluster.h): a
// rank's part in each collective and transfer, with the wait that only every
// rank's data together can tell.
//
// Operations are keyed "<operation>_<sequence>@<group>": a collective's
// sequence is the same on every member, so the key names one collective on
// all of them; a transfer's counts this rank's transfers of that operation.
// Steps are "step<N>" ("step" outside any step). Times in ms, sizes in MB
// (10^6 bytes), bandwidths in GB/s (MB/ms). Transports: MPI within one host
// moves through shared memory (SDMA, MindSpore's name for on-node copies), between
// hosts through the network (RDMA).
#ifndef TRAINPROF_EXPORTER_COMMUNICATION_JSON_H_
#define TRAINPROF_EXPORTER_COMMUNICATION_JSON_H_

#include <string>
#include <vector>

#include "analysis/cluster.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

// communication.json of one rank: {"step<N>": {"collective": {key: OP, ...,
// "Total Op Info": TOTAL}, "p2p": {...}}}; OP = {"Communication Time Info",
// "Communication Bandwidth Info"}.
std::string rank_communication_json(const std::vector<const analysis::CommTiming*>& mine);

// communication_matrix.json of one rank: {"step<N>": {"collective": {...},
// "p2p": {...}}} with, per operation type and group, the instances of the
// highest, median and lowest bandwidth and the sum: "<type>-top1@<group>",
// "-middle@", "-bottom1@" (-bottom2, -bottom3 with enough instances),
// "-total@". Each maps links "<src>-<dst>" (ranks within the group; a
// collective is the rank's own link "<r>-<r>"; a send "<r>-<peer>", counted
// on the sending side only; every transfer a zero "<r>-<r>" that tells the
// group rank's world rank) to {"Transport
// Type", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "Op Name"}.
std::string rank_communication_matrix_json(const std::vector<const analysis::CommTiming*>& mine);

// cluster_communication.json: {"(r0, r1, ...)": {"step<N>": {key: {"<rank>":
// OP}, "Total Op Info@<group>": {"<rank>": TOTAL}}}} over every rank; the
// tuple is the ranks with collectives (or with transfers) in the group.
std::string cluster_communication_json(const std::vector<analysis::CommTiming>& timings);
// The same, written to `path` as it is made (at 1,024 ranks it is hundreds
// of MB): "" or the error.
std::string write_cluster_communication_json(const std::vector<analysis::CommTiming>& timings,
                                             const OutputPath& path);

// cluster_communication_matrix.json: the ranks' matrices merged per tuple,
// step and key, links in world ranks "<src>-<dst>", and per step
// "Total Op Info@<group>": each link's sums over the "-total@" entries.
std::string cluster_communication_matrix_json(const std::vector<analysis::CommTiming>& timings);
std::string write_cluster_communication_matrix_json(const std::vector<analysis::CommTiming>& timings,
                                                    const OutputPath& path);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_COMMUNICATION_JSON_H_
