// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// rank_summary.json (PROFILER_OUTPUT of each rank, read by `trainprof
// cluster`): whatever a file holds, the parser returns a summary or a message,
// and the cluster pass, its communication tables and slow links run on what it
// accepts (the summary as two ranks of one world) without crashing. The same
// bytes read as the form summaries travel in between the processes of `cluster
// --mpi` (rank_summary_bytes.h) are a summary or refused, never read out of
// bounds; an accepted summary travels and comes back the same.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/rank_summary.h"
#include "analysis/rank_summary_bytes.h"
#include "exporter/communication_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainprof::analysis::RankSummary s;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::string_view as_bytes = text;
  (void)trainprof::analysis::read_rank_summary_bytes(&as_bytes, &s);
  s = {};
  if (!trainprof::analysis::parse_rank_summary(text, &s).empty()) return 0;
  std::string bytes;
  trainprof::analysis::append_rank_summary_bytes(s, &bytes);
  std::string_view in = bytes;
  trainprof::analysis::RankSummary back;
  if (!trainprof::analysis::read_rank_summary_bytes(&in, &back) || !in.empty() ||
      trainprof::analysis::rank_summary_json(back) != trainprof::analysis::rank_summary_json(s)) {
    std::abort();  // a summary that does not travel whole
  }
  std::vector<trainprof::analysis::RankSummary> ranks{s, s};
  ranks[1].rank = s.rank + 1 < s.world_size ? s.rank + 1 : 0;
  trainprof::analysis::StragglerReport r = trainprof::analysis::find_straggler(ranks);
  (void)trainprof::analysis::straggler_text(r);
  std::vector<trainprof::analysis::CommTiming> timings = trainprof::analysis::comm_timings(ranks);
  (void)trainprof::exporter::cluster_communication_json(timings);
  (void)trainprof::exporter::cluster_communication_matrix_json(timings);
  std::vector<const trainprof::analysis::CommTiming*> mine;
  for (const auto& t : timings) mine.push_back(&t);
  (void)trainprof::exporter::rank_communication_json(mine);
  (void)trainprof::exporter::rank_communication_matrix_json(mine);
  (void)trainprof::analysis::links_text(trainprof::analysis::link_bandwidths(timings));
  return 0;
}
