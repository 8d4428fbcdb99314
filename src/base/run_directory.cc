// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/run_directory.h"

#include "base/safe_file.h"

#include <errno.h>
#include <limits.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <string_view>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace trainprof::base {
namespace {

bool parse_int(const char* text, int* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > kMaxWorldSize) return false;
  *out = static_cast<int>(v);
  return true;
}

// Packed rank (low 32 bits) and world size (high), 0: not set; with the source.
std::atomic<uint64_t> g_runtime_rank{0};
std::atomic<const char*> g_runtime_source{nullptr};
// The runtime's job, read without a lock; every one published is kept (it
// is replaced rarely, if ever: a front end sets the same id again at each
// clock exchange), so that a reader never holds a freed one.
std::atomic<const JobInfo*> g_runtime_job{nullptr};
std::mutex g_runtime_jobs_mutex;
std::vector<std::unique_ptr<JobInfo>> g_runtime_jobs;  // their owners

}  // namespace

}  // namespace trainprof::base

namespace trainprof::detail {

void set_runtime_rank(int rank, int world_size, const char* source) noexcept {
  if (rank < 0 || world_size <= rank || world_size > base::kMaxWorldSize) return;
  base::g_runtime_source.store(source, std::memory_order_relaxed);
  base::g_runtime_rank.store(static_cast<uint64_t>(static_cast<uint32_t>(rank)) |
                                 static_cast<uint64_t>(static_cast<uint32_t>(world_size)) << 32,
                             std::memory_order_release);
}

}  // namespace trainprof::detail

namespace trainprof::base {

RankInfo detect_rank() {
  if (uint64_t packed = g_runtime_rank.load(std::memory_order_acquire); packed != 0) {
    RankInfo info;
    info.rank = static_cast<int>(packed & 0xffffffffu);
    info.world_size = static_cast<int>(packed >> 32);
    info.source = g_runtime_source.load(std::memory_order_relaxed);
    return info;
  }
  static const char* const kPairs[][2] = {
      {"RANK", "WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  RankInfo info;
  for (const auto& pair : kPairs) {
    int rank = 0;
    if (!parse_int(std::getenv(pair[0]), &rank)) continue;
    int world = rank + 1;
    parse_int(std::getenv(pair[1]), &world);
    info.rank = rank;
    info.world_size = world > rank ? world : rank + 1;
    info.source = pair[0];
    break;
  }
  return info;
}

JobInfo detect_job() {
  static const char* const kJobVariables[] = {
      "TRAINPROF_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
      "SLURM_JOB_ID",     "LSB_JOBID",           "PBS_JOBID",      "FLUX_JOB_ID"};
  JobInfo job;
  for (const char* name : kJobVariables) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    std::string_view id = value;
    if (std::string_view(name) == "TORCHELASTIC_RUN_ID" && id == "none") continue;  // torchrun's default
    job.id = id;
    job.source = name;
    if (const char* step = std::getenv("SLURM_STEP_ID");
        job.source == "SLURM_JOB_ID" && step != nullptr && *step != '\0') {
      job.id = job.id + "." + step;
      job.source += "+SLURM_STEP_ID";
    }
    job.id = clean_job_id(job.id);
    return job;
  }
  if (const JobInfo* runtime = g_runtime_job.load(std::memory_order_acquire); runtime != nullptr)
    return *runtime;
  return job;
}

void remember_runtime_job(const std::string& id, const std::string& source) {
  std::string clean = clean_job_id(id);
  std::lock_guard lock(g_runtime_jobs_mutex);
  const JobInfo* now = g_runtime_job.load(std::memory_order_acquire);
  if (clean.empty() || (now != nullptr && now->id == clean && now->source == source)) return;
  g_runtime_jobs.push_back(std::make_unique<JobInfo>(JobInfo{clean, source}));
  g_runtime_job.store(g_runtime_jobs.back().get(), std::memory_order_release);
}

std::string clean_job_id(std::string_view raw) {
  std::string id(raw.substr(0, kMaxJobIdBytes));
  for (char& c : id) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return id;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string local_stamp(uint64_t realtime_ns) {
  time_t secs = static_cast<time_t>(realtime_ns / 1000000000ull);
  unsigned millis = static_cast<unsigned>((realtime_ns / 1000000ull) % 1000);
  tm local{};
  localtime_r(&secs, &local);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d%02d%02d%02d%02d%02d%03u", local.tm_year + 1900, local.tm_mon + 1,
                local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec, millis);
  return stamp;
}

std::string run_directory_name(const std::string& prefix, uint64_t realtime_ns) {
  return prefix + "_" + local_stamp(realtime_ns) + "_trainprof";
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  std::string cwd(PATH_MAX, '\0');
  if (getcwd(cwd.data(), cwd.size()) == nullptr) return path;  // ERANGE, or cwd removed: relative it stays
  cwd.resize(std::strlen(cwd.c_str()));
  std::string_view rest = path;
  while (rest.size() >= 2 && rest.substr(0, 2) == "./") {
    rest.remove_prefix(2);
    while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  }
  if (rest == ".") rest = {};
  if (rest.empty()) return cwd;
  return cwd + (cwd.back() == '/' ? "" : "/") + std::string(rest);
}

std::string make_private_directories(const std::string& path) {
  if (path.empty()) return "output path is empty";
  std::string partial;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    partial = path.substr(0, next);
    pos = next + 1;
    if (partial.empty() || partial == "." || partial == "..") continue;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return "cannot create directory '" + partial + "': " + std::strerror(errno);
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return "'" + path + "' is not a directory";
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return "directory '" + path + "' is not writable: " + std::strerror(errno);
  }
  return "";
}

int create_run_directory(const std::string& parent, const std::string& prefix, std::string* path,
                         std::string* error) {
  *error = make_private_directories(parent);
  if (!error->empty()) return -1;
  // The parent is the user's choice and may be reached through symlinks;
  // below it nothing is followed.
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) {
    *error = "cannot open directory '" + parent + "': " + std::strerror(errno);
    return -1;
  }
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::string name = run_directory_name(prefix, now + attempt * 1000000ull);
    std::string dir = parent + "/" + name;
    if (mkdirat(parent_fd.get(), name.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      *error = "cannot create run directory '" + dir + "': " + std::strerror(errno);
      return -1;
    }
    // What was created is opened, not whatever was put at its name since:
    // a symlink is refused, and so is a directory someone else made.
    UniqueFd fd(open_directory_at(parent_fd.get(), name));
    struct stat st {};
    if (!fd.valid() || fstat(fd.get(), &st) != 0 || st.st_uid != geteuid()) {
      *error = "run directory '" + dir + "' was replaced after it was created; it is not used";
      return -1;
    }
    *path = dir;
    return fd.release();
  }
  *error = "no free run directory name under '" + parent + "'";
  return -1;
}

int take_recording_lock(int run_fd, std::string* error) {
  UniqueFd fd(::openat(run_fd, kRecordingLockName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid() || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    *error =
        std::string("cannot lock the run directory (") + kRecordingLockName + "): " + std::strerror(errno);
    return -1;
  }
  return fd.release();
}

bool run_is_being_recorded(int run_fd) {
  UniqueFd fd(open_regular_file_at(run_fd, kRecordingLockName, /*follow=*/false));
  if (!fd.valid()) return false;                              // a run recorded before locks, or never started
  if (flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;  // released with the descriptor
  return errno == EWOULDBLOCK;
}

}  // namespace trainprof::base
