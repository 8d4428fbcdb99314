// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/system/host_sampler.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "collectors/system/proc_stats.h"
#include "core/clock.h"
#include "core/collector.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "trainprof/range.h"

namespace trainprof::system {
namespace {

std::mutex g_stats_mu;
HostSamplerStats g_stats;  // guarded by g_stats_mu

// A /proc file kept open and read again from its start at each sample.
class ProcFile {
 public:
  explicit ProcFile(const char* path) : path_(path) {}
  ~ProcFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;

  bool ok() const { return fd_ != kFailed; }
  // The file's text, at most `buffer`'s size; "" when it cannot be read.
  // Opened at the first read: a part that was not asked for opens nothing.
  std::string_view read(std::vector<char>& buffer) {
    if (fd_ == kNotOpened) {
      fd_ = ::open(path_, O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) fail(std::strerror(errno));
    }
    if (fd_ < 0) return {};
    // From the start with read(), not pread() at growing offsets: proc
    // generates the text at each read from a new offset, so the read that
    // finds the end would cost as much as the first.
    if (::lseek(fd_, 0, SEEK_SET) != 0) {
      fail(std::strerror(errno));
      return {};
    }
    size_t size = 0;
    while (size < buffer.size()) {
      ssize_t n = ::read(fd_, buffer.data() + size, buffer.size() - size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        fail(std::strerror(errno));
        return {};
      }
      if (n == 0) break;
      size += static_cast<size_t>(n);
    }
    return {buffer.data(), size};
  }
  // Says once why this file's counters stop.
  void fail(const std::string& why) {
    base::log_warning(std::string("host_sys: cannot read ") + path_ + " (" + why +
                      "); its counters are not recorded");
    if (fd_ >= 0) ::close(fd_);
    fd_ = kFailed;
  }

 private:
  static constexpr int kNotOpened = -2, kFailed = -1;
  const char* path_;
  int fd_ = kNotOpened;
};

void record_counter(uint64_t ticks, const char* name, double value) {
  core::record_event_fields(ticks, std::bit_cast<uint64_t>(value), name,
                            static_cast<uint8_t>(raw::EventKind::kCounter), 0, 0, 0);
}

// One sampler thread's state: the files, the previous sample, the names.
class Sampling {
 public:
  explicit Sampling(const std::set<HostSystem>& parts)
      : cpu_(parts.count(HostSystem::Cpu) > 0),
        mem_(parts.count(HostSystem::Mem) > 0),
        disk_(parts.count(HostSystem::Disk) > 0),
        network_(parts.count(HostSystem::Network) > 0) {}

  void sample() {
    uint64_t ticks = detail::now_ticks();
    uint64_t wall = detail::monotonic_now_ns();
    double seconds = previous_wall_ == 0 ? 0 : static_cast<double>(wall - previous_wall_) * 1e-9;
    if (cpu_) sample_cpu(ticks, seconds);
    if (mem_) sample_memory(ticks);
    if (disk_) sample_disk(ticks, seconds);
    if (network_) sample_network(ticks, seconds);
    previous_wall_ = wall;
  }

 private:
  static double percent(uint64_t part, uint64_t whole) {
    return whole == 0 ? 0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  }
  static double per_second_mb(uint64_t now, uint64_t before, double seconds) {
    return now < before ? 0 : static_cast<double>(now - before) / seconds / 1e6;
  }

  void sample_cpu(uint64_t ticks, double seconds) {
    system::CpuTicks all;
    if (!system::parse_proc_stat(stat_.read(buffer_), &all, &cores_)) {
      if (stat_.ok()) stat_.fail("no cpu line");
      cpu_ = false;
      return;
    }
    uint64_t process = 0;
    bool have_process = system::parse_process_cpu_ticks(self_stat_.read(buffer_), &process);
    if (core_names_.size() != cores_.size()) {
      core_names_.clear();
      for (size_t i = 0; i < cores_.size(); ++i)
        core_names_.push_back(
            detail::intern(std::string(raw::kHostCpuCorePrefix) + std::to_string(i) + " (%)"));
    }
    if (seconds > 0) {
      record_counter(ticks, raw::kHostCpuCounter,
                     percent(all.busy - previous_all_.busy, all.total - previous_all_.total));
      for (size_t i = 0; i < cores_.size() && i < previous_cores_.size(); ++i) {
        record_counter(
            ticks, core_names_[i],
            percent(cores_[i].busy - previous_cores_[i].busy, cores_[i].total - previous_cores_[i].total));
      }
      if (have_process && have_previous_process_) {
        static const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
        record_counter(ticks, raw::kProcessCpuCounter,
                       100.0 * static_cast<double>(process - previous_process_) / ticks_per_second / seconds);
      }
    }
    previous_all_ = all;
    previous_cores_.swap(cores_);
    previous_process_ = process;
    have_previous_process_ = have_process;
  }

