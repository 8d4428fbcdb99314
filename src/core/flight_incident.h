// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Where the flight recorders of a job's ranks meet, so that when one of them
// dumps, every rank dumps the same steps.
//
// They meet through files under the recorders' output_path, which every
// rank must see (one machine, or a shared file system, as the runs of
// `trainprof analyse --mpi` must be):
//
//   .flight_incidents/{key}       an announcement: {"dir", "trigger", "rank"},
//                                 made atomically and never replaced: the
//                                 first rank to announce a key owns it
//   flight_incident_{stamp}_{key}/
//     {worker}_{stamp}_trainprof/ each rank's dump of the incident
//     .rank_{r}.dumped            that rank's dump is written (and analysed)
//     .cluster                    claimed by the rank that runs the cluster
//                                 pass on the incident
//     cluster_analysis_output/
//
// A key is the trigger and the step ("hang_29"): ranks that trigger alike
// (every rank of a hung job, ranks that all waited in a slow step) announce
// the same key, and all but the first join the first's incident.
#ifndef TRAINPROF_CORE_FLIGHT_INCIDENT_H_
#define TRAINPROF_CORE_FLIGHT_INCIDENT_H_

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace trainprof::core {

struct Incident {
  std::string key;
  std::string dir;         // absolute path of the incident's directory
  nlohmann::json trigger;  // the announcer's trigger object
  int announced_by = -1;   // its rank
};

class IncidentBoard {
 public:
  // `output_path`: where the recorders dump; `rank`: this process's.
  // Old announcements, which poll() never returns: with `since_realtime_ns`
  // 0 (a board made as its recorder starts), all those already there; else
  // (a board made later, once the world's size is known) those made over a
  // second before since_realtime_ns, the recorder's start (Unix time): a
  // file's time comes from a coarse clock, or from a file server's.
  IncidentBoard(const std::string& output_path, int rank, uint64_t since_realtime_ns);

  // The key of `trigger` ("{trigger}_{step}", made safe as a file name).
  static std::string key_of(const nlohmann::json& trigger);

  // Announces `trigger` under `key`. When another rank announced the key
  // first, its incident is the one returned (announced_by is that rank).
  // False, with `error`, when nothing could be made.
  bool announce(const std::string& key, const nlohmann::json& trigger, Incident* incident,
                std::string* error);

  // Incidents announced since the last poll (by any rank; the caller knows
  // which it took part in).
  std::vector<Incident> poll();

  // Notes this rank's dump of `incident` as written.
  void note_dumped(const Incident& incident);
  // The same; true when, with it,
  // `world_size` ranks have, and this call claimed the cluster pass.
  bool mark_dumped(const Incident& incident, int world_size);
  // Claims the cluster pass for the caller: false when a rank has already.
  static bool claim_cluster(const Incident& incident);
  // The ranks whose dumps of `incident` are written, ascending.
  static std::vector<int> dumped_ranks(const Incident& incident);

 private:
  bool read_announcement(const std::string& key, Incident* incident) const;

  std::string output_path_;    // absolute
  std::string incidents_dir_;  // output_path_/.flight_incidents
  int rank_;
  std::set<std::string> seen_;
};

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_FLIGHT_INCIDENT_H_
