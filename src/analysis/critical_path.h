// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The critical path of each step on one rank: the chain of work that decided
// when the step ended, across the rank's host threads and GPU streams.
//
// It is found walking back from the step's end on the thread that ran the
// step. On a host thread the work before a moment is the outermost range
// there; a synchronization call (cudaDeviceSynchronize, a blocking copy, ...)
// that returned only when a device activity ended hands the walk to that
// activity; a kernel, copy or set was held either by the one before it on
// its stream or by its launch, whichever came later, and a launch hands the
// walk back to the host thread that made it. A thread's time outside every
// range is host work nobody named on the step's thread, and idleness on any
// other (the walk goes back to the step's thread). The loop's waits for data
// and its communication calls are their own kinds. The segments cover the
// step from its start to its end without gap or overlap.
#ifndef TRAINPROF_ANALYSIS_CRITICAL_PATH_H_
#define TRAINPROF_ANALYSIS_CRITICAL_PATH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// What a segment of the path is.
enum class PathKind : uint8_t {
  kHost,           // an outermost range or operator on a host thread
  kHostUntracked,  // the step's thread outside every range (Python, framework glue)
  kDataWait,       // the loop waiting for a batch
  kCommunication,  // a blocking communication call
  kSync,           // a host call waiting on the device, after the device finished
  kLaunch,         // from a launch call to its activity's start on the device
  kDevice,         // a kernel, copy or set
  kDeviceQueue,    // a stream between two activities, the next one already launched
};
// "host", "host untracked", "data wait", "communication", "sync", "launch",
// "device", "device queue".
const char* path_kind_name(PathKind kind);

// One row of the path: a segment, or a run of `count` alike segments (the
// same range on the same thread, one after another with only untracked host
// time between them, which is the next row: `host untracked`, its count the
// gaps), so that a step of thousands of small ranges stays a few rows.
struct PathSegment {
  int64_t step = 0;
  PathKind kind = PathKind::kHost;
  uint32_t name = 0;  // string id ("" for untracked host time and queues)
  uint32_t tid = 0;   // host thread (OS id), 0 on a device
  int32_t device = -1;
  uint32_t stream = 0;
  uint64_t start_ns = 0;
  uint64_t dur_ns = 0;   // the time on the path (of a run: its segments' sum)
  uint64_t span_ns = 0;  // from start to the end of its last segment
  uint32_t count = 1;
};

class PathGraph;  // analysis/path_graph.h

// Told of each step once its path is known, with what the path followed.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void step(const PathGraph& graph, const StepWindow& step, uint32_t step_tid,
                    const std::vector<PathSegment>& path) = 0;
};

// Collects what the walk needs as the windows pass (analysis/run_loader.h):
// each thread's outermost ranges and the thread of each step; the model's
// GPU activities, data stages and communication calls come from the scan.
// Each step is walked as soon as the windows reach its end, and the ranges
// no later step can reach are let go: memory follows the steps open at once,
// not the run.
class CriticalPathAccumulator {
 public:
  CriticalPathAccumulator();
  ~CriticalPathAccumulator();
  CriticalPathAccumulator(const CriticalPathAccumulator&) = delete;
  CriticalPathAccumulator& operator=(const CriticalPathAccumulator&) = delete;

  // Also sums, per outermost range, the time of the slices named `focus`
  // in it (the outermost of them), for a what-if on an operator that runs
  // inside other ranges (analysis/what_if.h). Call before the first window.
  void set_focus(std::string focus) { focus_ = std::move(focus); }
  // Told of every step, in the order their ends are reached. Not owned.
  void add_observer(StepObserver* observer) { observers_.push_back(observer); }
  // The window's own slices; then every step that ended by `window_end_ns`.
  void add_window(const TraceModel& model, uint64_t window_end_ns);
  // The steps left; every step's rows, in step order, each step's in time order.
  std::vector<PathSegment> finish(const TraceModel& model);

  struct Range {
    uint64_t start_ns;
    uint64_t end_ns;
    uint32_t name;
    bool data_wait;     // torch's DataLoader fetch
    uint64_t focus_ns;  // of the slices named as the focus in it (all of it when it is one)
  };

 private:
  void walk_steps(const TraceModel& model, uint64_t until_ns);
  // Whether string `name` is a torch.distributed call's, decided once per id.
  bool is_comm_caller_name(const TraceModel& model, uint32_t name);

  // A torch.distributed call seen in a window, for the graph
  // (PathGraph::add_comm_caller).
  struct Caller {
    uint64_t start_ns;
    uint32_t tid;
    uint32_t name;
  };
  static constexpr uint8_t kUnknown = 0, kYes = 1, kNo = 2;
  std::vector<uint8_t> caller_names_;  // by string id: kUnknown, kYes, kNo
  std::vector<Caller> callers_;        // since the last walk

  std::string focus_;
  std::vector<StepObserver*> observers_;
  std::map<uint32_t, uint64_t> focus_end_;            // per thread: the open focus slice's end
  std::map<uint32_t, std::vector<Range>> outermost_;  // by thread, in start order
  std::map<uint32_t, uint64_t> open_end_;             // per thread: the open outermost range's end
  std::map<int64_t, uint32_t> step_thread_;
  std::vector<StepWindow> by_end_;  // the steps not walked yet, by end
  bool steps_known_ = false;
  std::unique_ptr<PathGraph> graph_;
  std::vector<std::pair<int64_t, std::vector<PathSegment>>> walked_;  // per step
};

// The whole model as one window.
std::vector<PathSegment> critical_path(const TraceModel& model);

// Each kind's time on the path and the names that took most of it, over
// the steps given.
struct PathShare {
  PathKind kind;
  uint32_t name;
  uint64_t ns;
};
// Time on the path per (kind, name), largest first.
std::vector<PathShare> path_shares(const std::vector<PathSegment>& segments);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_CRITICAL_PATH_H_
