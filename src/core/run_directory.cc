// Copyright trainprof authors.
#include "core/run_directory.h"

#include "core/write_all.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace trainprof::detail {
namespace {

bool parse_int(const char* text, int* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000000) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

RankInfo detect_rank() {
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

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string run_directory_name(const std::string& prefix, uint64_t realtime_ns) {
  time_t secs = static_cast<time_t>(realtime_ns / 1000000000ull);
  unsigned millis = static_cast<unsigned>((realtime_ns / 1000000ull) % 1000);
  tm local{};
  localtime_r(&secs, &local);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d%02d%02d%02d%02d%02d%03u", local.tm_year + 1900, local.tm_mon + 1,
                local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec, millis);
  return prefix + "_" + stamp + "_trainprof";
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

std::string create_run_directory(const std::string& parent, const std::string& prefix, std::string* error) {
  *error = make_private_directories(parent);
  if (!error->empty()) return "";
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::string dir = parent + "/" + run_directory_name(prefix, now + attempt * 1000000ull);
    if (mkdir(dir.c_str(), 0700) == 0) return dir;
    if (errno != EEXIST) {
      *error = "cannot create run directory '" + dir + "': " + std::strerror(errno);
      return "";
    }
  }
  *error = "no free run directory name under '" + parent + "'";
  return "";
}

std::string write_file_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write '" + tmp + "': " + std::strerror(errno);
  if (detail::write_all(fd, text.data(), text.size()) < text.size()) {
    std::string err = "cannot write '" + tmp + "': " + std::strerror(errno);
    ::close(fd);
    return err;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  }
  return "";
}

}  // namespace trainprof::detail
