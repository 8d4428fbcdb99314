// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Which operator launched each GPU activity.
//
// A kernel, copy or set carries the correlation id of the runtime or driver
// call that launched it (CUPTI), and that call ran on a host thread inside
// the operators and ranges open there. The launcher is the innermost range
// or operator (steps excluded) on the calling thread that encloses the
// call's start: the operator whose work the device did. Kineto pushes an
// external correlation id per operator for the same purpose; reading the
// nesting from the timeline costs nothing while recording.
#ifndef TRAINPROF_ANALYSIS_GPU_LAUNCHES_H_
#define TRAINPROF_ANALYSIS_GPU_LAUNCHES_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// The launching calls by correlation id: a runtime call wins over the
// driver call it makes (both carry the id).
std::unordered_map<uint32_t, const GpuActivity*> launches_by_correlation(const TraceModel& m);

// A launch that ran something on a device: its calling thread (OS id), its
// start, and the device time of what it launched (a graph launch runs many).
struct DeviceLaunch {
  uint32_t thread;
  uint64_t start_ns;
  uint64_t device_ns;
  uint32_t correlation;
};
// The launches whose calling thread is known, by start.
std::vector<DeviceLaunch> device_launches(const TraceModel& m);

// Fed window by window (analysis/run_loader.h) like SelfTimeAccumulator:
// each thread's stack of open slices goes on from one window to the next,
// and each launch is placed when the walk passes its start.
class LaunchAttribution {
 public:
  explicit LaunchAttribution(const TraceModel& model);  // needs model.gpu
  void add_window(const TraceModel& model);
  // Fills TraceModel::launcher_by_correlation, device_self_by_key and
  // device_total_by_key.
  void finish(TraceModel& model);

 private:
  struct Launch {
    uint64_t start_ns;
    uint64_t device_ns;  // what it launched, summed (a graph launch runs many)
    uint32_t correlation;
  };
  struct Open {
    uint64_t end_ns;
    uint32_t key;
  };
  struct Thread {
    std::vector<Launch> launches;  // by start
    size_t next = 0;               // launches[0, next) are placed
    std::vector<Open> stack;
  };
  // Places the thread's launches that start before `until_ns`.
  void place(Thread& t, uint64_t until_ns);

  std::unordered_map<uint32_t, Thread> threads_;  // by OS tid
  std::unordered_map<uint32_t, uint32_t> launcher_;
  std::vector<uint64_t> self_ns_, total_ns_;
};

// The whole model as one window.
void attribute_launches(TraceModel& model);

// A kernel, copy or set that a CUDA graph launched was launched by the graph
// launch (cudaGraphLaunch, above), and made when the graph was captured: the
// operator open where its node was made (string id), or 0 when it was not
// from a graph, the node was not seen made, or no operator was open.
uint32_t graph_capture_operator(const TraceModel& model, const GpuActivity& activity);

// The GPU collector records the driver's memory reports (raw::
// kMemoryFromDriver) on CUPTI's thread; each is moved to the thread of the
// runtime or driver call that was running when the allocation or release
// happened (cudaMalloc, cudaFree, ...), so that memory attribution finds the
// operator that made it, as for the framework's own reports. Needs
// model.gpu and model.memory sorted by time (the scan's end).
void place_driver_memory_on_calling_threads(TraceModel& model);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_GPU_LAUNCHES_H_
