// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The GPU collector: CUPTI's activity API.
//
// On when a session's activities include Activity::GPU. It loads libcupti
// (cupti_library.h), enables kernels, copies, sets, runtime and driver calls
// and synchronizations, and records what CUPTI's completed buffers hold
// (activity_records.h) on the host clock (gpu_clock.h). Without libcupti, or
// when CUPTI cannot start (no GPU, no driver), it says so once per process
// and the session goes on without GPU activity.
#ifndef TRAINPROF_COLLECTORS_CUPTI_CUPTI_COLLECTOR_H_
#define TRAINPROF_COLLECTORS_CUPTI_CUPTI_COLLECTOR_H_

#include <cstdint>
#include <string>

namespace trainprof::cupti {

struct CuptiStats {
  bool active = false;    // CUPTI recorded during the last session
  std::string why_not;    // when it did not: the reason
  std::string library;    // the libcupti used ("" when none was loaded)
  uint64_t buffers = 0;   // completed buffers
  uint64_t records = 0;   // records walked
  uint64_t recorded = 0;  // recorded as GPU activities
  uint64_t dropped = 0;   // records CUPTI dropped (no buffer) as it reported them
  uint64_t sync_points = 0;
};

// Of the last session that asked for GPU activity (tests, output info).
CuptiStats last_cupti_stats();

// At most this many activity buffers (of kBufferBytes) are handed to CUPTI
// at once; past that CUPTI drops records and counts them.
inline constexpr size_t kBufferBytes = 4u << 20;
inline constexpr size_t kMaxBuffers = 64;

}  // namespace trainprof::cupti

#endif  // TRAINPROF_COLLECTORS_CUPTI_CUPTI_COLLECTOR_H_
