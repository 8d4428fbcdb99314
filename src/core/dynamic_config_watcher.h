// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The thread that watches profiler_config.json for a DynamicSchedule
// (include/trainprof/dynamic.h).
//
// Every poll interval it stats the file (size, times, inode: no read when
// nothing changed). A changed file is read once it has stayed the same for
// one poll interval (a tool writing it in place, in pieces, has finished),
// read whole, stat'ed again and taken only when the stats agree (never
// half applied), when its text differs from the last one taken, and when it
// parses; a bad one is reported, naming the field, and the config before it
// stays. Each accepted config bumps version(), which the training thread
// compares with what it has seen: one atomic load per step when nothing
// changed.
#ifndef TRAINPROF_CORE_DYNAMIC_CONFIG_WATCHER_H_
#define TRAINPROF_CORE_DYNAMIC_CONFIG_WATCHER_H_

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/safe_file.h"
#include "trainprof/dynamic.h"

namespace trainprof::core {

class DynamicConfigWatcher {
 public:
  // Creates `dir` (0700) and the default file when absent, then reads the
  // file once here, so that version() is 1 on return when it holds a valid
  // config. Throws std::invalid_argument when `dir` cannot be made or opened
  // (or is a symlink) or the interval is outside (0, 3600] s.
  DynamicConfigWatcher(const std::string& dir, double poll_interval_s);
  ~DynamicConfigWatcher();  // wakes and joins the thread (not in a fork() child: it has none)
  DynamicConfigWatcher(const DynamicConfigWatcher&) = delete;
  DynamicConfigWatcher& operator=(const DynamicConfigWatcher&) = delete;

  // Configs accepted so far: one atomic load, what a step reads.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // The newest config and, in *version, the version it is: read together,
  // so that a config published meanwhile is never taken under an older
  // version (and taken again at the next step).
  DynamicConfig latest(uint64_t* version = nullptr) const;

  // One look at the file (the thread's work; public for tests): a change is
  // taken at the second look that finds the file the same.
  void poll();

  // The longest file read: a config is a few hundred bytes.
  static constexpr off_t kMaxFileBytes = 1 << 20;

 private:
  // What changes when the file is written, replaced or touched.
  struct FileKey {
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = -1;
    timespec modified{};
    timespec changed{};
    mode_t type = 0;  // st_mode's file type, of what a symlink leads to
    bool operator==(const FileKey& other) const;
  };
  bool stat_file(FileKey* key);
  void look(bool settled);
  void report_not_regular(const FileKey& key);
  void create_default_file();
  void accept(const std::string& text);
  void run();

  std::string display_;  // the file's path, for messages
  base::UniqueFd dir_fd_;
  std::chrono::nanoseconds interval_;

  // Poll state: the thread's (and the constructor's) only.
  FileKey taken_;     // the version last read whole (or refused as too large)
  FileKey seen_;      // the version the last look found
  std::string text_;  // the text last parsed (accepted or reported)
  bool missing_reported_ = false;

  mutable std::mutex mu_;
  DynamicConfig latest_;              // guarded by mu_
  std::atomic<uint64_t> version_{0};  // written under mu_, with latest_

  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by wake_mu_
  int owner_pid_ = 0;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_DYNAMIC_CONFIG_WATCHER_H_
