// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A many-rank job's analysed runs, written as the per-rank analysis leaves them
// (profiler_info.json files and a rank_summary.json from trainprof's own
// writer), for the cluster pass's tests: the one-process pass against the pass
// spread over processes.
#ifndef TRAINPROF_TESTS_SYNTHETIC_JOB_H_
#define TRAINPROF_TESTS_SYNTHETIC_JOB_H_

#include <map>
#include <string>

namespace trainprof::test {

// Writes `ranks` ranks' runs under `dir` (8 ranks a host, clocks aligned):
// 6 steps each of 5 allreduces over the world (MPI numbering) and 3
// allreduces over the even ranks' torch.distributed group (numbered from
// profiling: rank 2 started profiling a step late, so its numbers are
// shifted), a send to the next rank and a receive from the previous one.
// Rank 5 computes 20 ms longer in steps 2-4; rank 9 has two runs (a
// schedule's two cycles, three steps each); rank 12's torch.distributed
// collectives move other sizes than the others' (its numbering in the group
// cannot be aligned: left out, and said). Rank 2 missed step 0, so step 0's
// world collectives are recorded by some members only.
void write_synthetic_job(const std::string& dir, int ranks);

// Every regular file below `dir` whose name holds `part`, by its path under
// `dir`, with its contents.
std::map<std::string, std::string> files_below(const std::string& dir, const std::string& part);

// What the cluster pass wrote for the runs under `dir`: its outputs, each
// rank's communication tables, and the msprof-analyze layout under
// `dir`/msprof; and their removal.
std::map<std::string, std::string> cluster_outputs(const std::string& dir);
void remove_cluster_outputs(const std::string& dir);

}  // namespace trainprof::test

#endif  // TRAINPROF_TESTS_SYNTHETIC_JOB_H_
