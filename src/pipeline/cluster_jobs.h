// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Which job the cluster pass analyses when one directory holds the runs of
// several (each run records its launcher's job id: base::detect_job).
//
// Runs of two jobs must never be merged: two jobs of one world size whose
// runs do not overlap in time would pass for a schedule's cycles, and their
// collectives' numbers would meet. Every process counts the jobs of the
// runs it read, one exchange tells every process every count, and all
// choose alike: the job asked for, else the one with the most ranks (among
// equals, the one that started last: a job run again), so that every
// process keeps the same runs. Runs without a job id (recorded before runs
// had one, or a rank whose exchange with rank 0 failed where the front end
// names the job) go with the job analysed when it is the only one named,
// as all runs did before; beside two named jobs they are left out too.
#ifndef TRAINPROF_PIPELINE_CLUSTER_JOBS_H_
#define TRAINPROF_PIPELINE_CLUSTER_JOBS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainprof/cluster_exchange.h"

namespace trainprof::pipeline {

// One run this process read.
struct JobOfRun {
  std::string job;  // "": it recorded none
  int rank = 0;
  uint64_t start_ns = 0;  // its first step's (or call's) start; 0: unknown
};

struct JobSeen {
  std::string id;  // "": runs that recorded no job id
  int ranks = 0;   // distinct ranks among its runs
  uint64_t runs = 0;
  uint64_t start_ns = 0;  // its earliest run's start
  bool analysed = false;  // its runs are kept
};

struct JobChoice {
  std::vector<JobSeen> jobs;  // every job seen, by id ("" first)
  std::string analysed;       // the named job whose runs are kept ("": none is named)
  bool with_unnamed = true;   // the runs without a job id are kept too
  std::string why;            // how it was chosen
  std::string error;          // the job asked for has no run (the same on every process)
  std::string damaged;        // a count arrived damaged here
  // Whether runs are left out for being of another job than the one analysed.
  bool left_out() const;
  bool keeps(const std::string& job) const { return job.empty() ? with_unnamed : job == analysed; }
};

// Every process calls this once with the runs it read (one exchange);
// `wanted` is ClusterOptions::job_id ("": choose). Every process returns
// the same choice.
JobChoice choose_job(const std::vector<JobOfRun>& mine, const std::string& wanted, ClusterExchange& exchange);

// The report's line on the jobs ("" unless runs were left out), and their
// JSON array for cluster_analysis.json ("jobs").
std::string jobs_text(const JobChoice& choice);
nlohmann::json jobs_json(const JobChoice& choice);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_CLUSTER_JOBS_H_
