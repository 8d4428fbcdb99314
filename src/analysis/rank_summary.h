// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the cluster analysis needs of one rank: its steps' breakdown and its
// collectives, on the wall clock.
//
// The per-rank analysis writes it as PROFILER_OUTPUT/rank_summary.json when
// the run recorded communication; the cluster pass reads one per rank and
// never the raw data, so its memory is the summaries', not the events'.
#ifndef TRAINPROF_ANALYSIS_RANK_SUMMARY_H_
#define TRAINPROF_ANALYSIS_RANK_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/group_members.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/trace_model.h"

namespace trainprof::analysis {

struct RankStep {
  StepTraceRow row;       // step_trace_time.csv's columns
  uint64_t start_ns = 0;  // wall clock (realtime ns)
  uint64_t end_ns = 0;
  uint64_t data_wait_ns = 0;  // the loop's waits for data (see RankSummary::data_wait_separate)
  uint64_t in_comm_ns = 0;    // time inside communication calls (union; in-flight spans left out)
  // Host time of the program's Python functions outside operators, ranges
  // and communication (the stack samples, analysis/python_samples.h).
  uint64_t outside_ns = 0;
};

struct RankGroup {
  std::string name;
  GroupMembers world_ranks;  // shared by the summaries holding the same list
  std::string origin;
};

// A collective as this rank saw it: from its call (or a nonblocking one's
// post) to its return (or completion).
struct RankCollective {
  uint32_t group;  // index into RankSummary::groups
  int64_t sequence;
  std::string operation;
  uint64_t start_ns;  // wall clock
  uint64_t end_ns;
  uint64_t bytes;
  int64_t step;      // the step its start falls in, -1: none
  uint32_t run = 0;  // index into RankSummary::run_dirs (not in the file)
  // Asynchronous: the rank went on while it ran (a nonblocking MPI
  // collective's completion, a torch.distributed async_op such as a DDP
  // bucket), so its waiting is not time inside a communication call.
  bool in_flight = false;
};

// A point-to-point transfer as this rank saw it: a blocking send or receive
// (each half of a Sendrecv), or a nonblocking one from post to completion.
struct RankTransfer {
  uint32_t group;  // index into RankSummary::groups
  std::string operation;
  uint64_t start_ns;  // wall clock
  uint64_t end_ns;
  uint64_t bytes;
  int64_t step;  // -1: none
  int32_t peer;  // world rank of the other side, -1: unknown
  int32_t tag;   // -1: unknown (MPI_ANY_TAG never completed)
  bool send;     // false: a receive
  uint32_t run = 0;
};

// How many of a rank's outside functions its summary keeps.
inline constexpr size_t kRankOutsideFunctions = 3;

struct RankSummary {
  int rank = 0;
  int world_size = 1;
  std::string host;
  // The launcher's job id the run recorded ("": none; its profiler_info.json
  // "job"): the cluster pass analyses one job's runs.
  std::string job;
  // Wall-clock times are the reference rank's (rank 0) when aligned: the
  // largest offset removed and the largest error bound of the measurements.
  bool clock_aligned = false;
  uint64_t clock_offset_ns = 0;
  uint64_t clock_error_ns = 0;
  // An exchange of the alignment unfinished or failed when analysed ("": none).
  std::string clock_problem;
  // The steps' data_wait_ns is step_trace_time.csv's Data Wait, out of their
  // computing (summaries since version 4); false: the data stages "wait"
  // alone, which the computing may hold (a range around the wait).
  bool data_wait_separate = false;
  // How the run ended: "normal" (stopped), "signal" (flushed by a signal
  // handler: the job was killed or aborted), "killed" (no final flush: the
  // process died at once, SIGKILL or a crash the handler could not catch; its
  // data ends at its last flush).
  std::string end = "normal";
  std::vector<std::string> run_dirs;  // set by the reader: the runs merged into this summary
  std::vector<RankStep> steps;
  std::vector<RankGroup> groups;
  std::vector<RankCollective> collectives;  // in start order
  std::vector<RankTransfer> transfers;      // in start order
  // The functions that spent the most of outside_ns, over the steps
  // ("rerank (train.py:18)", ns per step), the most first; empty without
  // stack samples.
  std::vector<std::pair<std::string, uint64_t>> outside_functions;
};

// From an analysed model, its step rows (same order as model.steps) and
// its Python functions outside operators (null: none).
RankSummary rank_summary(const TraceModel& m, const std::vector<StepTraceRow>& rows,
                         const OutsideOperators* outside = nullptr);

std::string rank_summary_json(const RankSummary& s);
// Parses rank_summary_json's text; "" or what is wrong with it.
std::string parse_rank_summary(const std::string& text, RankSummary* out);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_RANK_SUMMARY_H_
