// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A RankSummary (rank_summary.h) as bytes, to move between the processes of a
// distributed cluster pass.
//
// Not a file format: both ends are the same build of trainprof, in one job.
// Little-endian fixed-width numbers and length-prefixed strings, the run
// directories included (the JSON form leaves them out). The reader checks
// every length against what is left, so damaged bytes are an error, never a
// read out of bounds.
#ifndef TRAINPROF_ANALYSIS_RANK_SUMMARY_BYTES_H_
#define TRAINPROF_ANALYSIS_RANK_SUMMARY_BYTES_H_

#include <string>
#include <string_view>

#include "analysis/rank_summary.h"

namespace trainprof::analysis {

// Appends `s` to `out`.
void append_rank_summary_bytes(const RankSummary& s, std::string* out);

// Reads one summary from the front of `*in` and advances past it; false
// (with `*in` unchanged past the failure) when the bytes are not one.
bool read_rank_summary_bytes(std::string_view* in, RankSummary* out);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_RANK_SUMMARY_BYTES_H_
