// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// One numbering of each group's collectives on every rank, whenever each rank
// started profiling.
//
// The cluster pass matches a collective across its members by (group,
// sequence). MPI numbers them from the communicator's creation, so every
// member agrees; torch.distributed's calls are numbered from the first one
// the rank profiled (its backends' own counters also count point-to-point
// calls, which only some members make), so ranks that started profiling at
// different collectives number the same one differently. This pass finds,
// per group, each member's offset to the member that started first: the one
// shift under which every collective both recorded has the same operation
// and bytes and overlaps in time (a collective cannot end on one member
// before another called it), and renumbers by it. A member no shift fits,
// or more than one, is reported and its collectives in the group left out:
// never matched to the wrong ones.
#ifndef TRAINPROF_ANALYSIS_COLLECTIVE_NUMBERING_H_
#define TRAINPROF_ANALYSIS_COLLECTIVE_NUMBERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/rank_summary.h"

namespace trainprof::analysis {

struct NumberingReport {
  struct Shift {
    int rank;
    std::string group;
    int64_t offset;  // added to the rank's sequence numbers in the group
  };
  struct Unaligned {
    int rank;
    std::string group;
    uint64_t collectives;  // left out
    std::string why;
  };
  std::vector<Shift> shifted;  // offsets other than 0
  std::vector<Unaligned> unaligned;
};

// The groups whose numbering starts with each rank's profiling
// (torch.distributed's): the only ones aligned. MPI's and NCCL's count from
// the communicator's creation.
bool numbered_from_profiling(const RankGroup& g);

// Renumbers `ranks`' collectives in place (by their group's name) and says
// what it shifted and what it left out. `tolerance_ns` widens the time
// overlap (the clocks' alignment error).
NumberingReport align_collective_numbering(std::vector<RankSummary>& ranks, uint64_t tolerance_ns);

// The report's lines for `trainprof cluster` ("" when nothing was shifted
// or left out).
std::string numbering_text(const NumberingReport& r);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_COLLECTIVE_NUMBERING_H_
