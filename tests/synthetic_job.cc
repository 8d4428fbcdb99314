// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "synthetic_job.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

#include "analysis/rank_summary.h"

namespace trainprof::test {
namespace {

namespace fs = std::filesystem;
using analysis::RankCollective;
using analysis::RankGroup;
using analysis::RankStep;
using analysis::RankSummary;
using analysis::RankTransfer;

constexpr uint64_t kMs = 1000000;
constexpr int kSteps = 6, kWorldCollectives = 5, kEvenCollectives = 3;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_run(const std::string& dir, int rank, int cycle, const RankSummary& s) {
  char name[80];
  std::snprintf(name, sizeof(name), "node%d_%d_2026112700000000%d_trainprof", rank / 8, 1000 + rank, cycle);
  fs::path out = fs::path(dir) / name / "PROFILER_OUTPUT";
  fs::create_directories(out);
  write_text(out.parent_path() / "profiler_info.json", "{}\n");
  write_text(out / "profiler_info.json", "{}\n");
  write_text(out / "rank_summary.json", analysis::rank_summary_json(s));
}

}  // namespace

void write_synthetic_job(const std::string& dir, int ranks) {
  std::mt19937_64 random(7);
  std::uniform_int_distribution<uint64_t> jitter(0, 300000);
  // Arrivals: [collective][rank]; a collective ends 0.5 ms after its last arrival.
  const int per_step = kWorldCollectives + kEvenCollectives;
  std::vector<std::vector<uint64_t>> arrive;
  std::vector<uint64_t> end, step_start;
  uint64_t now = 1795551497000000000ull;
  for (int step = 0; step < kSteps; ++step) {
    step_start.push_back(now);
    for (int c = 0; c < per_step; ++c) {
      std::vector<uint64_t> at(static_cast<size_t>(ranks));
      uint64_t last = 0;
      for (int r = 0; r < ranks; ++r) {
        bool late = r == 5 && step >= 2 && step <= 4 && c == 0;
        uint64_t work = c == 0 ? (late ? 50 : 30) * kMs : 200000;
        at[static_cast<size_t>(r)] = now + work + jitter(random);
        last = std::max(last, at[static_cast<size_t>(r)]);
      }
      arrive.push_back(std::move(at));
      now = last + 500000;
      end.push_back(now);
    }
    now += 2 * kMs;  // the transfers
  }
  step_start.push_back(now);

  for (int rank = 0; rank < ranks; ++rank) {
    RankSummary s;
    s.rank = rank;
    s.world_size = ranks;
    s.host = "node" + std::to_string(rank / 8);
    s.clock_aligned = true;
    s.clock_error_ns = 2000;
    s.data_wait_separate = true;
    std::vector<int32_t> evens;
    for (int r = 0; r < ranks; r += 2) evens.push_back(r);
    RankGroup world{"5271525275218210614", analysis::GroupMembers::consecutive(0, ranks), "MPI_COMM_WORLD"};
    RankGroup even{"1", std::move(evens), "torch.distributed gloo"};
    s.groups.push_back(world);
    if (rank % 2 == 0) s.groups.push_back(even);
    int first_step = rank == 2 ? 1 : 0;  // it started profiling a step late
    int64_t even_sequence = 0;
    for (int step = first_step; step < kSteps; ++step) {
      RankStep st;
      st.row.step = step;
      st.start_ns = step_start[static_cast<size_t>(step)];
      st.end_ns = step_start[static_cast<size_t>(step) + 1];
      uint64_t in_comm = 0;
      for (int c = 0; c < per_step; ++c) {
        size_t k = static_cast<size_t>(step * per_step + c);
        uint64_t at = arrive[k][static_cast<size_t>(rank)];
        bool on_even = c >= kWorldCollectives;
        if (on_even && rank % 2 != 0) continue;
        in_comm += end[k] - at;
        if (on_even) {
          // Rank 12's calls are of another size: another job's, to the others.
          s.collectives.push_back(RankCollective{1, even_sequence++, "allreduce", at, end[k],
                                                 rank == 12 ? 4096u : 1u << 20, step});
        } else {
          s.collectives.push_back(RankCollective{0, static_cast<int64_t>(step * kWorldCollectives + c),
                                                 "MPI_Allreduce", at, end[k], 25u << 20, step});
        }
      }
      uint64_t at = end[static_cast<size_t>(step * per_step + per_step - 1)] + 100000;
      s.transfers.push_back(
          RankTransfer{0, "MPI_Send", at, at + 300000, 4u << 20, step, (rank + 1) % ranks, 0, true});
      s.transfers.push_back(RankTransfer{0, "MPI_Recv", at + 20000, at + 350000, 4u << 20, step,
                                         (rank + ranks - 1) % ranks, 0, false});
      st.row.computing_ns =
          arrive[static_cast<size_t>(step * per_step)][static_cast<size_t>(rank)] - st.start_ns;
      st.row.communication_ns = st.row.communication_not_overlapped_ns = in_comm;
      st.in_comm_ns = in_comm;
      s.steps.push_back(st);
    }
    if (rank != 9) {
      write_run(dir, rank, 0, s);
      continue;
    }
    // Two cycles of a schedule: the steps and calls of each half.
    RankSummary first = s, second = s;
    first.steps.resize(3);
    second.steps.erase(second.steps.begin(), second.steps.begin() + 3);
    auto in_first = [](int64_t step) { return step < 3; };
    std::erase_if(first.collectives, [&](const RankCollective& c) { return !in_first(c.step); });
    std::erase_if(second.collectives, [&](const RankCollective& c) { return in_first(c.step); });
    std::erase_if(first.transfers, [&](const RankTransfer& t) { return !in_first(t.step); });
    std::erase_if(second.transfers, [&](const RankTransfer& t) { return in_first(t.step); });
    write_run(dir, rank, 0, first);
    write_run(dir, rank, 1, second);
  }
}

std::map<std::string, std::string> files_below(const std::string& dir, const std::string& part) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename().string().find(part) == std::string::npos) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[fs::relative(e.path(), dir).string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

std::map<std::string, std::string> cluster_outputs(const std::string& dir) {
  std::map<std::string, std::string> all = files_below(dir, "communication");
  for (auto& [name, text] : files_below(dir + "/cluster_analysis_output", "")) all[name] = text;
  if (fs::exists(dir + "/msprof")) {
    for (auto& [name, text] : files_below(dir + "/msprof", "")) all["msprof/" + name] = text;
  }
  return all;
}

void remove_cluster_outputs(const std::string& dir) {
  fs::remove_all(dir + "/cluster_analysis_output");
  fs::remove_all(dir + "/msprof");
  std::vector<fs::path> tables;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("communication")) tables.push_back(e.path());
  }
  for (const fs::path& t : tables) fs::remove(t);
}

}  // namespace trainprof::test
