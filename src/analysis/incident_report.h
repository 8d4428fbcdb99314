// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The flight recorder's incident of all ranks, from their dumps: who announced
// it and why, which ranks dumped, and for a job that stopped in a collective,
// the collective (group, sequence number) some ranks entered and others did
// not, with the missing ranks' stacks.
//
// Each dump says how far its rank got in each group's collectives (the last
// entered, the last returned). Members call a group's collectives in the
// same order, so the highest sequence entered in a group is one collective:
// the ranks inside it (entered, not returned) wait for the members that
// never entered it, which are the ranks to look at. Only in a hang: in any
// other incident the ranks go on while they dump, and their progress
// differs by the moment each one dumped.
#ifndef TRAINPROF_ANALYSIS_INCIDENT_REPORT_H_
#define TRAINPROF_ANALYSIS_INCIDENT_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainprof::analysis {

// One rank's dump of the incident.
struct IncidentRank {
  int rank = 0;
  int64_t pid = 0;
  std::string run_dir;
  std::string trigger;  // the incident's ("hang", "slow_step", ...)
  std::string reason;   // as this rank's dump says it
  int announced_by = -1;
  int world_size = 1;
  std::string key;
  struct Group {
    std::string group;
    int64_t entered = -1;
    int64_t returned = -1;
    std::string entered_name;
  };
  std::vector<Group> groups;
  std::string python_stacks;  // hang_stacks.txt (faulthandler's text), or ""
  std::string native_stacks;  // native_stacks.txt, or ""
  // The first step whose loss this rank saw NaN or infinite by its dump
  // (-1: none), and that loss ("nan", "inf").
  int64_t first_non_finite_loss_step = -1;
  std::string first_non_finite_loss;
};

// What the ranks' dumps say of `flight_recorder` objects; false when the
// object is not an incident's (a rank's own dump).
bool parse_incident_rank(const nlohmann::json& flight_recorder, IncidentRank* rank);

struct StuckCollective {
  std::string group;
  int64_t sequence = 0;
  std::string name;                 // the call ("MPI_Allreduce", "allreduce")
  std::vector<int> inside;          // entered it, not returned
  std::vector<int> missing;         // members that never entered it
  std::vector<int64_t> their_last;  // each missing rank's last entered (-1: none), as `missing`
};

struct IncidentReport {
  std::string key, trigger, reason;
  int announced_by = -1;
  int world_size = 0;
  std::vector<int> dumped;      // ranks with a dump in the incident
  std::vector<int> not_dumped;  // of the world, without one
  std::vector<StuckCollective> stuck;
  // A wrong number: the first step a loss went non-finite, on which ranks;
  // the ranks whose loss was still finite when they dumped.
  int64_t first_non_finite_step = -1;
  std::vector<int> first_non_finite_ranks;
  std::vector<int> finite_ranks;
};

IncidentReport incident_report(const std::vector<IncidentRank>& ranks);

// The report's text (what straggler_report.txt begins with); `ranks` gives
// the missing ranks' stacks.
std::string incident_text(const IncidentReport& report, const std::vector<IncidentRank>& ranks);
nlohmann::json incident_json(const IncidentReport& report);

// The frames of the thread `tid` in native_stacks.txt's text (its header
// and up to `frames` frames), or "".
std::string native_thread_stack(const std::string& native_stacks, int64_t tid, size_t frames);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_INCIDENT_REPORT_H_
