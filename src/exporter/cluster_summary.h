// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// cluster_communication_summary.json: the cluster's communication at any scale,
// in a size that grows with the groups, not with ranks x operations
// (docs/OUTPUTS.md):
//
// - per group and operation: how many collectives (or transfers), the bytes,
//   and the distribution over every rank's part (minimum, median, 90th and
//   99th percentiles, maximum) of its elapse, wait and transit time and its
//   bandwidth;
// - the slowest collectives in full (from the first arrival to the last
//   member's end): who arrived first and last, the spread, and the members'
//   arrivals (every member in groups of up to analysis::kArrivalsAll, else the
//   latest kArrivalsLatest); the slowest transfers; the slowest links and
//   the links' bandwidth distribution per kind and transport.
//
// Every rank's part in every operation is in trainprof.db's communication
// table (cluster_database.h).
#ifndef TRAINPROF_EXPORTER_CLUSTER_SUMMARY_H_
#define TRAINPROF_EXPORTER_CLUSTER_SUMMARY_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/comm_digest.h"

namespace trainprof::exporter {

inline constexpr size_t kSlowestListed = analysis::kSlowestKept;  // collectives, transfers, links in full

// A link as both this and cluster_analysis.json list it: src, dst, kind
// (collective or p2p), transport, bytes, transit_ns, operations, gb_per_s,
// slow, only_waited.
nlohmann::json link_json(const analysis::LinkBandwidth& link);

// From every rank's timings' digest (finished); `links` slowest first (analysis::links_of).
std::string cluster_communication_summary_json(const analysis::CommDigest& digest,
                                               const std::vector<analysis::LinkBandwidth>& links);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CLUSTER_SUMMARY_H_
