// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analyse_mpi.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "mpi_exchange.h"
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

// The exchange of the MPI job, when its processes are the launcher's
// (else nullptr, said: a launcher without MPI's process manager makes each
// process a job of one).
std::unique_ptr<ClusterExchange> spread_exchange(const LaunchPlace& place) {
  std::string error;
  std::unique_ptr<ClusterExchange> exchange = make_mpi_exchange(&error);
  if (exchange != nullptr && (exchange->size() != place.size || exchange->index() != place.rank)) {
    error = "MPI sees process " + std::to_string(exchange->index()) + " of " +
            std::to_string(exchange->size()) + " where the launcher said " + std::to_string(place.rank) +
            " of " + std::to_string(place.size);
    exchange.reset();
  }
  if (exchange == nullptr) {
    std::fprintf(stderr, "trainprof: [analysis rank %d] the cluster pass cannot be spread: %s\n", place.rank,
                 error.c_str());
  }
  return exchange;
}

// A process other than the first: waits for the first's decision and, when
// the cluster pass is spread, takes its part. It waits as long as the first
// waits for the others (a first that never decides, gone or still
// analysing, is then given up on: the pass is left to it alone, and the
// first follows that decision). False: its part failed.
bool join_cluster_pass(const std::string& path, const AnalyseOptions& options, const LaunchPlace& place,
                       ShardMeeting& meeting, int wait_minutes) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(wait_minutes);
  ShardMeeting::Decision d = ShardMeeting::Decision::kNone;
  while ((d = meeting.decision()) == ShardMeeting::Decision::kNone) {
    if (std::chrono::steady_clock::now() >= give_up) {
      std::string error;
      d = meeting.decide(ShardMeeting::Decision::kAlone, &error);
      if (!error.empty())
        std::fprintf(stderr, "trainprof: [analysis rank %d] %s\n", place.rank, error.c_str());
      if (d != ShardMeeting::Decision::kSpread) {
        std::fprintf(
            stderr,
            "trainprof: [analysis rank %d] the first process did not decide within %d minute(s); the "
            "cluster pass is left to it alone\n",
            place.rank, wait_minutes);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (d != ShardMeeting::Decision::kSpread) return true;
  std::unique_ptr<ClusterExchange> exchange = spread_exchange(place);
  if (exchange == nullptr) return false;
  ClusterOptions cluster_options;
  cluster_options.analyse_missing = false;
  cluster_options.exchange = exchange.get();
  ClusterReport report = cluster(path, options, cluster_options);
  for (const std::string& w : report.warnings)
    std::fprintf(stderr, "trainprof: [analysis rank %d] warning: %s\n", place.rank, w.c_str());
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
  if (place.rank != 0) {
    bool joined = join_cluster_pass(path, options, place, meeting, wait_minutes);
    return failed == 0 && joined ? kOk : kFailed;
  }

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
  // With every process there (and past its analysis, so none can keep the
  // others waiting in MPI), the cluster pass is spread over them; else the
  // first runs it alone, and the decision stays for the late ones to read.
  bool everyone = std::find(seen.begin(), seen.end(), false) == seen.end();
  bool spread = everyone && place.size > 1 && mpi_exchange_built();
  ShardMeeting::Decision decided =
      meeting.decide(spread ? ShardMeeting::Decision::kSpread : ShardMeeting::Decision::kAlone, &error);
  if (!error.empty()) std::fprintf(stderr, "trainprof: [analysis rank 0] %s\n", error.c_str());
  if (spread && decided != ShardMeeting::Decision::kSpread && error.empty()) {
    std::fprintf(
        stderr,
        "trainprof: [analysis rank 0] another process gave up waiting for this one; the cluster pass "
        "runs here alone\n");
  }
  spread = decided == ShardMeeting::Decision::kSpread;
  // The others read the decision, or the place gone as "alone"; after a
  // wait given up, it stays for the late ones to read. A spread pass
  // removes it once over (every process has read it to take part).
  if (!spread && (everyone || !error.empty())) meeting.remove();
  ClusterOptions cluster_options;
  cluster_options.analyse_missing = false;
  std::unique_ptr<ClusterExchange> exchange;
  if (spread) exchange = spread_exchange(place);
  cluster_options.exchange = exchange.get();
  if (exchange != nullptr) {
    std::printf("[analysis rank 0] the cluster pass is spread over the %d processes\n", place.size);
    std::fflush(stdout);
  }
  ClusterReport report = cluster(path, options, cluster_options);
  if (spread) meeting.remove();
  if (!print_cluster_report(report)) return kFailed;
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
