// Copyright trainprof authors. Which job the cluster pass analyses when one
// directory holds the runs of several (each run records its launcher's job
// id: base::detect_job).
//
// Runs of two jobs must never be merged: two jobs of one world size whose
// runs do not overlap in time would pass for a schedule's cycles, and their
// collectives' numbers would meet. Every process counts the jobs of the
// runs it read, one exchange tells every process every count, and all
// choose alike: the job asked for, else the one with the most ranks (among
// equals, the one that started last: a job run again), so that every
// process keeps the same runs.
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
  bool analysed = false;
};

struct JobChoice {
  std::vector<JobSeen> jobs;  // every job seen, by id; one or none: nothing to choose
  std::string analysed;       // the id whose runs are kept
  std::string why;            // how it was chosen ("" with one job)
  std::string error;          // the job asked for has no run (the same on every process)
  std::string damaged;        // a count arrived damaged here
  bool several() const { return jobs.size() > 1; }
};

// Every process calls this once with the runs it read (one exchange);
// `wanted` is ClusterOptions::job_id ("": choose). Every process returns
// the same choice.
JobChoice choose_job(const std::vector<JobOfRun>& mine, const std::string& wanted, ClusterExchange& exchange);

// The report's line on the jobs ("" unless there were several), and their
// JSON array for cluster_analysis.json ("jobs").
std::string jobs_text(const JobChoice& choice);
nlohmann::json jobs_json(const JobChoice& choice);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_CLUSTER_JOBS_H_
