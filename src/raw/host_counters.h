// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The names of the host_sys counters: the sampler
// (src/collectors/system/host_sampler.h) records them as COUNTER events, the
// analysis (src/analysis/host_usage.h) reads them back into host_*_usage.csv.
// Part of the raw format (docs/FORMAT.md): a run's counters with these names
// are the host sampler's.
#ifndef TRAINPROF_RAW_HOST_COUNTERS_H_
#define TRAINPROF_RAW_HOST_COUNTERS_H_

namespace trainprof::raw {

inline constexpr const char* kHostCpuCounter = "Host CPU (%)";
inline constexpr const char* kHostCpuCorePrefix = "Host CPU ";  // + N + " (%)"
inline constexpr const char* kProcessCpuCounter = "Process CPU (%)";
inline constexpr const char* kHostMemoryUsedCounter = "Host memory used (MiB)";
inline constexpr const char* kHostMemoryTotalCounter = "Host memory total (MiB)";
inline constexpr const char* kProcessRssCounter = "Process RSS (MiB)";
inline constexpr const char* kDiskReadCounter = "Disk read (MB/s)";
inline constexpr const char* kDiskWriteCounter = "Disk write (MB/s)";
inline constexpr const char* kNetworkReceiveCounter = "Network receive (MB/s)";
inline constexpr const char* kNetworkSendCounter = "Network send (MB/s)";

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_HOST_COUNTERS_H_
