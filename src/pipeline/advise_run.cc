// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// `trainprof advise`: the findings of each run's analysis (profiler_info.json's
// "advice") and of the cluster pass (cluster_analysis.json's), merged per rule
// and ranked.
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/advisor.h"
#include "analysis/cluster.h"
#include "analysis/path_graph.h"
#include "base/json_limits.h"
#include "base/safe_file.h"
#include "base/string_format.h"
#include "trainprof/advise.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using base::append_format;

// The findings of one JSON array, each checked (a hand-edited file gives
// what it holds well-formed, and a warning for the rest).
std::vector<Advice> parse_findings(const json& list, const std::string& where,
                                   std::vector<std::string>* warnings) {
  std::vector<Advice> out;
  if (!list.is_array()) return out;
  for (const json& f : list) {
    if (!f.is_object() || !f.contains("rule") || !f["rule"].is_string()) {
      warnings->push_back(where + ": a finding without a \"rule\" is left out");
      continue;
    }
    Advice a;
    a.rule = base::string_field(f, "rule");
    a.title = base::string_field(f, "title", a.rule);
    a.evidence = base::string_field(f, "evidence");
    a.change = base::string_field(f, "change");
    a.step_ms = base::number_field(f, "step_ms", 0);
    a.saving_ms = base::number_field(f, "saving_ms", -1);
    a.saving_basis = base::string_field(f, "saving_basis");
    a.cause = base::string_field(f, "cause");
    if (f.contains("rank") && f["rank"].is_number_integer()) a.ranks.push_back(f["rank"].get<int>());
    out.push_back(std::move(a));
  }
  return out;
}

// A rank's operators and ranges over its counted steps, per step, by
// name: calls and self time, ms (profiler_info.json's analysis.in_steps.host).
using NamesPerStep = std::map<std::string, std::pair<double, double>>;

// None when the run has no counted steps or no in_steps.
std::optional<NamesPerStep> names_per_step(const json& info) {
  if (!info.contains("analysis") || !info["analysis"].is_object()) return std::nullopt;
  const json& a = info["analysis"];
  size_t steps = a.contains("steps") && a["steps"].is_array() ? a["steps"].size() : 0;
  if (steps == 0 || !a.contains("in_steps") || !a["in_steps"].is_object()) return std::nullopt;
  const json& host = a["in_steps"].value("host", json::array());
  if (!host.is_array()) return std::nullopt;
  NamesPerStep out;
  for (const json& row : host) {
    if (!row.is_array() || row.size() < 3 || !row[0].is_string() || !row[1].is_number() ||
        !row[2].is_number())
      continue;
    std::string name = row[0].get<std::string>();
    if (analysis::is_comm_caller(name)) continue;  // communication: a cause of its own
    out[name] = {row[1].get<double>() / static_cast<double>(steps),
                 row[2].get<double>() / 1e3 / static_cast<double>(steps)};
  }
  return out;
}

// One run's findings: analysed first when its output has none. Its rank's
// operators per step go to `names` (for a straggler's compute).
std::vector<Advice> run_findings(const std::string& run, std::vector<std::string>* warnings,
                                 std::map<int, NamesPerStep>* names) {
  fs::path info_file = fs::path(run) / "PROFILER_OUTPUT" / "profiler_info.json";
  json info = base::read_json_object(info_file.string());
  auto has_advice = [](const json& j) {
    return j.is_object() && j.contains("analysis") && j["analysis"].is_object() &&
           j["analysis"].contains("advice");
  };
  if (!has_advice(info)) {
    AnalyseReport a = analyse(run);
    if (!a.ok()) {
      warnings->push_back("cannot analyse '" + run + "': " + (a.runs.empty() ? a.error : a.runs[0].error));
      return {};
    }
    info = base::read_json_object(info_file.string());
    if (!has_advice(info)) {
      warnings->push_back("'" + info_file.string() + "' has no advice");
      return {};
    }
  }
  std::vector<Advice> out = parse_findings(info["analysis"]["advice"], info_file.string(), warnings);
  int rank = static_cast<int>(base::number_field(info, "rank", -1));
  if (std::optional<NamesPerStep> n = names_per_step(info); rank >= 0 && n) (*names)[rank] = std::move(*n);
  for (Advice& a : out) {
    a.run = run;
    if (rank >= 0 && a.ranks.empty()) a.ranks.push_back(rank);
  }
  return out;
}

