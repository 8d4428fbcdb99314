// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// fwdbwd links: autograd nodes to their forward ops.
#include <unordered_map>

#include "analysis/passes.h"
#include "raw/format.h"

namespace trainprof::analysis {

std::vector<ForwardBackwardLink> forward_backward_links(const TraceModel& m) {
  auto is_backward = [&m](const OpLink& l) { return (m.keys[l.key].op_flags & raw::kOperatorBackward) != 0; };
  // Sequence numbers are below 2^32 (raw format), thread ids below 2^16.
  auto link_key = [](const OpLink& l) {
    return (uint64_t{l.fwd_thread} << 32) | (static_cast<uint64_t>(l.sequence_nr) & 0xffffffffu);
  };
  // op_links are in start order: the first forward op of a (thread,
  // sequence number) is the outermost.
  std::unordered_map<uint64_t, const OpLink*> forward;
  for (const OpLink& l : m.op_links) {
    if (!is_backward(l)) forward.try_emplace(link_key(l), &l);
  }
  std::vector<ForwardBackwardLink> links;
  if (forward.empty()) return links;
  for (const OpLink& l : m.op_links) {
    if (!is_backward(l)) continue;
    auto it = forward.find(link_key(l));
    if (it == forward.end()) continue;
    const OpLink& f = *it->second;
    links.push_back(ForwardBackwardLink{f.start_ns, m.keys[f.key].tid, l.start_ns, m.keys[l.key].tid});
  }
  return links;
}

}  // namespace trainprof::analysis