  void sample_memory(uint64_t ticks) {
    system::MemInfo info;
    if (system::parse_meminfo(meminfo_.read(buffer_), &info)) {
      record_counter(ticks, raw::kHostMemoryUsedCounter,
                     static_cast<double>(info.total_kib - info.available_kib) / 1024);
      record_counter(ticks, raw::kHostMemoryTotalCounter, static_cast<double>(info.total_kib) / 1024);
    }
    uint64_t pages = 0;
    if (system::parse_statm_resident_pages(statm_.read(buffer_), &pages)) {
      static const double page_bytes = static_cast<double>(sysconf(_SC_PAGESIZE));
      record_counter(ticks, raw::kProcessRssCounter,
                     static_cast<double>(pages) * page_bytes / (1024.0 * 1024.0));
    }
  }

  void sample_disk(uint64_t ticks, double seconds) {
    system::DiskBytes now;
    if (!system::parse_diskstats(diskstats_.read(buffer_), &now)) return;  // no disk: nothing to say
    if (seconds > 0 && have_disk_) {
      record_counter(ticks, raw::kDiskReadCounter, per_second_mb(now.read, disk_bytes_.read, seconds));
      record_counter(ticks, raw::kDiskWriteCounter, per_second_mb(now.written, disk_bytes_.written, seconds));
    }
    disk_bytes_ = now;
    have_disk_ = true;
  }

  void sample_network(uint64_t ticks, double seconds) {
    system::NetBytes now;
    if (!system::parse_net_dev(net_dev_.read(buffer_), &now)) return;  // only lo
    if (seconds > 0 && have_network_) {
      record_counter(ticks, raw::kNetworkReceiveCounter,
                     per_second_mb(now.received, network_bytes_.received, seconds));
      record_counter(ticks, raw::kNetworkSendCounter, per_second_mb(now.sent, network_bytes_.sent, seconds));
    }
    network_bytes_ = now;
    have_network_ = true;
  }

  bool cpu_, mem_, disk_, network_;
  // /proc/stat's intr line can be long: the cpu lines come first, and a
  // file cut at 256 KiB still holds them (a few thousand cores).
  std::vector<char> buffer_ = std::vector<char>(256 * 1024);
  ProcFile stat_{"/proc/stat"}, self_stat_{"/proc/self/stat"}, meminfo_{"/proc/meminfo"},
      statm_{"/proc/self/statm"}, diskstats_{"/proc/diskstats"}, net_dev_{"/proc/net/dev"};
  uint64_t previous_wall_ = 0;
  system::CpuTicks previous_all_;
  std::vector<system::CpuTicks> cores_, previous_cores_;
  std::vector<const char*> core_names_;
  uint64_t previous_process_ = 0;
  bool have_previous_process_ = false;
  system::DiskBytes disk_bytes_;
  bool have_disk_ = false;
  system::NetBytes network_bytes_;
  bool have_network_ = false;
};

class HostSampler final : public core::Collector {
 public:
  std::string_view name() const override { return "host_sys"; }

  void start(const ProfilerOptions& options) noexcept override {
    if (options.host_sys.empty()) return;
    if (thread_ != nullptr && owner_pid_ != getpid()) (void)thread_.release();  // a fork() child: none runs
    if (thread_ != nullptr) return;
    try {
      stopping_ = false;
      owner_pid_ = getpid();
      thread_ = std::make_unique<std::thread>(&HostSampler::run, this, options.host_sys,
                                              std::chrono::milliseconds(options.host_sys_interval_ms));
    } catch (const std::exception& e) {
      base::log_error(std::string("host_sys: cannot start the sampler thread: ") + e.what());
    }
  }

  void stop() noexcept override {
    if (thread_ == nullptr) return;
    if (owner_pid_ != getpid()) {
      (void)thread_.release();  // the parent's thread: never in this process
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_->join();
    thread_.reset();
  }

 private:
  void run(std::set<HostSystem> parts, std::chrono::milliseconds interval) {
    set_thread_name("trainprof host sampler");
    uint64_t wall_start = detail::monotonic_now_ns();
    uint64_t samples = 0;
    try {
      Sampling sampling(parts);
      std::unique_lock<std::mutex> lock(mu_);
      do {
        lock.unlock();
        sampling.sample();
        ++samples;
        lock.lock();
      } while (!wake_.wait_for(lock, interval, [this] { return stopping_; }));
      lock.unlock();
      // One more at stop: a run shorter than two intervals still has the
      // two samples that rates and percentages need.
      sampling.sample();
      ++samples;
    } catch (const std::exception& e) {
      base::log_error(std::string("host_sys: the sampler stopped: ") + e.what());
    }
    std::lock_guard<std::mutex> lock(g_stats_mu);
    g_stats = HostSamplerStats{samples, core::thread_cpu_ns(), detail::monotonic_now_ns() - wall_start};
  }

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  int owner_pid_ = 0;
  std::unique_ptr<std::thread> thread_;
};

__attribute__((constructor)) void register_host_sampler() {
  static HostSampler* sampler = new HostSampler();  // lives as long as the process
  core::register_collector(sampler);
}

}  // namespace

HostSamplerStats last_host_sampler_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return g_stats;
}

}  // namespace trainprof::system
