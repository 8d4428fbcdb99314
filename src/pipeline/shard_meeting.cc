// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "trainprof/shard_meeting.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "base/safe_file.h"

namespace trainprof {
namespace {

// Only characters that are safe in a file name.
std::string file_safe(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok =
        (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out.substr(0, 64);
}

// A shard number written by mark(): digits only, below `shards`.
bool parse_shard(const std::string& text, int shards, int* out) {
  if (text.empty() || text.size() > 9) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v >= shards) return false;
  *out = v;
  return true;
}

}  // namespace

ShardMeeting::ShardMeeting(const std::string& path, const std::string& job, int shards)
    : shards_(shards),
      name_(".analyse_mpi_" + file_safe(job)),
      output_dir_(path + "/cluster_analysis_output") {
  base::UniqueFd parent(base::open_directory_at(AT_FDCWD, path));
  if (!parent.valid()) {
    error_ = "cannot open " + path;
    return;
  }
  output_fd_ = base::make_directory_at(parent.get(), "cluster_analysis_output", output_dir_, &error_);
  if (output_fd_ < 0) return;
  meeting_fd_ = base::make_directory_at(output_fd_, name_, output_dir_ + "/" + name_, &error_);
  if (meeting_fd_ < 0 && error_.empty()) error_ = "cannot open " + output_dir_ + "/" + name_;
}

ShardMeeting::~ShardMeeting() {
  if (meeting_fd_ >= 0) close(meeting_fd_);
  if (output_fd_ >= 0) close(output_fd_);
}

std::string ShardMeeting::mark(int shard, bool succeeded, size_t runs) {
  if (!ok()) return error_;
  std::string marker = std::to_string(shard) + (succeeded ? ".done" : ".failed");
  return base::write_file_atomically_at(meeting_fd_, marker, std::to_string(runs) + "\n",
                                        output_dir_ + "/" + name_ + "/" + marker);
}

// Counted by a scan of the directory: one open per shard would cost as much
// at 1,000 shards and say less.
std::vector<bool> ShardMeeting::marked(int* failed) const {
  std::vector<bool> seen(static_cast<size_t>(shards_ > 0 ? shards_ : 0), false);
  *failed = 0;
  if (meeting_fd_ < 0) return seen;
  int fd = dup(meeting_fd_);
  if (fd < 0) return seen;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return seen;
  }
  rewinddir(d);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    bool failed_shard = name.ends_with(".failed");
    if (failed_shard) {
      name.resize(name.size() - 7);
    } else if (name.ends_with(".done")) {
      name.resize(name.size() - 5);
    } else {
      continue;
    }
    int shard = -1;
    if (parse_shard(name, shards_, &shard) && !seen[static_cast<size_t>(shard)]) {
      seen[static_cast<size_t>(shard)] = true;
      *failed += failed_shard ? 1 : 0;
    }
  }
  closedir(d);
  return seen;
}

namespace {
constexpr const char* kDecisionFile = "decision";
}  // namespace

ShardMeeting::Decision ShardMeeting::decide(Decision wanted, std::string* error) {
  error->clear();
  if (!ok()) {
    *error = error_;
    return Decision::kAlone;
  }
  // Created only where nothing is: of two processes deciding at once, one wins.
  bool existed = false;
  *error = base::write_file_if_absent_at(meeting_fd_, kDecisionFile,
                                         wanted == Decision::kSpread ? "spread\n" : "alone\n",
                                         output_dir_ + "/" + name_ + "/" + kDecisionFile, &existed);
  Decision d = decision();
  return d == Decision::kNone ? Decision::kAlone : d;
}

ShardMeeting::Decision ShardMeeting::decision() const {
  struct stat st {};
  // A place removed under its descriptor has no links left.
  if (meeting_fd_ < 0 || fstat(meeting_fd_, &st) != 0 || st.st_nlink == 0) return Decision::kAlone;
  if (fstatat(meeting_fd_, kDecisionFile, &st, AT_SYMLINK_NOFOLLOW) != 0) return Decision::kNone;
  // Only the file decide() writes can spread the pass: anything else found
  // there (planted, damaged) keeps the processes out of MPI.
  return base::read_regular_file_at(meeting_fd_, kDecisionFile, false) == "spread\n" ? Decision::kSpread
                                                                                     : Decision::kAlone;
}

void ShardMeeting::remove() {
  if (meeting_fd_ >= 0) {
    unlinkat(meeting_fd_, kDecisionFile, 0);
    for (int s = 0; s < shards_; ++s) {
      unlinkat(meeting_fd_, (std::to_string(s) + ".done").c_str(), 0);
      unlinkat(meeting_fd_, (std::to_string(s) + ".failed").c_str(), 0);
    }
    close(meeting_fd_);
    meeting_fd_ = -1;
  }
  if (output_fd_ >= 0) unlinkat(output_fd_, name_.c_str(), AT_REMOVEDIR);
}

}  // namespace trainprof
