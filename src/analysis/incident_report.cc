// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// analysis/incident_report.h.
#include "analysis/incident_report.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "base/run_directory.h"

namespace trainprof::analysis {
namespace {

constexpr size_t kFramesShown = 12;
constexpr size_t kPythonLinesShown = 40;

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 10) return out + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return out;
}

// The first `lines` lines of `text`, indented.
std::string indented(const std::string& text, size_t lines) {
  std::istringstream in(text);
  std::string line, out;
  size_t n = 0;
  while (std::getline(in, line)) {
    if (n++ == lines) return out + "    ...\n";
    out += "    " + line + "\n";
  }
  return out;
}

}  // namespace

bool parse_incident_rank(const nlohmann::json& flight, IncidentRank* r) {
  if (!flight.is_object()) return false;
  auto incident = flight.find("incident");
  if (incident == flight.end() || !incident->is_object()) return false;
  auto text = [](const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto integer = [](const nlohmann::json& j, const char* key, int64_t otherwise) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : otherwise;
  };
  r->trigger = text(flight, "trigger");
  r->reason = text(flight, "reason");
  r->key = text(*incident, "key");
  r->announced_by = static_cast<int>(integer(*incident, "announced_by", -1));
  // A damaged world size is left out rather than listed rank by rank.
  int64_t world_size = integer(*incident, "world_size", 1);
  r->world_size = world_size >= 1 && world_size <= base::kMaxWorldSize ? static_cast<int>(world_size) : 1;
  r->first_non_finite_loss_step = -1;
  r->first_non_finite_loss.clear();
  auto wrong = flight.find("first_non_finite_loss");
  if (wrong != flight.end() && wrong->is_object()) {
    r->first_non_finite_loss_step = std::max<int64_t>(integer(*wrong, "step", -1), -1);
    r->first_non_finite_loss = text(*wrong, "value");
  }
  r->groups.clear();
  auto groups = flight.find("collectives");
  if (groups != flight.end() && groups->is_array()) {
    for (const nlohmann::json& g : *groups) {
      if (!g.is_object()) continue;
      r->groups.push_back(
          {text(g, "group"), integer(g, "entered", -1), integer(g, "returned", -1), text(g, "entered_name")});
    }
  }
  return true;
}

IncidentReport incident_report(const std::vector<IncidentRank>& ranks) {
  IncidentReport report;
  std::set<int> dumped;
  for (const IncidentRank& r : ranks) {
    dumped.insert(r.rank);
    report.world_size = std::max(report.world_size, r.world_size);
    if (r.rank == r.announced_by || report.trigger.empty()) {
      report.key = r.key;
      report.trigger = r.trigger;
      report.reason = r.reason;
      report.announced_by = r.announced_by;
    }
  }
  report.dumped.assign(dumped.begin(), dumped.end());
  for (int rank = 0; rank < report.world_size; ++rank) {
    if (dumped.count(rank) == 0) report.not_dumped.push_back(rank);
  }
  // Which rank's numbers went wrong first (their loss is reported per step).
  for (const IncidentRank& r : ranks) {
    int64_t step = r.first_non_finite_loss_step;
    if (step < 0) {
      report.finite_ranks.push_back(r.rank);
    } else if (report.first_non_finite_step < 0 || step < report.first_non_finite_step) {
      report.first_non_finite_step = step;
      report.first_non_finite_ranks = {r.rank};
    } else if (step == report.first_non_finite_step) {
      report.first_non_finite_ranks.push_back(r.rank);
    }
  }
  std::sort(report.first_non_finite_ranks.begin(), report.first_non_finite_ranks.end());
  std::sort(report.finite_ranks.begin(), report.finite_ranks.end());
  // Only a hung job stands still: in any other incident the ranks go on
  // while they dump, and one a collective ahead of the others is not stuck.
  if (report.trigger != "hang") return report;
  // Per group: each member's progress.
  std::map<std::string, std::map<int, const IncidentRank::Group*>> by_group;
  for (const IncidentRank& r : ranks) {
    for (const IncidentRank::Group& g : r.groups) by_group[g.group][r.rank] = &g;
  }
  for (const auto& [group, members] : by_group) {
    int64_t highest = -1;
    std::string name;
    for (const auto& [rank, g] : members) {
      if (g->entered > highest) {
        highest = g->entered;
        name = g->entered_name;
      }
    }
    StuckCollective s{group, highest, name, {}, {}, {}};
    for (const auto& [rank, g] : members) {
      if (g->entered == highest && g->returned < highest) {
        s.inside.push_back(rank);
      } else if (g->entered < highest) {
        s.missing.push_back(rank);
        s.their_last.push_back(g->entered);
      }
    }
    if (!s.inside.empty() && !s.missing.empty()) report.stuck.push_back(std::move(s));
  }
  return report;
}

