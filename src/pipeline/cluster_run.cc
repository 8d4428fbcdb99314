// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof::cluster: the ranks' runs found and analysed, their summaries read
// and merged per rank, the cluster pass, and cluster_analysis_output/ written.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "analysis/cluster.h"
#include "analysis/cluster_path.h"
#include "analysis/collective_numbering.h"
#include "analysis/comm_digest.h"
#include "analysis/incident_report.h"
#include "analysis/rank_summary.h"
#include "analysis/rank_summary_bytes.h"
#include "analysis/what_if.h"
#include "base/byte_buffer.h"
#include "base/json_limits.h"
#include "base/safe_file.h"
#include "core/analysis_hook.h"
#include "exporter/cluster_database.h"
#include "exporter/cluster_summary.h"
#include "exporter/cluster_trace.h"
#include "exporter/communication_json.h"
#include "exporter/csv_tables.h"
#include "pipeline/cluster_digest_spread.h"
#include "pipeline/cluster_jobs.h"
#include "pipeline/cluster_path_spread.h"
#include "pipeline/cluster_spread.h"
#include "pipeline/run_advice.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kClusterDirName = "cluster_analysis_output";
constexpr uint64_t kNumberingSlackNs = 100'000;

bool analysed(const std::string& run) {
  std::error_code ec;
  return fs::exists(fs::path(run) / "PROFILER_OUTPUT" / "profiler_info.json", ec);
}

json json_file(const std::string& path) {
  json j = base::read_json_object(path);
  return j.is_null() ? json::object() : j;
}

// Whether the run's clock alignment changed after it was analysed: an
// exchange with the reference rank that ended (or failed) later, which the
// process added to the run's profiler_info.json. Its rank summary's times
// are then on a clock the run no longer describes.
bool clock_changed_since_analysis(const std::string& run) {
  json info = json_file(run + "/profiler_info.json");
  json used = json_file(run + "/PROFILER_OUTPUT/profiler_info.json");
  auto now = info.find("clock_sync");
  auto analysis = used.find("analysis");
  if (analysis == used.end() || !analysis->is_object()) return false;  // not analysed: done below
  auto then = analysis->find("clock_sync");
  json before = then == analysis->end() ? json(nullptr) : *then;
  return (now == info.end() ? json(nullptr) : *now) != before;
}

// A rank's several runs (cycles of a schedule) as one summary: their steps
// and collectives side by side (sequence numbers go on across cycles).
void merge_into(analysis::RankSummary& into, analysis::RankSummary&& more) {
  std::map<std::string, uint32_t> index;
  for (uint32_t i = 0; i < into.groups.size(); ++i) index[into.groups[i].name] = i;
  std::vector<uint32_t> remap;
  for (analysis::RankGroup& g : more.groups) {
    auto [it, inserted] = index.emplace(g.name, static_cast<uint32_t>(into.groups.size()));
    if (inserted) into.groups.push_back(std::move(g));
    remap.push_back(it->second);
  }
  auto first_run = static_cast<uint32_t>(into.run_dirs.size());
  for (std::string& run : more.run_dirs) into.run_dirs.push_back(std::move(run));
  for (analysis::RankCollective& c : more.collectives) {
    c.group = remap[c.group];
    c.run += first_run;
    into.collectives.push_back(std::move(c));
  }
  for (analysis::RankTransfer& t : more.transfers) {
    t.group = remap[t.group];
    t.run += first_run;
    into.transfers.push_back(std::move(t));
  }
  for (analysis::RankStep& s : more.steps) into.steps.push_back(s);
  if (more.end != "normal") into.end = more.end;  // how its last run ended, when not normally
  into.clock_aligned = into.clock_aligned && more.clock_aligned;
  into.clock_offset_ns = std::max(into.clock_offset_ns, more.clock_offset_ns);
  into.clock_error_ns = std::max(into.clock_error_ns, more.clock_error_ns);
  if (into.clock_problem.empty()) into.clock_problem = std::move(more.clock_problem);
}

// The job's median step re-timed with the straggler's work at the others'
// median (analysis/cluster_path.h): cluster_analysis.json's "what_if", empty
// without a straggler or matched steps.
json straggler_what_if(int straggler, const analysis::WhatIfSummary& s) {
  json out = json::array();
  if (straggler < 0 || s.steps == 0) return out;
  out.push_back(
      {{"change", "rank " + std::to_string(straggler) + " (the straggler) working at the others' median"},
       {"steps", s.steps},
       {"median_step_ms", s.recorded_ms},
       {"estimated_step_ms", s.estimated_ms}});
  return out;
}

std::string what_if_text(int straggler, const analysis::WhatIfSummary& s) {
  if (straggler < 0 || s.steps == 0) return "";
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "What if rank %d (the straggler) working at the others' median: the job's median step %.3f ms -> "
      "%.3f ms (re-timed through the matched collectives, %zu steps; cluster_critical_path.csv has "
      "each step's path across ranks).\n",
      straggler, s.recorded_ms, s.estimated_ms, s.steps);
  return line;
}

// `links_listed`: how many of the links (slowest first) are listed.
json report_json(const analysis::StragglerReport& r, const analysis::NumberingReport& numbering,
                 const std::vector<analysis::LinkBandwidth>& links, size_t links_listed) {
  json ranks = json::array();
  for (const analysis::RankWaits& w : r.per_rank) {
    ranks.push_back({{"rank", w.rank},
                     {"waited_ns", w.waited_ns},
                     {"others_waited_for_it_ns", w.waited_for_ns},
                     {"arrived_last", w.late_collectives},
                     {"waited_per_step_ns", w.steps > 0 ? w.waited_in_steps_ns / w.steps : 0}});
  }
  json problems = json::array();
  for (const auto& [rank, problem] : r.clock_problems)
    problems.push_back({{"rank", rank}, {"problem", problem}});
  json out = {{"world_size", r.world_size},
              {"ranks", r.ranks},
              {"missing_ranks", r.missing_ranks},
              {"collectives_matched", r.matched},
              {"collectives_unmatched", r.unmatched},
              {"total_wait_ns", r.total_wait_ns},
              {"killed_ranks", r.killed_ranks},
              {"signaled_ranks", r.signaled_ranks},
              {"clocks_aligned", r.clocks_aligned},
              {"clock_offset_ns", r.clock_offset_ns},
              {"clock_error_ns", r.clock_error_ns},
              {"clock_problems", problems},
              {"per_rank", ranks},
              {"straggler", r.straggler}};
  json link_list = json::array();
  for (size_t i = 0; i < links.size() && i < links_listed; ++i)
    link_list.push_back(exporter::link_json(links[i]));
  out["links"] = link_list;
  out["links_total"] = links.size();
  if (r.withheld_straggler >= 0) {
    out["straggler_withheld"] = {{"rank", r.withheld_straggler}, {"unaligned_ranks", r.unaligned_ranks}};
  }
  if (!r.world_sizes.empty()) {
    json sizes = json::array();
    for (const auto& [size, ranks] : r.world_sizes) sizes.push_back({{"world_size", size}, {"ranks", ranks}});
    out["world_sizes_disagree"] = sizes;
  }
  json shifted = json::array(), unaligned = json::array();
  for (const auto& s : numbering.shifted)
    shifted.push_back({{"rank", s.rank}, {"group", s.group}, {"offset", s.offset}});
  for (const auto& u : numbering.unaligned) {
    unaligned.push_back(
        {{"rank", u.rank}, {"group", u.group}, {"collectives", u.collectives}, {"why", u.why}});
  }
  out["numbering"] = {{"shifted", shifted}, {"unaligned", unaligned}};
  if (r.straggler >= 0) {
    out["straggler_steps"] = r.straggler_steps;
    out["cause"] = r.cause;
    out["excess_per_step_ns"] = {{"computing", r.excess_computing_ns},
                                 {"data_wait", r.excess_data_wait_ns},
                                 {"in_communication", r.excess_in_comm_ns},
                                 {"outside_operators", r.excess_outside_ns}};
  }
  return out;
}

