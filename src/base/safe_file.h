// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Files created and opened without following a planted path
// (docs/ARCHITECTURE.md, "Files and locks").
//
// Every file the profiler or the analyser creates is created relative to a
// directory descriptor opened O_DIRECTORY|O_NOFOLLOW, under a fresh temporary
// name (O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink or anything else already at
// that name is never opened), then renamed into place with renameat. A
// directory swapped for a symlink after it was opened no longer matters: the
// descriptor still names the directory that was opened. Inputs are opened
// only when they are regular files, so a FIFO or a device named by untrusted
// data cannot block or disturb the process.
#ifndef TRAINPROF_BASE_SAFE_FILE_H_
#define TRAINPROF_BASE_SAFE_FILE_H_

#include <unistd.h>

#include <string>

namespace trainprof::base {

// An owned file descriptor, closed at the end of its scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Opens the directory `name` under `dir_fd` (AT_FDCWD: the working
// directory) without following a symlink at its last component. -1 with
// errno (ELOOP or ENOTDIR for a symlink) on failure.
int open_directory_at(int dir_fd, const std::string& name);

// Creates (mkdirat, 0700; an existing one is fine) and opens the directory
// `name` under `dir_fd`. Returns -1 and sets `error` (naming `display`) when
// it cannot, or when a symlink or a non-directory is in the way.
int make_directory_at(int dir_fd, const std::string& name, const std::string& display, std::string* error);

// Creates a new, empty file (0600, O_WRONLY) in `dir_fd` under a fresh
// temporary name derived from `final_name` (".{final_name}.{random}.tmp"),
// set in `tmp_name`. Returns the descriptor, or -1 with errno.
int create_temporary_at(int dir_fd, const std::string& final_name, std::string* tmp_name);

// Whether `name` is a temporary name made by create_temporary_at.
bool is_temporary_name(const std::string& name);

// Writes `text` to `name` in `dir_fd` atomically (create_temporary_at, then
// renameat). `display` names the file in messages. Returns "" or the error.
// `mode`: the file's permissions (0644 for a file another user's program
// reads, such as a metrics file).
std::string write_file_atomically_at(int dir_fd, const std::string& name, const std::string& text,
                                     const std::string& display, unsigned mode = 0600);
// As write_file_atomically_at, but never replaces anything at `name`: when
// something is there (it may have appeared meanwhile: another process
// creating the same default file), nothing is written and *existed is set.
std::string write_file_if_absent_at(int dir_fd, const std::string& name, const std::string& text,
                                    const std::string& display, bool* existed);

// Opens `name` under `dir_fd` for reading only if it is a regular file: it is
// checked before opening (a device is never opened), opened O_NONBLOCK (a
// FIFO swapped in meanwhile cannot block) and checked again with fstat.
// `follow` = false refuses a symlink. Returns -1 with errno (EINVAL for a
// file that is not regular) on failure.
int open_regular_file_at(int dir_fd, const std::string& name, bool follow);

// The contents of `name` under `dir_fd` (AT_FDCWD: a path), read only if it
// is a regular file (open_regular_file_at); "" when it is not, or cannot be
// read. For files that a planted FIFO, device or symlink must not replace.
std::string read_regular_file_at(int dir_fd, const std::string& name, bool follow);

// Removes the leftovers of create_temporary_at in `dir_fd` (an analysis that
// was killed). Only call it while no one else writes there.
void remove_temporaries_at(int dir_fd);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_SAFE_FILE_H_
