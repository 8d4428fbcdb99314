// Copyright trainprof authors. The critical path of each step on one rank:
// the chain of work that decided when the step ended, across the rank's
// host threads and GPU streams.
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

struct PathSegment {
  int64_t step = 0;
  PathKind kind = PathKind::kHost;
  uint32_t name = 0;  // string id ("" for untracked host time and queues)
  uint32_t tid = 0;   // host thread (OS id), 0 on a device
  int32_t device = -1;
  uint32_t stream = 0;
  uint64_t start_ns = 0;
  uint64_t dur_ns = 0;
};

// Collects what the walk needs as the windows pass (analysis/run_loader.h):
// each thread's outermost ranges and the thread of each step. The model's
// GPU activities, data stages and communication calls come from the scan.
class CriticalPathAccumulator {
 public:
  // Also sums, per outermost range, the time of the slices named `focus`
  // in it (the outermost of them), for a what-if on an operator that runs
  // inside other ranges (analysis/what_if.h). Call before the first window.
  void set_focus(std::string focus) { focus_ = std::move(focus); }
  void add_window(const TraceModel& model);
  // Every step's segments, in step order, each step's in time order.
  std::vector<PathSegment> finish(const TraceModel& model) const;

  struct Range {
    uint64_t start_ns;
    uint64_t end_ns;
    uint32_t name;
    bool data_wait;     // torch's DataLoader fetch
    uint64_t focus_ns;  // of the slices named as the focus in it (all of it when it is one)
  };
  const std::map<uint32_t, std::vector<Range>>& ranges() const { return outermost_; }
  const std::map<int64_t, uint32_t>& step_threads() const { return step_thread_; }

 private:
  std::string focus_;
  std::map<uint32_t, uint64_t> focus_end_;            // per thread: the open focus slice's end
  std::map<uint32_t, std::vector<Range>> outermost_;  // by thread, in start order
  std::map<uint32_t, uint64_t> open_end_;             // per thread: the open outermost range's end
  std::map<int64_t, uint32_t> step_thread_;
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