// How many ranks the cluster timeline of a job above full_json_max_ranks draws.
constexpr size_t kTimelineRanks = 64;

// The ranks a timeline of many draws: the straggler (or the one withheld),
// the lowest rank, those the job's critical path passes through, then those
// the others waited for most (ties: those that waited least, then by rank),
// `count` in all unless the path alone passes through more.
std::set<int> timeline_ranks(const analysis::StragglerReport& r,
                             const std::vector<analysis::ClusterPathSegment>& path, size_t count) {
  std::set<int> drawn;
  if (r.straggler >= 0) drawn.insert(r.straggler);
  if (r.withheld_straggler >= 0) drawn.insert(r.withheld_straggler);
  if (!r.ranks.empty()) drawn.insert(r.ranks.front());
  for (const analysis::ClusterPathSegment& segment : path) drawn.insert(segment.rank);
  std::vector<const analysis::RankWaits*> order;
  for (const analysis::RankWaits& w : r.per_rank) order.push_back(&w);
  std::sort(order.begin(), order.end(), [](const analysis::RankWaits* a, const analysis::RankWaits* b) {
    if (a->waited_for_ns != b->waited_for_ns) return a->waited_for_ns > b->waited_for_ns;
    if (a->waited_ns != b->waited_ns) return a->waited_ns < b->waited_ns;
    return a->rank < b->rank;
  });
  for (size_t i = 0; i < order.size() && drawn.size() < count; ++i) drawn.insert(order[i]->rank);
  return drawn;
}

std::string rank_list(const std::set<int>& ranks) {
  return analysis::step_ranges(std::vector<int64_t>(ranks.begin(), ranks.end()));
}

// Why the tables of every rank and operation are left to trainprof.db.
std::string scale_notice(size_t ranks, size_t rank_parts, size_t max_ranks) {
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f GB", 1.1e3 * static_cast<double>(rank_parts) / 1e9);
  return std::to_string(ranks) + " ranks, more than " + std::to_string(max_ranks) +
         ": cluster_communication.json, cluster_communication_matrix.json and each rank's "
         "communication.json and communication_matrix.json are not written (msprof-analyze's layout, "
         "about " +
         size +
         " here). Every rank's part in every operation is in cluster_analysis_output/trainprof.db; "
         "cluster_communication_summary.json has the distributions and the slowest operations in full "
         "(--full-json writes the JSON tables too)";
}

// Each rank's communication.json and communication_matrix.json, into the
// PROFILER_OUTPUT of the run each operation came from.
void write_rank_tables(const std::vector<analysis::RankSummary>& ranks,
                       const std::vector<analysis::CommTiming>& timings, ClusterReport* report) {
  std::map<std::pair<int, uint32_t>, std::vector<const analysis::CommTiming*>> by_run;
  for (const analysis::CommTiming& t : timings) by_run[{t.rank, t.run}].push_back(&t);
  std::map<int, const analysis::RankSummary*> by_rank;
  for (const analysis::RankSummary& s : ranks) by_rank[s.rank] = &s;
  for (const auto& [key, mine] : by_run) {
    const analysis::RankSummary* s = by_rank.at(key.first);
    if (key.second >= s->run_dirs.size()) continue;
    std::string dir = s->run_dirs[key.second] + "/PROFILER_OUTPUT";
    base::UniqueFd out(base::open_directory_at(AT_FDCWD, dir));
    std::string error = out.valid() ? "" : "cannot open " + dir + ": " + std::strerror(errno);
    for (const auto& [name, text] :
         {std::pair<const char*, std::string>{"communication.json", exporter::rank_communication_json(mine)},
          {"communication_matrix.json", exporter::rank_communication_matrix_json(mine)}}) {
      if (error.empty()) error = base::write_file_atomically_at(out.get(), name, text, dir + "/" + name);
    }
    if (!error.empty()) report->warnings.push_back(error);
  }
}

// step_trace_time.csv as torch_npu writes it (a Device_id column first).
// "{worker}_{stamp}_trainprof" -> "{worker}_{stamp}_ascend_pt", the name
// msprof-analyze looks for (it reads the stamp, third field from the end).
std::string msprof_rank_dir_name(const analysis::RankSummary& s) {
  std::string name = s.run_dirs.empty() ? "" : fs::path(s.run_dirs.back()).filename().string();
  const std::string suffix = "_trainprof";
  if (name.size() > suffix.size() && name.ends_with(suffix)) {
    name.resize(name.size() - suffix.size());
  } else {
    name = "rank" + std::to_string(s.rank) + "_0_00000000000000000";
  }
  return name + "_ascend_pt";
}

std::string export_msprof(const std::string& dir, const std::vector<analysis::RankSummary>& ranks,
                          const std::vector<analysis::CommTiming>& timings) {
  std::string error;
  base::UniqueFd root(base::make_directory_at(AT_FDCWD, dir, dir, &error));
  if (!root.valid()) return "cannot make the msprof-analyze layout: " + error;
  std::map<int, std::vector<const analysis::CommTiming*>> by_rank;
  for (const analysis::CommTiming& t : timings) by_rank[t.rank].push_back(&t);
  for (const analysis::RankSummary& s : ranks) {
    std::string name = msprof_rank_dir_name(s), rank_path = dir + "/" + name;
    base::UniqueFd rank_dir(base::make_directory_at(root.get(), name, rank_path, &error));
    if (!rank_dir.valid()) return error;
    std::string out_path = rank_path + "/ASCEND_PROFILER_OUTPUT";
    base::UniqueFd out(base::make_directory_at(rank_dir.get(), "ASCEND_PROFILER_OUTPUT", out_path, &error));
    if (!out.valid()) return error;
    // msprof-analyze takes the rank from this file's name and reads text
    // tables when the export type says so.
    json info = {{"config",
                  {{"common_config", json::object()}, {"experimental_config", {{"_export_type", {"text"}}}}}},
                 {"rank_id", s.rank},
                 {"trainprof", {{"runs", s.run_dirs}, {"host", s.host}}}};
    std::string info_name = "profiler_info_" + std::to_string(s.rank) + ".json";
    error = base::write_file_atomically_at(rank_dir.get(), info_name, base::json_text(info, 1) + "\n",
                                           rank_path + "/" + info_name);
    const std::vector<const analysis::CommTiming*>& mine = by_rank[s.rank];
    for (const auto& [file, text] :
         {std::pair<const char*, std::string>{"step_trace_time.csv", exporter::msprof_step_trace_csv(s)},
          {"communication.json", exporter::rank_communication_json(mine)},
          {"communication_matrix.json", exporter::rank_communication_matrix_json(mine)}}) {
      if (error.empty()) error = base::write_file_atomically_at(out.get(), file, text, out_path + "/" + file);
    }
    if (!error.empty()) return error;
  }
  return "";
}

