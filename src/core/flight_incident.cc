// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// core/flight_incident.h.
#include "core/flight_incident.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/json_limits.h"
#include "base/run_directory.h"
#include "base/safe_file.h"
#include "core/clock.h"

namespace trainprof::core {
namespace {

constexpr const char* kIncidentsDirName = ".flight_incidents";
constexpr const char* kClusterClaimName = ".cluster";
constexpr size_t kMaxKeyLength = 64;
constexpr uint64_t kClockSlackNs = 1'000'000'000;

// The names in `dir` (not "." and ".."; temporaries left out); empty when it cannot be read.
std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  int fd = base::open_directory_at(AT_FDCWD, dir);
  if (fd < 0) return names;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || base::is_temporary_name(name)) continue;
    names.push_back(std::move(name));
  }
  closedir(d);
  return names;
}

// Creates `name` in `dir` exclusively (never through a link). False when it was there, or cannot be made.
bool create_exclusively(const std::string& dir, const std::string& name) {
  base::UniqueFd dir_fd(base::open_directory_at(AT_FDCWD, dir));
  if (!dir_fd.valid()) return false;
  base::UniqueFd fd(
      ::openat(dir_fd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  return fd.valid();
}

}  // namespace

IncidentBoard::IncidentBoard(const std::string& output_path, int rank, uint64_t since_realtime_ns)
    : output_path_(base::absolute_path(output_path)),
      incidents_dir_(output_path_ + "/" + kIncidentsDirName),
      rank_(rank) {
  for (std::string& name : list_directory(incidents_dir_)) {
    struct stat st {};
    if (since_realtime_ns != 0 && ::stat((incidents_dir_ + "/" + name).c_str(), &st) == 0) {
      uint64_t made = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
                      static_cast<uint64_t>(st.st_mtim.tv_nsec);
      if (made + kClockSlackNs >= since_realtime_ns) continue;  // made since its recorder started
    }
    seen_.insert(std::move(name));
  }
}

std::string IncidentBoard::key_of(const nlohmann::json& trigger) {
  std::string name = trigger.value("trigger", std::string("request"));
  std::string key;
  for (char c : name) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    key += plain ? c : '_';
    if (key.size() == kMaxKeyLength - 24) break;
  }
  if (key.empty()) key = "request";
  auto step = trigger.find("step");
  if (step != trigger.end() && step->is_number_integer()) key += "_" + std::to_string(step->get<int64_t>());
  return key;
}

bool IncidentBoard::read_announcement(const std::string& key, Incident* incident) const {
  std::string text = base::read_regular_file_at(AT_FDCWD, incidents_dir_ + "/" + key, /*follow=*/false);
  nlohmann::json j;
  if (text.empty() || !base::parse_json_limited(text, &j).empty() || !j.is_object()) return false;
  std::string dir = j.value("dir", std::string());
  // Only a name under output_path: an announcement cannot send a dump elsewhere.
  if (dir.empty() || dir.find('/') != std::string::npos || dir == "." || dir == "..") return false;
  incident->key = key;
  incident->dir = output_path_ + "/" + dir;
  incident->trigger =
      j.contains("trigger") && j["trigger"].is_object() ? j["trigger"] : nlohmann::json::object();
  incident->announced_by = j.value("rank", -1);
  return true;
}

bool IncidentBoard::announce(const std::string& key, const nlohmann::json& trigger, Incident* incident,
                             std::string* error) {
  seen_.insert(key);
  if (read_announcement(key, incident)) return true;  // announced already: join it
  *error = base::make_private_directories(output_path_);
  if (!error->empty()) return false;
  base::UniqueFd incidents(base::make_directory_at(AT_FDCWD, incidents_dir_, incidents_dir_, error));
  if (!incidents.valid()) return false;
  // The directory first, then the announcement: a rank that reads it finds the directory.
  std::string dir_name = "flight_incident_" + base::local_stamp(detail::realtime_now_ns()) + "_" + key;
  std::string dir = output_path_ + "/" + dir_name;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create '" + dir + "': " + std::strerror(errno);
    return false;
  }
  nlohmann::json announcement = {{"dir", dir_name}, {"trigger", trigger}, {"rank", rank_}};
  bool existed = false;
  *error = base::write_file_if_absent_at(incidents.get(), key, announcement.dump() + "\n",
                                         incidents_dir_ + "/" + key, &existed);
  if (!error->empty()) {
    ::rmdir(dir.c_str());
    return false;
  }
  if (existed) {  // another rank was first: its incident
    ::rmdir(dir.c_str());
    if (read_announcement(key, incident)) return true;
    *error = "cannot read the announcement '" + incidents_dir_ + "/" + key + "'";
    return false;
  }
  incident->key = key;
  incident->dir = dir;
  incident->trigger = trigger;
  incident->announced_by = rank_;
  return true;
}

std::vector<Incident> IncidentBoard::poll() {
  std::vector<Incident> fresh;
  std::vector<std::string> names = list_directory(incidents_dir_);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (seen_.count(name) != 0) continue;
    Incident incident;
    if (!read_announcement(name, &incident)) continue;  // looked at again next time
    seen_.insert(name);
    fresh.push_back(std::move(incident));
  }
  return fresh;
}

void IncidentBoard::note_dumped(const Incident& incident) {
  create_exclusively(incident.dir, ".rank_" + std::to_string(rank_) + ".dumped");
}

bool IncidentBoard::mark_dumped(const Incident& incident, int world_size) {
  note_dumped(incident);
  if (static_cast<int>(dumped_ranks(incident).size()) < world_size) return false;
  return claim_cluster(incident);
}

bool IncidentBoard::claim_cluster(const Incident& incident) {
  return create_exclusively(incident.dir, kClusterClaimName);
}

std::vector<int> IncidentBoard::dumped_ranks(const Incident& incident) {
  std::vector<int> ranks;
  for (const std::string& name : list_directory(incident.dir)) {
    int rank = -1;
    char tail[8] = {};
    if (std::sscanf(name.c_str(), ".rank_%d.%7s", &rank, tail) == 2 && std::strcmp(tail, "dumped") == 0 &&
        rank >= 0) {
      ranks.push_back(rank);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

}  // namespace trainprof::core
