// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The cluster pass at scale: how its time, memory and outputs grow with the
// number of ranks (docs/SCALE.md).
//
//   trainprof_cluster_scale generate DIR RANKS [STEPS] [COLLECTIVES] [TRANSFERS]
//   trainprof_cluster_scale cluster DIR
//
// `generate` writes RANKS analysed runs under DIR, each holding only what
// the cluster pass reads (profiler_info.json files that mark it a run and
// analysed, and a
// rank_summary.json made by trainprof's own writer): STEPS steps (default
// 10) with COLLECTIVES allreduces (default 20) on the world and TRANSFERS
// sends to the next rank (default 2) each; rank 3 computes 20 ms longer.
// `cluster` runs trainprof::cluster on DIR in this process and prints its
// wall time, this process's peak resident memory, and the outputs' sizes.
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "analysis/rank_summary.h"
#include "trainprof/analyse.h"

namespace {

namespace fs = std::filesystem;
using trainprof::analysis::RankCollective;
using trainprof::analysis::RankStep;
using trainprof::analysis::RankSummary;
using trainprof::analysis::RankTransfer;

constexpr uint64_t kMs = 1000000;

// Every rank's arrival at every collective, as a real job runs: a step
// starts when its last collective ended, each rank computes (rank 3 half as
// long again) and arrives; a collective ends 0.4 ms after its last arrival,
// and the next one's arrivals follow 0.1 ms later, jittered.
struct Timeline {
  std::vector<std::vector<uint64_t>> arrive;  // [collective][rank]
  std::vector<uint64_t> end;                  // [collective]
  std::vector<uint64_t> step_start;           // [step], and the end after the last
};

Timeline make_timeline(int ranks, int steps, int collectives) {
  std::mt19937_64 random(42);
  std::uniform_int_distribution<uint64_t> jitter(0, 200000);  // 0.2 ms
  Timeline t;
  uint64_t now = 1795551497000000000ull;
  for (int step = 0; step < steps; ++step) {
    t.step_start.push_back(now);
    for (int c = 0; c < collectives; ++c) {
      std::vector<uint64_t> at(static_cast<size_t>(ranks));
      uint64_t last = 0;
      for (int r = 0; r < ranks; ++r) {
        uint64_t work = c == 0 ? (r == 3 ? 60 : 40) * kMs : 100000;
        at[static_cast<size_t>(r)] = now + work + jitter(random);
        last = std::max(last, at[static_cast<size_t>(r)]);
      }
      t.arrive.push_back(std::move(at));
      now = last + 400000;
      t.end.push_back(now);
    }
    now += 2 * kMs;  // the transfers
  }
  t.step_start.push_back(now);
  return t;
}

RankSummary synthetic_rank(const Timeline& t, int rank, int ranks, int steps, int collectives,
                           int transfers) {
  RankSummary s;
  s.rank = rank;
  s.world_size = ranks;
  s.host = "node" + std::to_string(rank / 8);  // 8 ranks a host
  s.clock_aligned = true;
  s.clock_error_ns = 2000;
  trainprof::analysis::RankGroup world{"5271525275218210614", {}, "MPI_COMM_WORLD"};
  world.world_ranks = trainprof::analysis::GroupMembers::consecutive(0, ranks);
  s.groups.push_back(std::move(world));
  size_t k = 0;
  for (int step = 0; step < steps; ++step) {
    RankStep st;
    st.row.step = step;
    st.start_ns = t.step_start[static_cast<size_t>(step)];
    st.end_ns = t.step_start[static_cast<size_t>(step) + 1];
    uint64_t in_comm = 0;
    for (int c = 0; c < collectives; ++c, ++k) {
      uint64_t at = t.arrive[k][static_cast<size_t>(rank)];
      in_comm += t.end[k] - at;
      s.collectives.push_back(
          RankCollective{0, static_cast<int64_t>(k), "MPI_Allreduce", at, t.end[k], 25u << 20, step});
    }
    uint64_t at = t.end[k - 1] + 100000;
    for (int p = 0; p < transfers; ++p) {
      s.transfers.push_back(
          RankTransfer{0, "MPI_Send", at, at + 300000, 4u << 20, step, (rank + 1) % ranks, p, true});
      s.transfers.push_back(
          RankTransfer{0, "MPI_Recv", at, at + 350000, 4u << 20, step, (rank + ranks - 1) % ranks, p, false});
      at += 400000;
    }
    uint64_t first = t.arrive[k - static_cast<size_t>(collectives)][static_cast<size_t>(rank)];
    st.row.computing_ns = first - st.start_ns;
    st.row.communication_ns = st.row.communication_not_overlapped_ns = in_comm;
    st.in_comm_ns = in_comm;
    s.steps.push_back(st);
  }
  return s;
}

bool write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

int generate(const std::string& dir, int ranks, int steps, int collectives, int transfers) {
  uint64_t total = 0;
  Timeline timeline = make_timeline(ranks, steps, collectives);
  for (int rank = 0; rank < ranks; ++rank) {
    char name[64];
    std::snprintf(name, sizeof(name), "node%d_%d_20261124000000000_trainprof", rank / 8, 1000 + rank);
    fs::path out = fs::path(dir) / name / "PROFILER_OUTPUT";
    fs::create_directories(out);
    std::string summary = trainprof::analysis::rank_summary_json(
        synthetic_rank(timeline, rank, ranks, steps, collectives, transfers));
    total += summary.size();
    if (!write_text(out.parent_path() / "profiler_info.json", "{}\n") ||
        !write_text(out / "profiler_info.json", "{}\n") || !write_text(out / "rank_summary.json", summary)) {
      std::fprintf(stderr, "cannot write under %s\n", out.c_str());
      return 1;
    }
  }
  std::printf(
      "generated %d ranks x %d steps x (%d collectives + %d transfers): rank_summary.json %.1f KB a rank\n",
      ranks, steps, collectives, transfers, static_cast<double>(total) / ranks / 1e3);
  return 0;
}

int run_cluster(const std::string& dir) {
  auto start = std::chrono::steady_clock::now();
  trainprof::ClusterOptions options;
  options.analyse_missing = false;
  options.on_stage = [](const std::string& stage, double seconds) {
    std::printf("  [cluster] %s: %.2f s\n", stage.c_str(), seconds);
  };
  trainprof::ClusterReport r = trainprof::cluster(dir, {}, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.ok()) {
    std::fprintf(stderr, "cluster failed: %s\n", r.error.c_str());
    return 1;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("cluster pass: %.2f s, peak RSS %.1f MB, straggler %d\n", seconds,
              static_cast<double>(usage.ru_maxrss) / 1024, r.straggler);
  for (const auto& e : fs::directory_iterator(r.output_dir)) {
    std::printf("  %-36s %10.1f MB\n", e.path().filename().c_str(), static_cast<double>(e.file_size()) / 1e6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "generate" && argc >= 4) {
    auto arg = [&](int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; };
    return generate(argv[2], std::atoi(argv[3]), arg(4, 10), arg(5, 20), arg(6, 2));
  }
  if (mode == "cluster" && argc == 3) return run_cluster(argv[2]);
  std::fprintf(stderr,
               "usage: trainprof_cluster_scale generate DIR RANKS [STEPS] [COLLECTIVES] [TRANSFERS]\n"
               "       trainprof_cluster_scale cluster DIR\n");
  return 2;
}
