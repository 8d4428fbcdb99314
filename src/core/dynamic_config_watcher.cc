// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/dynamic_config_watcher.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "base/log.h"
#include "base/run_directory.h"

namespace trainprof::core {
namespace {

bool same_time(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// "a FIFO", "a directory", ...: what a file of st_mode type `type` is.
const char* file_kind(mode_t type) {
  switch (type) {
    case S_IFIFO: return "a FIFO";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool DynamicConfigWatcher::FileKey::operator==(const FileKey& other) const {
  return device == other.device && inode == other.inode && size == other.size &&
         same_time(modified, other.modified) && same_time(changed, other.changed) && type == other.type;
}

DynamicConfigWatcher::DynamicConfigWatcher(const std::string& dir, double poll_interval_s)
    : display_(dir + "/" + kDynamicConfigFileName) {
  if (dir.empty()) throw std::invalid_argument("DynamicProfilerMonitor: cfg_path must not be empty");
  if (!(poll_interval_s > 0 && poll_interval_s <= 3600)) {
    throw std::invalid_argument("DynamicProfilerMonitor: poll_interval must be in (0, 3600] seconds, got " +
                                std::to_string(poll_interval_s));
  }
  interval_ = std::chrono::nanoseconds(static_cast<int64_t>(poll_interval_s * 1e9));
  if (std::string error = base::make_private_directories(dir); !error.empty())
    throw std::invalid_argument("DynamicProfilerMonitor: cfg_path: " + error);
  dir_fd_.reset(base::open_directory_at(AT_FDCWD, dir));
  if (!dir_fd_.valid()) {
    throw std::invalid_argument("DynamicProfilerMonitor: cannot open cfg_path '" + dir +
                                "' as a directory (a symlink is refused): " + std::strerror(errno));
  }
  create_default_file();
  look(/*settled=*/true);  // no writer to wait for: it is read now
  owner_pid_ = getpid();
  thread_ = std::make_unique<std::thread>([this] { run(); });
}

DynamicConfigWatcher::~DynamicConfigWatcher() {
  if (thread_ == nullptr) return;
  if (getpid() != owner_pid_) {
    // A fork() child's copy: the thread was never there. Joining would
    // wait forever and destroying a joinable std::thread aborts, so the
    // object is left alone.
    (void)thread_.release();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_->join();
}

DynamicConfig DynamicConfigWatcher::latest(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version != nullptr) *version = version_.load(std::memory_order_relaxed);
  return latest_;
}

void DynamicConfigWatcher::create_default_file() {
  bool existed = false;
  std::string error = base::write_file_if_absent_at(dir_fd_.get(), kDynamicConfigFileName,
                                                    default_dynamic_config(), display_, &existed);
  if (!error.empty()) {
    base::log_warning("DynamicProfilerMonitor: " + error + "; write the file yourself to start a collection");
  } else if (!existed) {
    base::log_info("DynamicProfilerMonitor: created " + display_ +
                   " (edit start_step and stop_step to collect)");
  }
}

bool DynamicConfigWatcher::stat_file(FileKey* key) {
  struct stat st {};
  if (fstatat(dir_fd_.get(), kDynamicConfigFileName, &st, 0) != 0) return false;
  *key = FileKey{st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim, st.st_mode & S_IFMT};
  return true;
}

void DynamicConfigWatcher::poll() {
  look(/*settled=*/false);
}

void DynamicConfigWatcher::look(bool settled) {
  FileKey now;
  if (!stat_file(&now)) {
    if (!missing_reported_) {
      base::log_warning("DynamicProfilerMonitor: " + display_ + " is gone (" + std::strerror(errno) +
                        "); the config before it stays");
      missing_reported_ = true;
    }
    taken_ = seen_ = FileKey{};
    return;
  }
  missing_reported_ = false;
  if (now == taken_) return;  // the common case: nothing read
  if (!S_ISREG(now.type)) {
    // Never opened (a FIFO would block, a device could be endless): said
    // once for each change, as a bad config is.
    report_not_regular(now);
    taken_ = seen_ = now;
    return;
  }
  // A changed file is taken once it has stayed the same for a poll
  // interval: an editor or a tool writing it in place, even in pieces with
  // pauses, has finished by then.
  bool stable = settled || now == seen_;
  seen_ = now;
  if (!stable) return;
  if (now.size > kMaxFileBytes) {
    base::log_warning("DynamicProfilerMonitor: " + display_ + " is " + std::to_string(now.size) +
                      " bytes, more than a config can be; ignored");
    taken_ = now;
    return;
  }
  std::string text = base::read_regular_file_at(dir_fd_.get(), kDynamicConfigFileName, /*follow=*/true);
  FileKey after;
  if (!stat_file(&after) || !(after == now)) return;  // written meanwhile: looked at again
  taken_ = now;
  if (text == text_) return;  // saved again unchanged, or touched
  text_ = text;
  try {
    DynamicConfig config = parse_dynamic_config(text);
    if (!config.ignored.empty()) {
      base::log_warning("DynamicProfilerMonitor: " + display_ +
                        ": no effect here: " + joined(config.ignored));
    }
    if (!config.unknown.empty()) {
      base::log_warning("DynamicProfilerMonitor: " + display_ + ": unknown field(s) " +
                        joined(config.unknown) +
                        ", not read; the fields are: " + joined(dynamic_config_fields()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = std::move(config);
    version_.fetch_add(1, std::memory_order_release);
  } catch (const std::invalid_argument& e) {
    base::log_warning(std::string("DynamicProfilerMonitor: ") + e.what() + "; the config before it stays");
  }
}

void DynamicConfigWatcher::report_not_regular(const FileKey& key) {
  std::string what = file_kind(key.type);
  // Only for the message: what the name is, beside what it leads to.
  struct stat link {};
  if (fstatat(dir_fd_.get(), kDynamicConfigFileName, &link, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(link.st_mode)) {
    what = "a symlink to " + what;
  }
  base::log_warning("DynamicProfilerMonitor: " + display_ + " is " + what +
                    ", not a regular file: not read; the config before it stays");
}

void DynamicConfigWatcher::run() {
  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    try {
      poll();
    } catch (const std::exception& e) {  // out of memory, at worst: the next poll tries again
      base::log_error(std::string("DynamicProfilerMonitor: watching ") + display_ + " failed: " + e.what());
    }
    lock.lock();
  }
}

}  // namespace trainprof::core
