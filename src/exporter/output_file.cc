// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/output_file.h"

#include "base/safe_file.h"
#include "base/write_all.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace trainprof::exporter {

OutputFile::OutputFile(OutputPath where) : where_(std::move(where)) {
  fd_ = base::create_temporary_at(where_.dir_fd, where_.name, &tmp_name_);
  if (fd_ < 0) {
    tmp_name_.clear();  // nothing of ours to remove
    fail("cannot create a temporary file for");
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_name_.empty()) unlinkat(where_.dir_fd, tmp_name_.c_str(), 0);
}

void OutputFile::fail(const std::string& what) {
  if (error_.empty()) error_ = what + " '" + where_.display() + "': " + std::strerror(errno);
}

void OutputFile::drain(std::string& buffer, size_t threshold) {
  if (buffer.size() < threshold) return;
  if (fd_ >= 0 && ok()) {
    size_t done = base::write_all(fd_, buffer.data(), buffer.size());
    if (done < buffer.size()) fail("cannot write");
    offset_ += done;
  }
  buffer.clear();
}

void OutputFile::truncate(uint64_t offset) {
  if (fd_ < 0 || !ok()) return;
  if (ftruncate(fd_, static_cast<off_t>(offset)) != 0 ||
      lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    fail("cannot truncate");
    return;
  }
  offset_ = offset;
}

bool OutputFile::commit(std::string& buffer) {
  drain(buffer, 0);
  if (fd_ >= 0) {
    if (::close(fd_) != 0) fail("cannot close");
    fd_ = -1;
  }
  if (!ok()) return false;
  // An earlier output is swapped out, not renamed over: replacing a file
  // with rename(2) makes ext4 write the new file's data back before the
  // call returns (its auto_da_alloc), which held a re-analysis for 70 ms per
  // 127 MB trace; an exchange is as atomic for readers and leaves the
  // write-back to the kernel's pace. The old data then goes with the
  // temporary name. (Only a regular file is exchanged: anything else at the
  // path is left to rename(2), which refuses a directory. A symlink at the
  // path is replaced, not followed.)
  int dir = where_.dir_fd;
  const char* name = where_.name.c_str();
  struct stat existing {};
  bool earlier_output = fstatat(dir, name, &existing, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(existing.st_mode);
  if (earlier_output && renameat2(dir, tmp_name_.c_str(), dir, name, RENAME_EXCHANGE) == 0) {
    unlinkat(dir, tmp_name_.c_str(), 0);
  } else if (renameat(dir, tmp_name_.c_str(), dir, name) != 0) {  // no earlier output, or no exchange here
    fail("cannot rename into place");
    return false;
  }
  committed_ = true;
  return true;
}

}  // namespace trainprof::exporter