std::string native_thread_stack(const std::string& native_stacks, int64_t tid, size_t frames) {
  std::string header = "thread " + std::to_string(tid) + " ";
  size_t at = native_stacks.starts_with(header) ? 0 : native_stacks.find("\n" + header);
  if (at == std::string::npos) return "";
  if (at != 0) ++at;
  size_t end = native_stacks.find("\nthread ", at + 1);
  std::string block = native_stacks.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
  return indented(block, frames + 1);
}

std::string incident_text(const IncidentReport& report, const std::vector<IncidentRank>& ranks) {
  std::string out = "Flight recorder incident '" + report.key + "': " + report.trigger +
                    ", announced by rank " + std::to_string(report.announced_by) + ": " + report.reason +
                    "\n";
  out += "Dumped: " + std::to_string(report.dumped.size()) + " of " + std::to_string(report.world_size) +
         " ranks (" + rank_list(report.dumped) + ")";
  if (!report.not_dumped.empty()) out += "; no dump from rank(s) " + rank_list(report.not_dumped);
  out += ".\n";
  if (report.first_non_finite_step >= 0) {
    out += "Non-finite loss: first at step " + std::to_string(report.first_non_finite_step) +
           ", on rank(s) " + rank_list(report.first_non_finite_ranks);
    if (!report.finite_ranks.empty())
      out += "; rank(s) " + rank_list(report.finite_ranks) + " still had a finite loss when they dumped";
    out += ".\n";
  }
  std::map<int, const IncidentRank*> by_rank;
  for (const IncidentRank& r : ranks) by_rank[r.rank] = &r;
  for (const StuckCollective& s : report.stuck) {
    out += "Stuck collective: " + s.name + " #" + std::to_string(s.sequence) + " of group '" + s.group +
           "': rank(s) " + rank_list(s.inside) + " entered it and wait inside; rank(s) " +
           rank_list(s.missing) + " never entered it.\n";
    for (size_t i = 0; i < s.missing.size() && i < 8; ++i) {
      int rank = s.missing[i];
      out += "Rank " + std::to_string(rank) + " (last collective entered in the group: " +
             (s.their_last[i] < 0 ? std::string("none") : "#" + std::to_string(s.their_last[i])) + ")";
      const IncidentRank* r = by_rank.count(rank) ? by_rank[rank] : nullptr;
      std::string stack;
      if (r != nullptr && !r->python_stacks.empty())
        stack += "  Python stacks:\n" + indented(r->python_stacks, kPythonLinesShown);
      if (r != nullptr && !r->native_stacks.empty()) {
        std::string main = native_thread_stack(r->native_stacks, r->pid, kFramesShown);
        if (!main.empty()) stack += "  main thread, native:\n" + main;
      }
      out += stack.empty() ? ": no stack in its dump.\n" : " was at:\n" + stack;
    }
  }
  if (report.trigger == "hang" && report.stuck.empty()) {
    out +=
        "No collective was entered by some ranks and not others (communication not followed: "
        "MPI through libtrainprof_mpi, torch.distributed with profile_communication).\n";
  }
  return out + "\n";
}

nlohmann::json incident_json(const IncidentReport& report) {
  nlohmann::json stuck = nlohmann::json::array();
  for (const StuckCollective& s : report.stuck) {
    stuck.push_back({{"group", s.group},
                     {"sequence", s.sequence},
                     {"name", s.name},
                     {"inside", s.inside},
                     {"missing", s.missing},
                     {"missing_last_entered", s.their_last}});
  }
  return {
      {"key", report.key},
      {"trigger", report.trigger},
      {"reason", report.reason},
      {"announced_by", report.announced_by},
      {"world_size", report.world_size},
      {"dumped", report.dumped},
      {"not_dumped", report.not_dumped},
      {"stuck_collectives", stuck},
      {"first_non_finite_loss_step",
       report.first_non_finite_step < 0 ? nlohmann::json() : nlohmann::json(report.first_non_finite_step)},
      {"first_non_finite_loss_ranks", report.first_non_finite_ranks}};
}

}  // namespace trainprof::analysis
