// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Parsers of the /proc files the host sampler reads (proc(5)). Each takes the
// file's text as it was read (perhaps cut short by the reader's buffer) and
// returns false when what it needs is not there; none throws or allocates
// beyond its output vector, whatever the bytes (fuzz/proc_stats_fuzz.cc).
#ifndef TRAINPROF_COLLECTORS_SYSTEM_PROC_STATS_H_
#define TRAINPROF_COLLECTORS_SYSTEM_PROC_STATS_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace trainprof::system {

// Time a CPU spent, in clock ticks since boot.
struct CpuTicks {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};

// /proc/stat: the "cpu" line (all cores) and each "cpuN" line in order.
bool parse_proc_stat(std::string_view text, CpuTicks* all, std::vector<CpuTicks>* cores);

// /proc/self/stat: utime + stime (fields 14 and 15, counted after the
// command name, which may hold spaces and parentheses).
bool parse_process_cpu_ticks(std::string_view text, uint64_t* ticks);

// /proc/meminfo: MemTotal and MemAvailable, in KiB.
struct MemInfo {
  uint64_t total_kib = 0;
  uint64_t available_kib = 0;
};
bool parse_meminfo(std::string_view text, MemInfo* info);

// /proc/self/statm: resident pages (its second field).
bool parse_statm_resident_pages(std::string_view text, uint64_t* pages);

// /proc/diskstats: bytes read and written by whole disks (sectors of 512
// bytes); partitions (sda1 after sda, nvme0n1p2 after nvme0n1: the kernel
// lists each disk before its partitions), loop, ram, zram, md and
// device-mapper devices are left out so that no byte counts twice.
struct DiskBytes {
  uint64_t read = 0;
  uint64_t written = 0;
};
bool parse_diskstats(std::string_view text, DiskBytes* bytes);

// /proc/net/dev: bytes received and sent by every interface but lo.
struct NetBytes {
  uint64_t received = 0;
  uint64_t sent = 0;
};
bool parse_net_dev(std::string_view text, NetBytes* bytes);

}  // namespace trainprof::system

#endif  // TRAINPROF_COLLECTORS_SYSTEM_PROC_STATS_H_
