// Copyright trainprof authors.
#include "analyse_mpi.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "trainprof/shard_meeting.h"

namespace trainprof::cli {
namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool parse_int(const char* text, int* out) {
  if (text == nullptr) return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 0 || v > 1 << 24) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

LaunchPlace launch_place_from_environment(const std::string& command) {
  LaunchPlace p;
  // (rank, size, job) as each launcher names them.
  struct Names {
    const char* rank;
    const char* size;
    const char* job;
  };
  for (const Names& n :
       {Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_NAMESPACE"},
        Names{"PMI_RANK", "PMI_SIZE", "PMI_JOBID"}, Names{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"}}) {
    if (!parse_int(env(n.rank), &p.rank)) continue;
    if (!parse_int(env(n.size), &p.size) || p.size <= p.rank) {
      p.error = std::string(n.rank) + " is set but " + n.size + " is not a size above it";
      return p;
    }
    const char* job = env(n.job);
    if (job == nullptr && std::string(n.job) == "PMIX_NAMESPACE") job = env("OMPI_MCA_ess_base_jobid");
    if (job == nullptr) {
      p.error = std::string("the launcher set ") + n.rank + " but no job id (" + n.job +
                "): the processes of one job could not tell theirs from an earlier job's files";
      return p;
    }
    p.job = job;
    if (const char* step = env("SLURM_STEP_ID"); step != nullptr && std::string(n.job) == "SLURM_JOB_ID")
      p.job += std::string(".") + step;
    return p;
  }
  p.error =
      "--mpi: no MPI launcher environment (OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID); run it as "
      "`mpirun -np K trainprof " +
      command + " --mpi PATH`";
  return p;
}

int analyse_mpi(const std::string& path, AnalyseOptions options, int wait_minutes) {
  LaunchPlace place = launch_place_from_environment("analyse");
  if (!place.error.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", place.error.c_str());
    return kUsage;
  }
  options.shard_count = place.size;
  options.shard_index = place.rank;
  options.on_progress = nullptr;
  auto start = std::chrono::steady_clock::now();
  AnalyseReport mine = analyse(path, options);
  size_t failed = 0;
  for (const RunAnalysis& r : mine.runs) {
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "trainprof: [analysis rank %d] %s: %s\n", place.rank, r.run_dir.c_str(),
                   r.error.c_str());
    }
  }
  if (!mine.error.empty()) {
    std::fprintf(stderr, "trainprof: [analysis rank %d] %s\n", place.rank, mine.error.c_str());
    ++failed;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[analysis rank %d of %d] %zu of %zu run(s) analysed in %.2f s\n", place.rank, place.size,
              mine.runs.size() - std::min(failed, mine.runs.size()), mine.runs.size(), seconds);
  std::fflush(stdout);

  // Meet through files in PATH/cluster_analysis_output/.
  ShardMeeting meeting(path, place.job, place.size);
  if (!meeting.ok()) {
    std::fprintf(stderr, "trainprof: [analysis rank %d] cannot meet the other processes under %s: %s\n",
                 place.rank, meeting.output_dir().c_str(), meeting.error().c_str());
    return kFailed;
  }
  std::string error = meeting.mark(place.rank, failed == 0, mine.runs.size());
  if (!error.empty()) {
    std::fprintf(stderr, "trainprof: [analysis rank %d] %s\n", place.rank, error.c_str());
    return kFailed;
  }
  if (place.rank != 0) return failed == 0 ? kOk : kFailed;

  // The first process: the others' files, then the cluster pass.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(wait_minutes);
  auto next_note = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int failed_ranks = 0;
  std::vector<bool> seen;
  for (;;) {
    seen = meeting.marked(&failed_ranks);
    int missing = 0;
    for (bool s : seen) missing += s ? 0 : 1;
    if (missing == 0) break;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string list;
      for (int r = 0; r < place.size; ++r) {
        if (!seen[static_cast<size_t>(r)]) list += (list.empty() ? "" : ",") + std::to_string(r);
      }
      std::fprintf(stderr,
                   "trainprof: warning: analysis ranks %s did not finish within %d minute(s); the cluster "
                   "pass goes on with the runs analysed\n",
                   list.c_str(), wait_minutes);
      break;
    }
    if (now >= next_note) {
      std::fprintf(stderr, "[analysis rank 0] waiting for %d of %d analysis ranks\n", missing, place.size);
      next_note = now + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  meeting.remove();
  ClusterOptions cluster_options;
  cluster_options.analyse_missing = false;
  if (!print_cluster_report(cluster(path, options, cluster_options))) return kFailed;
  return failed == 0 && failed_ranks == 0 ? kOk : kFailed;
}

bool print_cluster_report(const ClusterReport& report) {
  for (const std::string& w : report.warnings) std::fprintf(stderr, "trainprof: warning: %s\n", w.c_str());
  std::fputs(report.text.c_str(), stdout);
  if (!report.ok()) {
    std::fprintf(stderr, "trainprof: %s\n", report.error.c_str());
    return false;
  }
  std::printf("outputs: %s/\n", report.output_dir.c_str());
  return true;
}

}  // namespace trainprof::cli