// What the cluster pass says of a job: its findings, and each rank's
// waiting at collectives per counted step, ms.
struct JobAdvice {
  std::vector<Advice> findings;
  std::map<int, double> waited_per_step_ms;
};

// The cluster's findings; `trainprof cluster` first when a job of several
// runs has no cluster outputs yet.
JobAdvice cluster_findings(const std::string& path, size_t runs, std::vector<std::string>* warnings) {
  fs::path file = fs::path(path) / "cluster_analysis_output" / "cluster_analysis.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (runs < 2) return {};
    ClusterReport c = cluster(path);
    if (!c.ok()) return {};  // no communication recorded: nothing to match across ranks
  }
  json j = base::read_json_object(file.string());
  if (!j.is_object() || !j.contains("advice")) return {};
  JobAdvice out;
  out.findings = parse_findings(j["advice"], file.string(), warnings);
  if (auto ranks = j.find("per_rank"); ranks != j.end() && ranks->is_array()) {
    for (const json& r : *ranks) {
      if (r.is_object() && r.contains("rank") && r["rank"].is_number_integer())
        out.waited_per_step_ms[r["rank"].get<int>()] = base::number_field(r, "waited_per_step_ns", 0) / 1e6;
    }
  }
  return out;
}

// "0-3, 5".
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) +
           (j > i ? "-" + std::to_string(ranks[j]) : std::string());
    i = j + 1;
  }
  return out;
}

// The job's straggler finding among `findings`, or end().
std::vector<Advice>::iterator straggler_of(std::vector<Advice>& findings) {
  return std::find_if(findings.begin(), findings.end(),
                      [](const Advice& a) { return a.rule == "straggler" && !a.ranks.empty(); });
}

// A rank's exposed communication in a job holds its waits for the others
// to arrive, which no overlap would hide: the straggler's doing when the
// cluster pass names one (the same time as its finding, said there and not
// counted again), else the ranks' jitter, late by turns. Taken out of each
// rank's finding, what is left (the transfer nothing overlaps) must still
// be a tenth of the step for the finding to stand.
void take_waits_out_of_exposed_communication(JobAdvice& job, std::vector<Advice>& findings) {
  auto straggler = straggler_of(job.findings);
  int slow = straggler != job.findings.end() ? straggler->ranks.front() : -1;
  std::vector<int> waiting;
  double most = 0;
  std::erase_if(findings, [&](Advice& a) {
    if (a.rule != "exposed_communication" || a.ranks.size() != 1 || a.ranks[0] == slow || a.saving_ms <= 0)
      return false;
    auto found = job.waited_per_step_ms.find(a.ranks[0]);
    double wait = found != job.waited_per_step_ms.end() ? std::min(found->second, a.saving_ms) : 0;
    if (wait <= 0) return false;
    if (slow >= 0) {
      waiting.push_back(a.ranks[0]);
      most = std::max(most, wait);
    }
    double left = a.saving_ms - wait;
    if (left < analysis::kExposedCommShare * a.step_ms) return true;
    a.saving_ms = left;
    a.evidence += slow >= 0 ? base::format(
                                  "; %.3f ms of it per step is the wait for rank %d (its straggler finding), "
                                  "left out of the saving",
                                  wait, slow)
                            : base::format(
                                  "; %.3f ms of it per step was waiting for the other ranks to arrive "
                                  "(cluster_analysis.json), not the transfer, and is left out of the saving",
                                  wait);
    return false;
  });
  if (!waiting.empty()) {
    straggler->evidence += "; the exposed communication of rank(s) " + rank_list(waiting) + " (up to " +
                           base::format("%.3f", most) +
                           " ms per step) is their wait for it, the same time, not counted again";
  }
}

