// Copyright trainprof authors. Communication tables in the seeds' schema
// (shared/research/communication.md, sections 3 and 5): per step, per
// operation "<operation>_<sequence>@<group>", the Communication Time Info
// (elapse, the wait for the last member, the transit after it) and the
// Communication Bandwidth Info by transport.
#ifndef TRAINPROF_EXPORT_COMMUNICATION_JSON_H_
#define TRAINPROF_EXPORT_COMMUNICATION_JSON_H_

#include <string>
#include <vector>

#include "analysis/cluster.h"

namespace trainprof::exporter {

// cluster_communication.json: {"(r0, r1, ...)": {"step<N>": {key: {"<rank>":
// OP}, "Total Op Info@<group>": {"<rank>": TOTAL}}}} over every rank.
std::string cluster_communication_json(const std::vector<analysis::CollectiveTiming>& timings);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORT_COMMUNICATION_JSON_H_