// {path}/cluster_analysis_output, made and opened (report->output_dir set),
// or an invalid descriptor with report->error set.
base::UniqueFd open_output_dir(const std::string& path, ClusterReport* report) {
  base::UniqueFd parent(base::open_directory_at(AT_FDCWD, path));
  std::string error;
  report->output_dir = (fs::path(path) / kClusterDirName).string();
  base::UniqueFd out(parent.valid()
                         ? base::make_directory_at(parent.get(), kClusterDirName, report->output_dir, &error)
                         : -1);
  if (!out.valid()) {
    report->error = "cannot write the cluster outputs: " +
                    (error.empty() ? "cannot open '" + path + "' as a directory" : error);
  }
  return out;
}

// The ranks' dumps of a flight recorder incident among `runs` (none: not one).
std::vector<analysis::IncidentRank> incident_ranks(const std::vector<std::string>& runs) {
  std::vector<analysis::IncidentRank> ranks;
  for (const std::string& run : runs) {
    json info = json_file(run + "/profiler_info.json");
    auto flight = info.find("flight_recorder");
    analysis::IncidentRank r;
    if (flight == info.end() || !analysis::parse_incident_rank(*flight, &r)) continue;
    r.rank = info.value("rank", 0);
    r.pid = info.value("pid", int64_t{0});
    r.run_dir = run;
    r.python_stacks = base::read_regular_file_at(AT_FDCWD, run + "/hang_stacks.txt", /*follow=*/false);
    r.native_stacks = base::read_regular_file_at(AT_FDCWD, run + "/native_stacks.txt", /*follow=*/false);
    ranks.push_back(std::move(r));
  }
  return ranks;
}

// Writes an incident's report alone, when no rank's run has communication to match.
ClusterReport incident_only(const std::string& path, const std::string& text, const json& incident,
                            ClusterReport report) {
  base::UniqueFd out = open_output_dir(path, &report);
  if (!out.valid()) return report;
  report.text = text + "No rank recorded communication: no collective to match.\n";
  for (const auto& [name, content] :
       {std::pair<const char*, std::string>{"straggler_report.txt", report.text},
        {"cluster_analysis.json", base::json_text(json{{"incident", incident}}, 1) + "\n"}}) {
    std::string e = base::write_file_atomically_at(out.get(), name, content, report.output_dir + "/" + name);
    if (!e.empty() && report.error.empty()) report.error = e;
  }
  return report;
}

// What one process reads of its share of the runs: each summary and
// warning with the index of its run among all runs found, so that process 0
// puts them back in the one-process order.
struct ShareRead {
  std::vector<std::pair<uint64_t, std::string>> warnings;
  std::vector<std::pair<uint64_t, analysis::RankSummary>> summaries;
  pipeline::JobChoice jobs;  // on process 0 after the last routing: the job analysed
};

// The runs `index`, `index` + `count`, ... of `runs`: analysed where still
// to be (or again, where their clock alignment changed since), then their
// rank summaries read.
ShareRead read_share(const std::string& path, const std::vector<std::string>& runs, int index, int count,
                     const AnalyseOptions& options, const ClusterOptions& cluster_options) {
  ShareRead share;
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(index); i < runs.size(); i += static_cast<size_t>(count))
    mine.push_back(i);
  bool all_analysed = true;
  for (size_t i : mine) all_analysed = all_analysed && analysed(runs[i]);
  if (!all_analysed && !cluster_options.analyse_missing) {
    for (size_t i : mine) {
      if (!analysed(runs[i])) share.warnings.emplace_back(i, runs[i] + ": not analysed, left out");
    }
  } else if (!all_analysed) {
    AnalyseOptions sharded = options;
    sharded.shard_count = count;
    sharded.shard_index = index;
    AnalyseReport a = analyse(path, sharded);
    for (const RunAnalysis& run : a.runs) {
      auto found = std::find(runs.begin(), runs.end(), run.run_dir);
      if (!run.ok)
        share.warnings.emplace_back(found - runs.begin(), run.run_dir + ": not analysed: " + run.error);
    }
  }
  for (size_t i : mine) {
    const std::string& run = runs[i];
    if (!analysed(run) || !clock_changed_since_analysis(run)) continue;
    if (!cluster_options.analyse_missing) {
      share.warnings.emplace_back(i, run +
                                         ": its clock alignment changed after it was analysed; analyse it "
                                         "again for times on rank 0's clock");
      continue;
    }
    AnalyseReport a = analyse(run, options);  // on the alignment the run has now
    for (const RunAnalysis& again : a.runs) {
      if (!again.ok) share.warnings.emplace_back(i, again.run_dir + ": not analysed again: " + again.error);
    }
  }
  for (size_t i : mine) {
    const std::string& run = runs[i];
    std::string text =
        base::read_regular_file_at(AT_FDCWD, run + "/PROFILER_OUTPUT/rank_summary.json", /*follow=*/false);
    if (text.empty()) {
      if (analysed(run))  // else said above
        share.warnings.emplace_back(
            i, run + ": no communication recorded (no PROFILER_OUTPUT/rank_summary.json)");
      continue;
    }
    analysis::RankSummary s;
    if (std::string e = analysis::parse_rank_summary(text, &s); !e.empty()) {
      share.warnings.emplace_back(i, run + "/PROFILER_OUTPUT/rank_summary.json: " + e);
      continue;
    }
    s.run_dirs = {run};
    share.summaries.emplace_back(i, std::move(s));
  }
  return share;
}

// A share as bytes for process 0, and back.
std::string share_bytes(const ShareRead& share) {
  std::string out;
  base::ByteWriter w(&out);
  w.put<uint64_t>(share.warnings.size());
  for (const auto& [run, text] : share.warnings) {
    w.put(run);
    w.put(text);
  }
  w.put<uint64_t>(share.summaries.size());
  for (const auto& [run, s] : share.summaries) {
    w.put(run);
    analysis::append_rank_summary_bytes(s, &out);
  }
  return out;
}