// The straggler's own host work outside operators, when that is its
// cause, is the same time as its finding: said there, not counted again.
void fold_cause_into_straggler(std::vector<Advice>& findings) {
  auto straggler = straggler_of(findings);
  if (straggler == findings.end() || straggler->cause != "host work outside operators") return;
  std::vector<int> slow = {straggler->ranks.front()};
  std::string folded;
  std::erase_if(findings, [&](const Advice& a) {
    if (a.rule != "host_outside_operators" || a.ranks != slow) return false;
    folded = "; its host work outside operators (up to " + base::format("%.3f", std::max(0.0, a.saving_ms)) +
             " ms per step) is this cause, not counted again";
    return true;
  });
  for (Advice& a : findings)
    if (a.rule == "straggler") a.evidence += folded;
}

// A straggler that computes longer than the others: the operators its
// extra time is in, and whether it made more calls of them (more work) or
// as many (the same work, slower: its processor, or larger inputs, which
// only the shapes tell apart).
void name_the_straggler_compute(const std::map<int, NamesPerStep>& ranks, std::vector<Advice>& findings) {
  auto straggler = straggler_of(findings);
  if (straggler == findings.end() || straggler->cause != "compute") return;
  int slow = straggler->ranks.front();
  auto own = ranks.find(slow);
  if (own == ranks.end() || ranks.size() < 2) return;
  struct Excess {
    std::string name;
    double ms, others_ms, calls, others_calls;
  };
  std::vector<Excess> excess;
  for (const auto& [name, mine] : own->second) {
    std::vector<double> ms, calls;
    for (const auto& [rank, n] : ranks) {
      if (rank == slow) continue;
      auto it = n.find(name);
      calls.push_back(it != n.end() ? it->second.first : 0);
      ms.push_back(it != n.end() ? it->second.second : 0);
    }
    Excess e{name, mine.second, analysis::median(ms), mine.first, analysis::median(calls)};
    if (e.ms > e.others_ms) excess.push_back(e);
  }
  std::sort(excess.begin(), excess.end(),
            [](const Excess& a, const Excess& b) { return a.ms - a.others_ms > b.ms - b.others_ms; });
  if (excess.empty()) return;
  excess.resize(std::min<size_t>(excess.size(), 3));
  std::string text = "; its extra computing, per step against the others' median: ";
  std::string more_calls;
  for (size_t i = 0; i < excess.size(); ++i) {
    const Excess& e = excess[i];
    text += base::format("%s%s %.3f vs %.3f ms (+%.3f)", i == 0 ? "" : ", ", e.name.c_str(), e.ms,
                         e.others_ms, e.ms - e.others_ms);
    if (e.calls > e.others_calls * 1.01 + 0.01)
      more_calls += base::format("%s%s %.1f vs %.1f", more_calls.empty() ? "" : ", ", e.name.c_str(), e.calls,
                                 e.others_calls);
  }
  text += more_calls.empty()
              ? "; the same operators as the others, as many calls per step, each slower: a slower or busier "
                "processor on rank " +
                    std::to_string(slow) +
                    " (other processes, a shared core, a lower clock) or larger inputs (uneven batches or "
                    "sequence lengths; record_shapes shows the shapes)"
              : "; more calls per step: " + more_calls;
  straggler->evidence += text;
}

