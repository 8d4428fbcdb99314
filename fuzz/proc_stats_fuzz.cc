// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The host sampler's /proc parsers: whatever the bytes (a kernel's format we
// have not seen, a file cut short), each returns true or false and never reads
// outside the text or throws.
#include <cstdint>
#include <string_view>
#include <vector>

#include "collectors/system/proc_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  namespace system = trainprof::system;
  system::CpuTicks all;
  std::vector<system::CpuTicks> cores;
  system::parse_proc_stat(text, &all, &cores);
  uint64_t ticks = 0, pages = 0;
  system::parse_process_cpu_ticks(text, &ticks);
  system::MemInfo memory;
  system::parse_meminfo(text, &memory);
  system::parse_statm_resident_pages(text, &pages);
  system::DiskBytes disk;
  system::parse_diskstats(text, &disk);
  system::NetBytes net;
  system::parse_net_dev(text, &net);
  return 0;
}
