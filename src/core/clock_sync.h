// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How this process' wall clock relates to a reference rank's (clock alignment
// across ranks).
//
// A communication layer (libtrainprof_mpi) measures the offset at start and
// at stop with ping-pongs to the reference rank and adds each measurement
// here; every run's profiler_info.json carries them ("clock_sync"), and the
// runs this process closed before a later measurement are amended with it,
// so the analysis can interpolate the drift between the two.
//
// A front end that measures in the background (torch.distributed's store)
// also reports each exchange's start and end, so that a run closed while one
// runs, or one that failed, says so instead of silently having no points.
#ifndef TRAINPROF_CORE_CLOCK_SYNC_H_
#define TRAINPROF_CORE_CLOCK_SYNC_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainprof/frontend.h"

namespace trainprof::core {

// ClockSyncPoint, add_clock_sync_point and the exchanges' start and end:
// trainprof/frontend.h.

// {"reference_rank", "method", "points": [{"realtime_ns", "offset_ns",
// "error_ns"}]}, plus "exchanges": {"started", "running", "failed",
// "failures": [reasons]} once an exchange was reported; null when nothing
// was measured or started.
nlohmann::json clock_sync_json();

// A run this process closed (its directory), amended by later measurements.
void note_closed_run(const std::string& run_dir) noexcept;

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_CLOCK_SYNC_H_