// One finding per rule over the runs: the one that saves most stands for
// the others, with every rank it was found on.
std::vector<Advice> merge_by_rule(std::vector<Advice> all) {
  std::map<std::string, size_t> first;
  std::vector<Advice> out;
  for (Advice& a : all) {
    // Cluster findings name a rank each: a straggler on rank 3 and a slow
    // link from rank 5 stay apart.
    std::string key = a.run.empty() ? a.rule + "#" + a.title : a.rule;
    auto it = first.find(key);
    if (it == first.end()) {
      first[key] = out.size();
      out.push_back(std::move(a));
      continue;
    }
    Advice& kept = out[it->second];
    std::vector<int> ranks = kept.ranks;
    ranks.insert(ranks.end(), a.ranks.begin(), a.ranks.end());
    if (a.saving_ms > kept.saving_ms) kept = std::move(a);
    kept.ranks = ranks;
  }
  fold_cause_into_straggler(out);
  // A straggler comes first whatever the savings.
  std::stable_sort(out.begin(), out.end(), [](const Advice& a, const Advice& b) {
    bool a_first = a.rule == "straggler", b_first = b.rule == "straggler";
    return a_first != b_first ? a_first : a.saving_ms > b.saving_ms;
  });
  return out;
}

std::string report_text(const std::string& path, const std::vector<Advice>& findings, size_t runs) {
  std::string text;
  if (findings.empty()) {
    append_format(text,
                  "advice for %s: no rule fired on its %zu run(s): none of the problems the advisor knows "
                  "(docs/ADVICE.md) stands out\n",
                  path.c_str(), runs);
    return text;
  }
  append_format(text, "advice for %s (%zu run(s)), the largest saving first:\n", path.c_str(), runs);
  for (size_t i = 0; i < findings.size(); ++i) {
    const Advice& a = findings[i];
    std::string where = a.ranks.empty() || runs < 2 ? "" : " (rank " + rank_list(a.ranks) + ")";
    append_format(text, "%zu. %s%s\n", i + 1, a.title.c_str(), where.c_str());
    if (a.saving_ms >= 0 && a.step_ms > 0) {
      append_format(text, "   worth: %.3f ms of the %.3f ms median step (%.1f %%), %s\n", a.saving_ms,
                    a.step_ms, 100.0 * a.saving_ms / a.step_ms, a.saving_basis.c_str());
    } else if (a.saving_ms >= 0) {
      append_format(text, "   worth: %.3f ms per step, %s\n", a.saving_ms, a.saving_basis.c_str());
    }
    text += "   evidence: " + a.evidence + "\n";
    text += "   change: " + a.change + "\n";
  }
  return text;
}

}  // namespace

AdviceReport advise(const std::string& path) {
  AdviceReport report;
  std::vector<std::string> runs = find_run_directories(path);
  if (runs.empty()) {
    report.error = no_run_directory_error(path);
    return report;
  }
  std::vector<Advice> all;
  std::map<int, NamesPerStep> names;  // by rank
  for (const std::string& run : runs) {
    std::vector<Advice> found = run_findings(run, &report.warnings, &names);
    all.insert(all.end(), found.begin(), found.end());
  }
  // After the runs' analyses, which the cluster pass reads.
  JobAdvice job = cluster_findings(path, runs.size(), &report.warnings);
  take_waits_out_of_exposed_communication(job, all);
  all.insert(all.begin(), job.findings.begin(), job.findings.end());
  report.findings = merge_by_rule(std::move(all));
  name_the_straggler_compute(names, report.findings);
  report.text = report_text(path, report.findings, runs.size());
  json list = json::array();
  for (const Advice& f : report.findings) {
    list.push_back({{"rule", f.rule},
                    {"title", f.title},
                    {"evidence", f.evidence},
                    {"change", f.change},
                    {"step_ms", f.step_ms},
                    {"saving_ms", f.saving_ms},
                    {"saving_basis", f.saving_basis},
                    {"cause", f.cause},
                    {"ranks", f.ranks},
                    {"run", f.run}});
  }
  report.json = base::json_text(list, 1) + "\n";
  return report;
}

}  // namespace trainprof
