// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "base/write_all.h"

namespace trainprof::base {
namespace {

constexpr const char* kTemporarySuffix = ".tmp";
constexpr size_t kRandomDigits = 16;

// 64 unpredictable bits: a name planted in advance then only costs a retry.
uint64_t random_bits() {
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof(bits), GRND_NONBLOCK) == static_cast<ssize_t>(sizeof(bits))) return bits;
  static std::atomic<uint64_t> counter{0};
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (static_cast<uint64_t>(ts.tv_nsec) * 0x9E3779B97F4A7C15ull) ^
         (static_cast<uint64_t>(getpid()) << 40) ^ counter.fetch_add(1, std::memory_order_relaxed);
}

std::string temporary_name(const std::string& final_name) {
  char digits[kRandomDigits + 1];
  std::snprintf(digits, sizeof(digits), "%016llx", static_cast<unsigned long long>(random_bits()));
  return "." + final_name + "." + digits + kTemporarySuffix;
}

}  // namespace

int open_directory_at(int dir_fd, const std::string& name) {
  return ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int make_directory_at(int dir_fd, const std::string& name, const std::string& display, std::string* error) {
  if (mkdirat(dir_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create directory '" + display + "': " + std::strerror(errno);
    return -1;
  }
  int fd = open_directory_at(dir_fd, name);
  if (fd >= 0) return fd;
  if (errno == ELOOP || errno == ENOTDIR) {
    *error = "'" + display + "' is a symlink or not a directory; it is not followed (remove it)";
  } else {
    *error = "cannot open directory '" + display + "': " + std::strerror(errno);
  }
  return -1;
}

int create_temporary_at(int dir_fd, const std::string& final_name, std::string* tmp_name) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp_name = temporary_name(final_name);
    int fd = ::openat(dir_fd, tmp_name->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno is EEXIST
}

bool is_temporary_name(const std::string& name) {
  size_t suffix = std::strlen(kTemporarySuffix);
  // "." + at least one character + "." + digits + suffix
  if (name.size() < 3 + kRandomDigits + suffix || name[0] != '.' || !name.ends_with(kTemporarySuffix)) {
    return false;
  }
  size_t digits = name.size() - suffix - kRandomDigits;
  if (name[digits - 1] != '.') return false;
  for (size_t i = digits; i < digits + kRandomDigits; ++i) {
    if (std::strchr("0123456789abcdef", name[i]) == nullptr) return false;
  }
  return true;
}

namespace {

// A fresh temporary file in `dir_fd` holding `text`, closed; its name in
// `tmp`. Returns "" or the error (the temporary is then gone).
std::string write_temporary_at(int dir_fd, const std::string& name, const std::string& text,
                               const std::string& display, std::string* tmp, unsigned mode = 0600) {
  UniqueFd fd(create_temporary_at(dir_fd, name, tmp));
  if (!fd.valid()) return "cannot create a temporary file for '" + display + "': " + std::strerror(errno);
  if (mode != 0600 && ::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    std::string error = "cannot set the permissions of '" + display + "': " + std::strerror(errno);
    unlinkat(dir_fd, tmp->c_str(), 0);
    return error;
  }
  if (write_all(fd.get(), text.data(), text.size()) < text.size() || ::close(fd.release()) != 0) {
    std::string error = "cannot write '" + display + "': " + std::strerror(errno);
    unlinkat(dir_fd, tmp->c_str(), 0);
    return error;
  }
  return "";
}

}  // namespace

std::string write_file_atomically_at(int dir_fd, const std::string& name, const std::string& text,
                                     const std::string& display, unsigned mode) {
  std::string tmp;
  if (std::string error = write_temporary_at(dir_fd, name, text, display, &tmp, mode); !error.empty())
    return error;
  // renameat replaces whatever is at `name` (a symlink itself, not its target).
  if (renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    std::string error = "cannot rename a temporary file to '" + display + "': " + std::strerror(errno);
    unlinkat(dir_fd, tmp.c_str(), 0);
    return error;
  }
  return "";
}

std::string write_file_if_absent_at(int dir_fd, const std::string& name, const std::string& text,
                                    const std::string& display, bool* existed) {
  *existed = false;
  std::string tmp;
  if (std::string error = write_temporary_at(dir_fd, name, text, display, &tmp); !error.empty()) return error;
  // linkat, unlike renameat, fails on anything already at `name`: a file
  // another process wrote meanwhile is never replaced.
  int linked = linkat(dir_fd, tmp.c_str(), dir_fd, name.c_str(), 0);
  int link_errno = errno;
  unlinkat(dir_fd, tmp.c_str(), 0);
  if (linked == 0) return "";
  if (link_errno == EEXIST) {
    *existed = true;
    return "";
  }
  return "cannot create '" + display + "': " + std::strerror(link_errno);
}

int open_regular_file_at(int dir_fd, const std::string& name, bool follow) {
  int no_follow = follow ? 0 : AT_SYMLINK_NOFOLLOW;
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, no_follow) != 0) return -1;
  if (!S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return -1;
  }
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // swapped after the first check
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

std::string read_regular_file_at(int dir_fd, const std::string& name, bool follow) {
  std::string text;
  UniqueFd fd(open_regular_file_at(dir_fd, name, follow));
  if (!fd.valid()) return text;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  return text;
}

void remove_temporaries_at(int dir_fd) {
  int scan_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (scan_fd < 0) return;
  DIR* dir = fdopendir(scan_fd);
  if (dir == nullptr) {
    ::close(scan_fd);
    return;
  }
  while (dirent* e = readdir(dir)) {
    // unlinkat removes a symlink itself, never its target.
    if (is_temporary_name(e->d_name)) unlinkat(dir_fd, e->d_name, 0);
  }
  closedir(dir);
}

}  // namespace trainprof::base
