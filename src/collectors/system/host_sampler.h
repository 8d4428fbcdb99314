// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The host system sampler (ProfilerOptions:: host_sys): a thread that, every
// host_sys_interval_ms while a session records, reads /proc and records
// counters, all of one sample at one timestamp:
//   cpu      "Host CPU (%)" (all cores), "Host CPU N (%)" per core,
//            "Process CPU (%)" (100 = one core busy)
//   mem      "Host memory used (MiB)" (MemTotal - MemAvailable),
//            "Host memory total (MiB)", "Process RSS (MiB)"
//   disk     "Disk read (MB/s)", "Disk write (MB/s)" (whole disks)
//   network  "Network receive (MB/s)", "Network send (MB/s)" (all but lo)
// A sample is taken at start, every interval and at stop; rates and
// percentages start with the second. A file that cannot
// be read is reported once and its counters stop; training never waits on
// the sampler, and stop() wakes it at once.
#ifndef TRAINPROF_COLLECTORS_SYSTEM_HOST_SAMPLER_H_
#define TRAINPROF_COLLECTORS_SYSTEM_HOST_SAMPLER_H_

#include <cstdint>

#include "raw/host_counters.h"  // the counter names

namespace trainprof::system {

// What the last sampler thread did (for the cost benchmark and tests).
struct HostSamplerStats {
  uint64_t samples = 0;
  uint64_t thread_cpu_ns = 0;  // the sampler thread's CPU time
  uint64_t wall_ns = 0;        // from its start to its stop
};
HostSamplerStats last_host_sampler_stats();

}  // namespace trainprof::system

#endif  // TRAINPROF_COLLECTORS_SYSTEM_HOST_SAMPLER_H_
