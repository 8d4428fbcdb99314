// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What a change is worth before it is made: a recorded run's steps re-timed
// through the dependencies its critical path follows (each thread's order,
// launches, stream order, synchronizations), with some of their work made
// shorter.
//
//   trainprof::WhatIfRequest change;
//   change.faster = "aten::addmm";  // a range, operator or kernel name
//   change.speedup = 2.0;
//   trainprof::WhatIfReport r = trainprof::estimate_what_if("./run_trainprof", change);
//   if (!r.ok()) std::cerr << r.error << "\n";
//   std::cout << r.text;  // per step, recorded and estimated, and the median
//
// It reads the run's raw data (not its analysis); a run whose raw data was
// removed (--simplify) cannot be estimated. The estimate holds the rest of
// the step as recorded: work that would move into the freed time (another
// rank's, a loader's) is not invented.
#ifndef TRAINPROF_WHAT_IF_H_
#define TRAINPROF_WHAT_IF_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainprof {

struct WhatIfRequest {
  bool hide_data_wait = false;         // the loop never waits for a batch
  bool overlap_communication = false;  // communication calls and NCCL kernels cost the step nothing
  std::string faster;                  // every range, operator and kernel of this name ...
  double speedup = 2.0;                // ... runs this many times faster
};

struct WhatIfStep {
  int64_t step = 0;
  double recorded_ms = 0;
  double estimated_ms = 0;
};

struct WhatIfReport {
  std::string error;
  std::string change;  // "data wait hidden", "aten::addmm 2x faster", ...
  std::vector<WhatIfStep> steps;
  // The median of the steps at least half the median step long (the step
  // open at stop() left out), recorded and estimated.
  size_t steps_counted = 0;
  double median_step_ms = 0;
  double estimated_step_ms = 0;
  std::string text;  // what `trainprof whatif` prints
  bool ok() const { return error.empty(); }
};

WhatIfReport estimate_what_if(const std::string& run_dir, const WhatIfRequest& request);

}  // namespace trainprof

#endif  // TRAINPROF_WHAT_IF_H_
