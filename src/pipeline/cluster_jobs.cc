// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/cluster_jobs.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include "base/byte_buffer.h"
#include "base/run_directory.h"

namespace trainprof::pipeline {
namespace {

// A job's runs as counted on one process, or on all of them merged.
struct Count {
  std::vector<int32_t> ranks;  // sorted, distinct
  uint64_t runs = 0;
  uint64_t start_ns = UINT64_MAX;
};

void add_ranks(Count& into, const std::vector<int32_t>& ranks) {
  std::vector<int32_t> both;
  both.reserve(into.ranks.size() + ranks.size());
  std::merge(into.ranks.begin(), into.ranks.end(), ranks.begin(), ranks.end(), std::back_inserter(both));
  both.erase(std::unique(both.begin(), both.end()), both.end());
  into.ranks = std::move(both);
}

std::map<std::string, Count> count_runs(const std::vector<JobOfRun>& mine) {
  std::map<std::string, Count> counts;
  for (const JobOfRun& run : mine) {
    Count& c = counts[run.job];
    c.ranks.push_back(run.rank);
    ++c.runs;
    if (run.start_ns != 0) c.start_ns = std::min(c.start_ns, run.start_ns);
  }
  for (auto& [job, c] : counts) {
    std::sort(c.ranks.begin(), c.ranks.end());
    c.ranks.erase(std::unique(c.ranks.begin(), c.ranks.end()), c.ranks.end());
  }
  return counts;
}

std::string counts_bytes(const std::map<std::string, Count>& counts) {
  std::string out;
  base::ByteWriter w(&out);
  w.put<uint64_t>(counts.size());
  for (const auto& [job, c] : counts) {
    w.put(job);
    w.put(c.runs);
    w.put(c.start_ns);
    w.put<uint64_t>(c.ranks.size());
    for (int32_t rank : c.ranks) w.put(rank);
  }
  return out;
}

// Adds the counts in `bytes` to `into`; false: damaged.
bool add_counts(std::string_view bytes, std::map<std::string, Count>* into) {
  base::ByteReader r(bytes);
  uint64_t jobs = 0;
  if (!r.count(4 * sizeof(uint64_t), &jobs)) return false;
  for (uint64_t j = 0; j < jobs; ++j) {
    std::string job;
    Count c;
    uint64_t n = 0;
    if (!r.get(&job) || job.size() > base::kMaxJobIdBytes || !r.get(&c.runs) || !r.get(&c.start_ns) ||
        !r.count(sizeof(int32_t), &n))
      return false;
    c.ranks.resize(n);
    for (int32_t& rank : c.ranks) {
      if (!r.get(&rank)) return false;
    }
    if (!std::is_sorted(c.ranks.begin(), c.ranks.end())) return false;
    Count& total = (*into)[job];
    add_ranks(total, c.ranks);
    total.runs += c.runs;
    total.start_ns = std::min(total.start_ns, c.start_ns);
  }
  return r.empty();
}

std::string job_name(const std::string& id) {
  return id.empty() ? "runs without a job id" : "'" + id + "'";
}

std::string job_list(const std::vector<JobSeen>& jobs) {
  std::string out;
  for (const JobSeen& j : jobs) {
    out += (out.empty() ? "" : ", ") + job_name(j.id) + " (" + std::to_string(j.ranks) + " rank(s), " +
           std::to_string(j.runs) + " run(s))";
  }
  return out;
}

}  // namespace

JobChoice choose_job(const std::vector<JobOfRun>& mine, const std::string& wanted,
                     ClusterExchange& exchange) {
  std::map<std::string, Count> counts = count_runs(mine);
  std::vector<std::string> outgoing(static_cast<size_t>(exchange.size()));
  std::string bytes = counts_bytes(counts);
  for (size_t p = 0; p < outgoing.size(); ++p) {
    if (static_cast<int>(p) != exchange.index()) outgoing[p] = bytes;
  }
  std::vector<std::string> incoming = exchange.all_to_all(std::move(outgoing));
  JobChoice choice;
  for (size_t p = 0; p < incoming.size(); ++p) {
    if (static_cast<int>(p) != exchange.index() && !add_counts(incoming[p], &counts) &&
        choice.damaged.empty())
      choice.damaged = "the count of jobs from process " + std::to_string(p) + " arrived damaged";
  }
  for (const auto& [id, c] : counts) {
    choice.jobs.push_back(
        JobSeen{id, static_cast<int>(c.ranks.size()), c.runs, c.start_ns == UINT64_MAX ? 0 : c.start_ns});
  }
  std::vector<const JobSeen*> named;
  for (const JobSeen& j : choice.jobs) {
    if (!j.id.empty()) named.push_back(&j);
  }
  if (!wanted.empty()) {
    auto found = std::find_if(named.begin(), named.end(), [&](const JobSeen* j) { return j->id == wanted; });
    if (found == named.end()) {
      choice.error = "no run of job '" + wanted + "' (--job-id)" +
                     (choice.jobs.empty() ? std::string() : "; the runs are of " + job_list(choice.jobs));
      return choice;
    }
    choice.analysed = wanted;
    choice.why = "as asked (--job-id)";
  } else if (!named.empty()) {
    // The most ranks; among equals the job that started last, then the smaller id.
    auto best = std::max_element(named.begin(), named.end(), [](const JobSeen* a, const JobSeen* b) {
      return std::tie(a->ranks, a->start_ns, b->id) < std::tie(b->ranks, b->start_ns, a->id);
    });
    choice.analysed = (*best)->id;
    choice.why = "the one with the most ranks, the latest started among equals";
  }
  choice.with_unnamed = named.size() <= 1;
  for (JobSeen& j : choice.jobs) j.analysed = choice.keeps(j.id);
  return choice;
}

bool JobChoice::left_out() const {
  return std::any_of(jobs.begin(), jobs.end(), [](const JobSeen& j) { return !j.analysed; });
}

std::string jobs_text(const JobChoice& choice) {
  if (!choice.left_out()) return "";
  std::vector<JobSeen> kept, others;
  for (const JobSeen& j : choice.jobs) (j.analysed ? kept : others).push_back(j);
  return "Jobs: these runs are of " + std::to_string(choice.jobs.size()) + " jobs; analysed job " +
         job_list(kept) + ", " + choice.why + "; left out " + job_list(others) +
         " (`trainprof cluster --job-id ID` analyses another).\n";
}

nlohmann::json jobs_json(const JobChoice& choice) {
  nlohmann::json out = nlohmann::json::array();
  for (const JobSeen& j : choice.jobs) {
    out.push_back({{"job", j.id},
                   {"ranks", j.ranks},
                   {"runs", j.runs},
                   {"start_ns", j.start_ns},
                   {"analysed", j.analysed}});
  }
  return out;
}

}  // namespace trainprof::pipeline