bool read_share_bytes(std::string_view in, ShareRead* share) {
  base::ByteReader r(in);
  uint64_t n = 0, run = 0;
  if (!r.count(2 * sizeof(uint64_t), &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    std::string text;
    if (!r.get(&run) || !r.get(&text)) return false;
    share->warnings.emplace_back(run, std::move(text));
  }
  if (!r.get(&n)) return false;
  std::string_view rest = r.rest();
  for (uint64_t i = 0; i < n; ++i) {
    analysis::RankSummary s;
    base::ByteReader at(rest);
    if (!at.get(&run)) return false;
    rest = at.rest();
    if (!analysis::read_rank_summary_bytes(&rest, &s)) return false;
    share->summaries.emplace_back(run, std::move(s));
  }
  return rest.empty();
}

// Each summary of `mine` to the process `to(summary)`, the warnings to
// process 0; what arrives here, in the order of the runs. One exchange on
// every process.
template <typename To>
ShareRead route_shares(ShareRead mine, ClusterExchange& exchange, To to, std::string* error) {
  const int here = exchange.index();
  std::vector<ShareRead> away(static_cast<size_t>(exchange.size()));
  ShareRead kept;
  (here == 0 ? kept : away[0]).warnings = std::move(mine.warnings);
  for (auto& entry : mine.summaries) {
    int p = to(entry.second);
    (p == here ? kept : away[static_cast<size_t>(p)]).summaries.push_back(std::move(entry));
  }
  std::vector<std::string> outgoing(away.size());
  for (size_t p = 0; p < away.size(); ++p) {
    if (static_cast<int>(p) != here) outgoing[p] = share_bytes(away[p]);
  }
  std::vector<std::string> incoming = exchange.all_to_all(std::move(outgoing));
  for (size_t p = 0; p < incoming.size(); ++p) {
    if (static_cast<int>(p) != here && !read_share_bytes(incoming[p], &kept) && error->empty())
      *error = "the summaries process " + std::to_string(p) + " read arrived damaged";
  }
  std::stable_sort(kept.warnings.begin(), kept.warnings.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::stable_sort(kept.summaries.begin(), kept.summaries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return kept;
}

// The wall-clock span a summary covers: its steps (a schedule's cycles
// follow one another step by step; a call in flight may outlast its run's
// last step), or its calls when it has no step.
std::pair<uint64_t, uint64_t> time_span(const analysis::RankSummary& s) {
  uint64_t first = UINT64_MAX, last = 0;
  auto cover = [&](uint64_t start, uint64_t end) {
    first = std::min(first, start);
    last = std::max(last, end);
  };
  for (const analysis::RankStep& st : s.steps) cover(st.start_ns, st.end_ns);
  if (!s.steps.empty()) return {first, last};
  for (const analysis::RankCollective& c : s.collectives) cover(c.start_ns, c.end_ns);
  for (const analysis::RankTransfer& t : s.transfers) cover(t.start_ns, t.end_ns);
  return {first, last};
}

// Why a further run of a rank cannot be one more cycle of its schedule
// ("": it can): it belongs to a world of another size, or it overlaps in
// time what the rank's earlier runs cover (a copy of a run, or a second job
// of the same size writing to the same directory).
std::string not_a_further_cycle(const analysis::RankSummary& kept, const analysis::RankSummary& more) {
  if (more.world_size != kept.world_size) {
    return "a world of " + std::to_string(more.world_size) + " ranks, where rank " +
           std::to_string(kept.rank) + "'s earlier run had " + std::to_string(kept.world_size) +
           " (another job's run)";
  }
  auto [kept_first, kept_last] = time_span(kept);
  auto [more_first, more_last] = time_span(more);
  if (more_first <= more_last && kept_first <= kept_last && more_first < kept_last &&
      kept_first < more_last) {
    return "it overlaps in time rank " + std::to_string(kept.rank) + "'s run " +
           (kept.run_dirs.empty() ? std::string() : kept.run_dirs.back()) +
           " (a copy, or another job's run of the same rank)";
  }
  return "";
}

// A rank's runs (in the runs' order) as one summary per rank, by rank: the
// cycles of a schedule side by side. A run that cannot be a further cycle
// of its rank is left out, with a warning (never merged into a wrong
// timeline, where it would make a straggler of its rank).
std::map<int, analysis::RankSummary> merged_by_rank(ShareRead& share) {
  std::map<int, analysis::RankSummary> by_rank;
  for (auto& [run, s] : share.summaries) {
    auto [it, inserted] = by_rank.emplace(s.rank, analysis::RankSummary());
    if (inserted) {
      it->second = std::move(s);
      continue;
    }
    if (std::string why = not_a_further_cycle(it->second, s); !why.empty()) {
      share.warnings.emplace_back(run, (s.run_dirs.empty() ? std::string("a run") : s.run_dirs.back()) +
                                           ": left out of the cluster pass: " + why);
      continue;
    }
    merge_into(it->second, std::move(s));
  }
  return by_rank;
}

// The job whose runs this pass analyses (chosen alike on every process: one
// exchange), and this process's runs of other jobs dropped.
pipeline::JobChoice keep_one_job(ShareRead& share, const std::string& wanted, ClusterExchange& exchange) {
  std::vector<pipeline::JobOfRun> runs;
  for (const auto& [run, s] : share.summaries) {
    uint64_t start = time_span(s).first;
    runs.push_back(pipeline::JobOfRun{s.job, s.rank, start == UINT64_MAX ? 0 : start});
  }
  pipeline::JobChoice choice = pipeline::choose_job(runs, wanted, exchange);
  std::erase_if(share.summaries,
                [&](const auto& entry) { return !choice.error.empty() || !choice.keeps(entry.second.job); });
  return choice;
}

// Tells ClusterOptions::on_stage each stage's end and its seconds.
class StageClock {
 public:
  explicit StageClock(const std::function<void(const std::string&, double)>& tell) : tell_(tell) {}
  void done(const std::string& what) {
    auto now = std::chrono::steady_clock::now();
    if (tell_) tell_(what, std::chrono::duration<double>(now - start_).count());
    start_ = now;
  }

 private:
  const std::function<void(const std::string&, double)>& tell_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// This process alone.
class OneProcess final : public ClusterExchange {
 public:
  int index() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_to_all(std::vector<std::string> outgoing) override { return outgoing; }
};

// What process 0 leaves for the processes of the ranks to write: each
// rank's communication tables (and msprof-analyze layout).
struct RankTables {
  bool concluded = false;   // process 0 wrote the outputs
  bool rank_tables = true;  // communication.json and communication_matrix.json (else only msprof's layout)
  std::vector<analysis::RankSummary> ranks;  // process 0's own among them (none when the timings stay)
};

// What the matching told this process of its own ranks (`own`, by rank).
struct OwnEnds {
  std::vector<analysis::MatchedEnds> ends;
  std::map<int, std::string> hosts;
};

// What process 0 has of every rank's timings when they stay where they
// were made: their digest and the timeline's ranks' timings, its own ranks'
// timings, and part 0's rows the processes beyond kMaxDatabaseParts sent.
struct StayedTimings {
  pipeline::GatheredDigest gathered;
  const std::vector<analysis::CommTiming>* own = nullptr;
  std::vector<std::string> part0_rows;  // exporter::CommunicationRow's, back to back
};

// A summary without its calls: what process 0 reads of a rank when its
// timings stay where they were made (its facts, steps and groups).
analysis::RankSummary without_calls(const analysis::RankSummary& s) {
  analysis::RankSummary out;
  out.rank = s.rank;
  out.world_size = s.world_size;
  out.host = s.host;
  out.job = s.job;
  out.clock_aligned = s.clock_aligned;
  out.clock_offset_ns = s.clock_offset_ns;
  out.clock_error_ns = s.clock_error_ns;
  out.clock_problem = s.clock_problem;
  out.data_wait_separate = s.data_wait_separate;
  out.end = s.end;
  out.run_dirs = s.run_dirs;
  out.steps = s.steps;
  out.groups = s.groups;
  return out;
}

// How process 0 lays the outputs out, said to every process.
struct OutputPlan {
  // trainprof.db's split (parts 1: one file). At scale its communication
  // rows are split over part files written at once by processes 1 to
  // parts - 1 while process 0 concludes (exporter/cluster_database.h); a
  // rank's rows are in part (rank % processes) % parts.
  exporter::DatabaseLayout layout;
  // Above full_json_max_ranks with a split database, every rank's timings
  // stay on its process: process 0 gets their digest
  // (pipeline/cluster_digest_spread.h) and its summaries without their calls.
  bool timings_stay = false;
};

// Every process tells process 0 its ranks, its calls and their names;
// process 0 decides the plan and tells every process. Two exchanges on
// every process.
OutputPlan plan_outputs(const std::vector<analysis::RankSummary>& mine, ClusterExchange& exchange,
                        const ClusterOptions& cluster_options, std::string* error) {
  const int processes = exchange.size();
  std::vector<std::string> census(static_cast<size_t>(processes));
  {
    uint64_t records = 0;
    std::vector<const analysis::RankSummary*> all;
    for (const analysis::RankSummary& s : mine) {
      records += s.collectives.size() + s.transfers.size();
      all.push_back(&s);
    }
    const exporter::DatabaseLayout names_here = exporter::one_database(all);  // its names, sorted
    base::ByteWriter w(&census[0]);
    w.put<uint64_t>(mine.size());
    w.put(records);
    for (const std::vector<std::string>* names : {&names_here.groups, &names_here.operations}) {
      w.put<uint64_t>(names->size());
      for (std::string_view name : *names) w.put(name);
    }
  }
  std::vector<std::string> counted = exchange.all_to_all(std::move(census));
  std::vector<std::string> plan(static_cast<size_t>(processes));
  if (exchange.index() == 0) {
    uint64_t ranks = 0, records = 0;
    std::set<std::string> groups, operations;
    for (size_t p = 0; p < counted.size(); ++p) {
      base::ByteReader r(counted[p]);
      uint64_t n = 0, k = 0;
      bool ok = r.get(&n) && r.get(&k);
      ranks += n;
      records += k;
      for (std::set<std::string>* names : {&groups, &operations}) {
        ok = ok && r.count(8, &n);
        for (uint64_t i = 0; ok && i < n; ++i) {
          std::string name;
          ok = r.get(&name);
          names->insert(std::move(name));
        }
      }
      if ((!ok || !r.empty()) && error->empty())
        *error = "the census process " + std::to_string(p) + " sent arrived damaged";
    }
    if (processes >= 2 && ranks > 0 && records >= cluster_options.database_split_rows) {
      std::string message;
      base::ByteWriter w(&message);
      w.put<int32_t>(std::min(processes, exporter::kMaxDatabaseParts));
      w.put(std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "-" +
            std::to_string(getpid()));
      w.put<uint8_t>(ranks > cluster_options.full_json_max_ranks);
      for (const std::set<std::string>* names : {&groups, &operations}) {
        w.put<uint64_t>(names->size());
        for (const std::string& name : *names) w.put(name);
      }
      for (std::string& to : plan) to = message;
    }
  }
  std::vector<std::string> told = exchange.all_to_all(std::move(plan));
  OutputPlan out;
  exporter::DatabaseLayout& here = out.layout;
  base::ByteReader r(told[0]);
  int32_t parts = 1;
  uint8_t stay = 0;
  bool ok = r.empty() || (r.get(&parts) && parts >= 2 && parts <= exporter::kMaxDatabaseParts &&
                          r.get(&here.pass) && r.get(&stay));
  for (std::vector<std::string>* names : {&here.groups, &here.operations}) {
    uint64_t n = 0;
    ok = ok && (r.empty() || r.count(8, &n));
    for (uint64_t i = 0; ok && i < n; ++i) ok = r.get(&names->emplace_back());
  }
  if (!ok || !r.empty()) {
    if (error->empty())
      *error = "the outputs' plan arrived damaged at process " + std::to_string(exchange.index());
    return OutputPlan{};
  }
  here.parts = parts;
  here.processes = processes;
  out.timings_stay = parts > 1 && stay != 0;
  return out;
}

// Writes this process's part of trainprof.db from `timings` (its ranks')
// when it is a part's writer. Up to kMaxDatabaseParts processes, each
// writes its own rows and process 0 goes on at once; beyond, the others
// send theirs to their part's writer (whether they do is the same on every
// process, whatever the plan said, so every process makes as many
// exchanges): one exchange then. Part 0's rows sent to process 0 go to
// `part0_rows` when the timings stay where they are (process 0 has no
// other). Returns this process's part's problem.
std::string write_database_part(const std::string& path, const OutputPlan& plan,
                                const std::vector<analysis::CommTiming>& timings, ClusterExchange& exchange,
                                std::vector<std::string>* part0_rows) {
  const int processes = exchange.size();
  const exporter::DatabaseLayout& here = plan.layout;
  const int parts = here.parts;
  const int writer = exchange.index() % std::max(parts, 1);
  exporter::CommunicationRows row_of(here);
  const bool send = processes > exporter::kMaxDatabaseParts;
  const bool mine_written = parts > 1 && writer != 0 && exchange.index() < parts;
  std::vector<std::string> arrived;  // the rows sent here, as they came
  uint64_t rows = mine_written ? timings.size() : 0;
  if (send) {
    std::vector<std::string> rows_out(static_cast<size_t>(processes));
    std::string& message = rows_out[static_cast<size_t>(writer)];
    // Process 0's own rows are its; a writer's own stay with it.
    const bool sends_own = parts > 1 && exchange.index() >= parts && (writer != 0 || plan.timings_stay);
    if (sends_own) {
      message.reserve(timings.size() * sizeof(exporter::CommunicationRow));
      for (const analysis::CommTiming& t : timings) {
        const exporter::CommunicationRow row = row_of.of(t);
        message.append(reinterpret_cast<const char*>(&row), sizeof(row));
      }
    }
    arrived = exchange.all_to_all(std::move(rows_out));
    for (size_t p = 0; p < arrived.size(); ++p) {
      if (arrived[p].size() % sizeof(exporter::CommunicationRow) != 0)
        return "the communication rows from process " + std::to_string(p) + " arrived damaged";
      rows += arrived[p].size() / sizeof(exporter::CommunicationRow);
    }
  }
  if (exchange.index() == 0) {
    if (plan.timings_stay) *part0_rows = std::move(arrived);
    return "";
  }
  if (!mine_written) return "";
  // The rows made one at a time, never all held twice.
  size_t next = 0, from = 0, at = 0;
  auto next_row = [&](exporter::CommunicationRow* row) {
    if (next < timings.size()) {
      *row = row_of.of(timings[next++]);
      return true;
    }
    for (; from < arrived.size() && at >= arrived[from].size(); at = 0) std::string().swap(arrived[from++]);
    if (from >= arrived.size()) return false;
    std::memcpy(row, arrived[from].data() + at, sizeof(*row));
    at += sizeof(*row);
    return true;
  };
  ClusterReport opened;
  base::UniqueFd out = open_output_dir(path, &opened);
  if (!out.valid()) return opened.error;
  return exporter::write_cluster_database_part(
      next_row, rows, exchange.index(), here.pass,
      exporter::OutputPath{out.get(), opened.output_dir, exporter::database_part_name(exchange.index())});
}

// Each process writes its own ranks' communication tables (and their part
// of the msprof-analyze layout) from its own ranks' timings, once process 0
// says the outputs are wanted (not when it wrote no outputs); their
// problems go back to process 0's report. Two exchanges on every process.
void write_rank_tables_spread(std::vector<analysis::RankSummary> own, const OwnEnds& own_ends,
                              const std::vector<analysis::CommTiming>& own_timings, RankTables from_first,
                              ClusterExchange& exchange, const ClusterOptions& cluster_options,
                              const std::string& part_problem, ClusterReport* report) {
  const int processes = exchange.size();
  std::vector<std::string> outgoing(static_cast<size_t>(processes));
  // The one byte: 1, go; 2, the communication tables are wanted.
  const bool wanted = from_first.rank_tables || !cluster_options.msprof_dir.empty();
  if (exchange.index() == 0 && from_first.concluded && wanted) {
    const uint8_t flag = 1 | (from_first.rank_tables ? 2 : 0);
    for (int p = 0; p < processes; ++p)
      base::ByteWriter(&outgoing[static_cast<size_t>(p)]).put<uint8_t>(flag);
  }
  if (exchange.index() == 0) {
    for (analysis::RankSummary& s : from_first.ranks) {
      if (pipeline::rank_owner(s.rank, processes) == 0) own.push_back(std::move(s));
    }
    from_first = {};
  }
  std::vector<std::string> incoming = exchange.all_to_all(std::move(outgoing));
  bool go = false, rank_tables = false;
  std::string problem;
  base::ByteReader r(incoming[0]);
  uint8_t flag = 0;
  if (r.get(&flag)) {
    go = (flag & 1) != 0;
    rank_tables = (flag & 2) != 0;
  }
  if (go && own.size() != own_ends.ends.size()) {
    problem = "process " + std::to_string(exchange.index()) + " holds " + std::to_string(own.size()) +
              " rank(s) but was told of " + std::to_string(own_ends.ends.size());
  }
  ClusterReport mine;
  if (go && problem.empty()) {
    // Made already where the timings stay or this process writes a part.
    const bool made = !own_timings.empty() || own.empty();
    std::vector<analysis::CommTiming> made_here;
    if (!made) made_here = analysis::own_comm_timings(own, own_ends.ends, own_ends.hosts);
    const std::vector<analysis::CommTiming>& timings = made ? own_timings : made_here;
    if (rank_tables) write_rank_tables(own, timings, &mine);
    if (!cluster_options.msprof_dir.empty() && !own.empty())
      problem = export_msprof(cluster_options.msprof_dir, own, timings);
  }
  if (!part_problem.empty()) problem = part_problem + (problem.empty() ? "" : "; " + problem);
  std::vector<std::string> said(static_cast<size_t>(processes));
  base::ByteWriter w(&said[0]);
  w.put(problem);
  w.put<uint64_t>(mine.warnings.size());
  for (const std::string& warning : mine.warnings) w.put(warning);
  std::vector<std::string> heard = exchange.all_to_all(std::move(said));
  if (exchange.index() != 0) return;
  for (size_t p = 0; p < heard.size(); ++p) {
    base::ByteReader h(heard[p]);
    std::string error;
    uint64_t n = 0;
    bool ok = h.get(&error) && h.count(8, &n);
    for (uint64_t i = 0; ok && i < n; ++i) {
      std::string warning;
      ok = h.get(&warning);
      if (ok) report->warnings.push_back(std::move(warning));
    }
    if (!ok) error = "the problems process " + std::to_string(p) + " met arrived damaged";
    if (!error.empty() && report->error.empty()) report->error = error;
  }
}

// Process 0's part: the report and the cluster outputs from every rank's
// summary. `tables`: nullptr to write each rank's communication tables (and
// the msprof-analyze layout) here; else the ranks are left there, and the
// processes of the ranks time them and write them. `walked`: the critical
// path, when the processes walked it (else walked here). `stayed`: what
// process 0 has of the timings when they stay where they were made (else
// every rank's are made here, from `by_rank`).
ClusterReport conclude(const std::string& path, const ClusterOptions& cluster_options,
                       const std::vector<std::string>& runs, ShareRead& share,
                       std::map<int, analysis::RankSummary> by_rank,
                       std::optional<pipeline::SpreadMatch> spread, StageClock& clock, ClusterReport report,
                       RankTables* tables, exporter::DatabaseLayout split,
                       std::optional<analysis::ClusterPath> walked, std::optional<StayedTimings> stayed) {
  if (runs.empty()) {
    report.error = "no run directory (*_trainprof) at or below '" + path + "'";
    return report;
  }
  std::vector<analysis::IncidentRank> incident = incident_ranks(runs);
  analysis::IncidentReport incident_summary = analysis::incident_report(incident);
  std::string incident_text = incident.empty() ? "" : analysis::incident_text(incident_summary, incident);
  std::stable_sort(share.warnings.begin(), share.warnings.end(),  // the merge's after the reading's
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [run, warning] : share.warnings) report.warnings.push_back(std::move(warning));
  clock.done(spread ? "gathered " + std::to_string(by_rank.size()) + " rank(s)' summaries on process 0"
                    : "read " + std::to_string(by_rank.size()) + " rank(s)' summaries");
  if (by_rank.empty() && !incident.empty()) {
    return incident_only(path, incident_text, analysis::incident_json(incident_summary), std::move(report));
  }
  if (by_rank.empty()) {
    report.error = "no run at or below '" + path + "' recorded communication (MPI through libtrainprof_mpi)";
    return report;
  }
  std::vector<analysis::RankSummary> ranks;
  uint64_t clock_error_ns = 0;
  for (auto& [rank, s] : by_rank) {
    clock_error_ns = std::max(clock_error_ns, s.clock_error_ns);
    ranks.push_back(std::move(s));
  }
  // Two members' readings of one collective can seem apart by their clocks'
  // error bounds, and by the moment between a call and its clock reading.
  analysis::NumberingReport numbering =
      spread ? std::move(spread->numbering)
             : analysis::align_collective_numbering(ranks, 2 * clock_error_ns + kNumberingSlackNs);
  analysis::StragglerReport r = spread ? std::move(spread->report) : analysis::find_straggler(ranks);
  r.numbering = analysis::numbering_text(numbering);
  if (!spread) clock.done("matched the collectives");
  // Every rank's timings, unless they stayed where they were made.
  std::vector<analysis::CommTiming> timings;
  analysis::CommDigest made_here;
  if (!stayed) {
    timings = analysis::comm_timings(ranks);
    made_here = analysis::digest_timings(timings);
  }
  const analysis::CommDigest& digest = stayed ? stayed->gathered.digest : made_here;
  std::vector<analysis::LinkBandwidth> links = analysis::links_of(digest);
  clock.done("timed " + std::to_string(digest.parts) + " operations and their links");
  base::UniqueFd out = open_output_dir(path, &report);
  // trainprof.db is the largest output (24 M rows at 10^5 ranks) and SQLite
  // writes it on one core: it is made in a thread of its own, beside the
  // critical path and the outputs below, which read the same tables. (The
  // future waits for it however this function ends: it is destroyed before
  // what it reads.)
  auto started = std::chrono::steady_clock::now();
  const exporter::OutputPath database_path{out.get(), report.output_dir, exporter::kClusterDatabaseName};
  // Split by the processes (their parts are being written), or one file.
  std::vector<const analysis::RankSummary*> all;
  for (const analysis::RankSummary& s : ranks) all.push_back(&s);
  const exporter::DatabaseLayout layout = split.parts > 1 ? std::move(split) : exporter::one_database(all);
  std::future<std::pair<std::string, double>> database;
  if (out.valid()) {
    // An earlier pass's parts beyond this one's would be read for its.
    for (int part = layout.parts; part < exporter::kMaxDatabaseParts; ++part)
      unlinkat(out.get(), exporter::database_part_name(part).c_str(), 0);
    database = std::async(std::launch::async, [&] {
      std::string e = exporter::write_cluster_database(
          exporter::ClusterTables{ranks, r, stayed ? *stayed->own : timings, digest, links, layout,
                                  stayed ? &stayed->part0_rows : nullptr},
          database_path);
      return std::pair{e, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()};
    });
  }
  analysis::ClusterPath job_path =
      walked ? std::move(*walked) : analysis::cluster_critical_path(ranks, r.straggler);
  analysis::WhatIfSummary at_median = analysis::summarize_what_if(job_path.straggler_at_median);
  report.text = pipeline::jobs_text(share.jobs) + incident_text + analysis::straggler_text(r) +
                what_if_text(r.straggler, at_median) + analysis::links_text(links);
  report.straggler = r.straggler;
  report.cause = r.cause;
  report.missing_ranks = r.missing_ranks;
  if (!walked) clock.done("found the critical path");
  if (!out.valid()) return report;
  // Above full_json_max_ranks, the tables of every rank and operation go to
  // trainprof.db only, and the timeline draws the ranks that matter.
  const bool full_json = !stayed && ranks.size() <= cluster_options.full_json_max_ranks;
  // The small outputs, made and written one at a time; the large ones below
  // are written as they are made (hundreds of MB at 1,024 ranks).
  std::vector<std::pair<const char*, std::function<std::string()>>> outputs = {
      {"straggler_report.txt", [&report] { return report.text; }},
      {"cluster_step_trace_time.csv", [&ranks] { return exporter::cluster_step_trace_csv(ranks); }},
      {"cluster_critical_path.csv",
       [&job_path] { return exporter::cluster_critical_path_csv(job_path.segments); }},
      {"cluster_analysis.json",
       [&] {
         json j = report_json(r, numbering, links, full_json ? links.size() : exporter::kSlowestListed);
         j["what_if"] = straggler_what_if(r.straggler, at_median);
         bool estimated = r.straggler >= 0 && at_median.steps > 0;
         j["advice"] = pipeline::findings_json(analysis::advise_cluster(
             r, links, at_median.recorded_ms, estimated ? at_median.estimated_ms : -1));
         if (!incident.empty()) j["incident"] = analysis::incident_json(incident_summary);
         if (share.jobs.left_out()) j["jobs"] = pipeline::jobs_json(share.jobs);
         return base::json_text(j, 1) + "\n";
       }},
      {"cluster_communication_summary.json",
       [&] { return exporter::cluster_communication_summary_json(digest, links); }},
  };
  for (const auto& [name, make] : outputs) {
    std::string e = base::write_file_atomically_at(out.get(), name, make(), report.output_dir + "/" + name);
    if (!e.empty() && report.error.empty()) report.error = e;
  }
  clock.done(
      "wrote the report, cluster_step_trace_time.csv, cluster_critical_path.csv, cluster_analysis.json, "
      "cluster_communication_summary.json");
  auto written = [&](const std::string& e, const std::string& what) {
    if (!e.empty() && report.error.empty()) report.error = e;
    clock.done("wrote " + what);
  };
  if (full_json) {
    written(exporter::write_cluster_communication_json(
                timings, exporter::OutputPath{out.get(), report.output_dir, "cluster_communication.json"}),
            "cluster_communication.json");
    written(
        exporter::write_cluster_communication_matrix_json(
            timings, exporter::OutputPath{out.get(), report.output_dir, "cluster_communication_matrix.json"}),
        "cluster_communication_matrix.json");
  } else {
    report.warnings.push_back(scale_notice(ranks.size(), digest.parts, cluster_options.full_json_max_ranks));
    // An earlier pass's, of other runs, would pass for this one's.
    for (const char* stale : {"cluster_communication.json", "cluster_communication_matrix.json"})
      unlinkat(out.get(), stale, 0);
  }
  std::vector<analysis::CommTiming> drawn_timings;
  std::set<int> drawn;
  if (!full_json) {
    drawn = timeline_ranks(r, job_path.segments, kTimelineRanks);
    for (const analysis::CommTiming& t : stayed ? stayed->gathered.drawn : timings)
      if (drawn.count(t.rank) != 0) drawn_timings.push_back(t);
    report.warnings.push_back("cluster_trace_view.json draws " + std::to_string(drawn.size()) + " of the " +
                              std::to_string(ranks.size()) +
                              " ranks: the straggler, the lowest rank, those on the critical path and "
                              "those the others waited for most: " +
                              rank_list(drawn));
  }
  const std::vector<analysis::CommTiming>& on_timeline = full_json ? timings : drawn_timings;
  std::map<int, std::string> hosts;
  for (const analysis::RankSummary& s : ranks) {
    if (full_json || drawn.count(s.rank) != 0) hosts[s.rank] = s.host;
  }
  written(exporter::write_cluster_trace(
              on_timeline, job_path.segments, hosts,
              exporter::OutputPath{out.get(), report.output_dir, "cluster_trace_view.json"}),
          "cluster_trace_view.json");
  written(exporter::write_cluster_perfetto_trace(
              on_timeline, job_path.segments, hosts,
              exporter::OutputPath{out.get(), report.output_dir, "cluster_trace_view.pftrace"}),
          "cluster_trace_view.pftrace");
  auto [database_error, database_seconds] = database.get();
  char took[32];
  std::snprintf(took, sizeof(took), "%.2f s", database_seconds);
  written(database_error,
          std::string("trainprof.db (") + took + " in a thread of its own, beside the stages above" +
              (layout.parts > 1 ? "; its communication rows split with " + std::to_string(layout.parts - 1) +
                                      " part file(s) the other processes wrote meanwhile"
                                : "") +
              ")");
  if (tables != nullptr) {
    tables->concluded = true;
    tables->rank_tables = full_json;
    if (!stayed) tables->ranks = std::move(ranks);  // else each process has its own whole
    return report;
  }
  if (full_json) {
    write_rank_tables(ranks, timings, &report);
    clock.done("wrote each rank's communication.json and communication_matrix.json");
  }
  if (!cluster_options.msprof_dir.empty()) {
    written(export_msprof(cluster_options.msprof_dir, ranks, timings), "the msprof-analyze layout");
  }
  return report;
}

ClusterReport cluster_unguarded(const std::string& path, const AnalyseOptions& options,
                                const ClusterOptions& cluster_options) {
  ClusterReport report;
  StageClock clock(cluster_options.on_stage);
  OneProcess alone;
  ClusterExchange& exchange = cluster_options.exchange != nullptr ? *cluster_options.exchange : alone;
  std::vector<std::string> runs;
  ShareRead share;
  try {  // whatever happens here, this process meets the others below
    runs = find_run_directories(path);
    share = read_share(path, runs, exchange.index(), exchange.size(), options, cluster_options);
  } catch (const std::exception& e) {
    share.warnings.emplace_back(0, "process " + std::to_string(exchange.index()) +
                                       " could not read its share of the runs: " + e.what());
  }
  pipeline::JobChoice jobs = keep_one_job(share, cluster_options.job_id, exchange);
  if (!jobs.error.empty()) {  // on every process alike: none goes on to wait for the others
    report.error = jobs.error;
    return report;
  }
  if (!jobs.damaged.empty()) report.error = jobs.damaged;
  std::map<int, analysis::RankSummary> by_rank;
  std::optional<pipeline::SpreadMatch> spread;    // the matching, when spread over processes
  std::vector<analysis::RankSummary> own_copy;    // this process's ranks, renumbered
  OwnEnds own_ends;                               // what the matching told of them
  std::vector<analysis::CommTiming> own_timings;  // theirs, where this process needs them
  OutputPlan plan;                                // trainprof.db's parts; whether timings stay
  std::string part_problem;                       // this process's part's
  std::optional<analysis::ClusterPath> walked;    // on process 0: the critical path the processes walked
  std::optional<StayedTimings> stayed;            // on process 0, when the timings stay
  if (cluster_options.exchange == nullptr) {
    share = route_shares(
        std::move(share), exchange, [](const auto&) { return 0; }, &report.error);
    by_rank = merged_by_rank(share);
  } else {
    // Each rank's summaries to its process, merged and matched there, then
    // (renumbered) to process 0 for the outputs.
    const int processes = exchange.size();
    const bool first = exchange.index() == 0;
    share = route_shares(
        std::move(share), exchange,
        [processes](const analysis::RankSummary& s) { return pipeline::rank_owner(s.rank, processes); },
        &report.error);
    std::vector<analysis::RankSummary> mine;
    for (auto& [rank, s] : merged_by_rank(share)) mine.push_back(std::move(s));
    spread = pipeline::spread_match(mine, exchange, kNumberingSlackNs);
    own_ends = {std::move(spread->ends), std::move(spread->hosts)};
    if (first) {
      clock.done("read the summaries and matched their collectives over " + std::to_string(processes) +
                 " process(es)");
    }
    // Each step's path where the step is owned, before the summaries go to process 0.
    std::vector<const analysis::RankSummary*> walking;
    for (const analysis::RankSummary& s : mine) walking.push_back(&s);
    walked = pipeline::spread_critical_path(walking, spread->report.straggler, exchange, &report.error);
    if (first) clock.done("walked the critical path over " + std::to_string(processes) + " process(es)");
    if (!spread->error.empty() && report.error.empty()) report.error = spread->error;
    std::string plan_problem;
    plan = plan_outputs(mine, exchange, cluster_options, &plan_problem);
    // Its ranks' tables are written here (process 0's from the summaries
    // it keeps, unless the timings stay: then it keeps its own too).
    if (plan.timings_stay) {
      own_copy = std::move(mine);
      for (const analysis::RankSummary& s : own_copy) mine.push_back(without_calls(s));
    } else if (!first) {
      own_copy = mine;
    }
    const int writer = exchange.index() % plan.layout.parts;
    if ((plan.timings_stay || (plan.layout.parts > 1 && writer != 0)) &&
        own_copy.size() == own_ends.ends.size())
      own_timings = analysis::own_comm_timings(own_copy, own_ends.ends, own_ends.hosts);
    // Each process's digest of its timings to process 0 (made whether or
    // not they stay, so that every process makes as many exchanges).
    std::set<int> drawn;
    if (first && plan.timings_stay && walked)
      drawn = timeline_ranks(spread->report, walked->segments, kTimelineRanks);
    static const std::vector<analysis::CommTiming> kNone;
    pipeline::GatheredDigest gathered =
        pipeline::spread_digest(plan.timings_stay ? own_timings : kNone, drawn, exchange, &report.error);
    if (first && plan.timings_stay) {
      stayed.emplace();
      stayed->gathered = std::move(gathered);
      stayed->own = &own_timings;
      clock.done("digested every rank's timings where they were made");
    }
    ShareRead back;
    back.warnings = std::move(share.warnings);
    for (analysis::RankSummary& s : mine) back.summaries.emplace_back(s.rank, std::move(s));
    share = route_shares(
        std::move(back), exchange, [](const auto&) { return 0; }, &report.error);
    for (auto& [rank, s] : share.summaries) by_rank.emplace(s.rank, std::move(s));
    part_problem =
        write_database_part(path, plan, own_timings, exchange, stayed ? &stayed->part0_rows : nullptr);
    if (!plan_problem.empty())
      part_problem = plan_problem + (part_problem.empty() ? "" : "; " + part_problem);
  }
  share.jobs = std::move(jobs);  // the share is process 0's last routing's, either way
  RankTables tables;
  RankTables* left_for_ranks = spread ? &tables : nullptr;  // before `spread` is moved
  if (exchange.index() == 0 && report.error.empty()) {
    try {  // the others wait below for what this process sends them
      report = conclude(path, cluster_options, runs, share, std::move(by_rank), std::move(spread), clock,
                        std::move(report), left_for_ranks, std::move(plan.layout), std::move(walked),
                        std::move(stayed));
    } catch (const std::exception& e) {
      if (cluster_options.exchange == nullptr) throw;
      report.error = std::string("cluster analysis failed: ") + e.what();
      tables = {};
    }
  }
  if (cluster_options.exchange != nullptr) {
    const bool rank_tables = tables.rank_tables;  // false above full_json_max_ranks
    write_rank_tables_spread(std::move(own_copy), own_ends, own_timings, std::move(tables), exchange,
                             cluster_options, part_problem, &report);
    if (exchange.index() == 0 && rank_tables) {
      clock.done("wrote each rank's communication.json and communication_matrix.json");
    } else if (exchange.index() == 0 && !cluster_options.msprof_dir.empty()) {
      clock.done("wrote the msprof-analyze layout");
    }
  }
  return report;
}
}  // namespace

ClusterReport cluster(const std::string& path, const AnalyseOptions& options,
                      const ClusterOptions& cluster_options) {
  try {
    return cluster_unguarded(path, options, cluster_options);
  } catch (const std::exception& e) {
    ClusterReport report;
    report.error = std::string("cluster analysis failed: ") + e.what();
    return report;
  }
}

namespace {
// A flight recorder runs the cluster pass on its incidents through this.
[[maybe_unused]] const bool kClusterRegistered = (core::register_cluster(&cluster), true);
}  // namespace

}  // namespace trainprof
