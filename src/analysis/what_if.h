// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What-if estimates: each step re-timed through the dependencies the critical
// path follows (analysis/critical_path.h), with some work made shorter, to say
// what a change is worth before it is made.
//
// The step's events are replayed in their recorded order. A piece of a
// host thread (an outermost range, a wait for data, a communication call,
// the step's thread's untracked time) starts when the piece before it on its
// thread ends, and lasts what it lasted, less what the change removes. A
// call blocked on the device ends when the activity it waited for ends, plus
// what it took after that. A kernel, copy or set starts when both the
// activity before it on its stream has ended and its launch has been made
// (the launch moves with the range it is in), plus the latency it had. A
// piece of another thread after idle time starts as much earlier or later
// as the step's thread has moved by then. With no change every step keeps
// its recorded length exactly.
#ifndef TRAINPROF_ANALYSIS_WHAT_IF_H_
#define TRAINPROF_ANALYSIS_WHAT_IF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/trace_model.h"

namespace trainprof::analysis {

struct WhatIf {
  bool hide_data_wait = false;         // the loop never waits for a batch
  bool overlap_communication = false;  // communication calls and NCCL kernels cost the step nothing
  // Ranges, operators and kernels of this name run `speedup` times faster
  // (operators inside other ranges: the accumulator's focus must be it).
  std::string faster;
  double speedup = 1.0;
};

// "data wait hidden", "communication overlapped", "NAME 2x faster".
std::string what_if_label(const WhatIf& change);

struct StepEstimate {
  int64_t step;
  uint64_t recorded_ns;
  uint64_t estimated_ns;
};

// Re-times each step the accumulator walks (add it with add_observer).
class WhatIfObserver : public StepObserver {
 public:
  // `pick_longest`: the change is the longest named range or device
  // activity on the first step's path made twice as fast (no estimate when
  // that path names none). `focused`: the accumulator's focus is
  // change.faster (it may run inside the path's ranges). A step whose path
  // the change does not touch keeps its length without being re-timed.
  explicit WhatIfObserver(WhatIf change, bool pick_longest = false, bool focused = false);
  void step(const PathGraph& graph, const StepWindow& step, uint32_t step_tid,
            const std::vector<PathSegment>& path) override;
  const WhatIf& change() const { return change_; }
  // In the order the steps were walked (their ends).
  const std::vector<StepEstimate>& estimates() const { return estimates_; }

 private:
  WhatIf change_;
  bool pick_longest_;
  bool focused_;
  bool faster_known_ = false;
  std::vector<uint32_t> faster_ids_;  // the string ids of change_.faster
  std::vector<StepEstimate> estimates_;
};

// The whole model as one window (its accumulator's focus: `focus`), in
// step order.
std::vector<StepEstimate> what_if(const TraceModel& model, const WhatIf& change,
                                  const std::string& focus = "");

// The median step, recorded and estimated (steps under half the median
// recorded length, as the one open at stop(), left out).
struct WhatIfSummary {
  size_t steps = 0;
  double recorded_ms = 0;
  double estimated_ms = 0;
};
WhatIfSummary summarize_what_if(const std::vector<StepEstimate>& steps);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_WHAT_IF_H_
