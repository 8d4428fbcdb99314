// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Loading a run window by window, so that the analysis holds the slices of a
// few windows of time, not of the whole run.
//
// Pass 1 (scan) reads every raw file once and keeps what is small: strings,
// slice keys, steps, marks, counters, async ranges, data stages, memory
// reports, operator links, a sample of slice start times, and per raw chunk
// the range of start times of its slices. The longest slices (which can span
// many windows and, recorded when they end, arrive long after their start)
// are kept whole. Pass 2 (load) reads the files again and hands the slices
// over one window at a time: a window is complete, and handed over, as soon
// as the last chunk holding one of its slices has been read, so a window
// waits for at most a flush interval of later data.
//
// Each window's slices are in timeline order per thread, preceded by the
// slices of earlier windows still open at the window's start ("carried":
// ThreadSlices::first_own says where the window's own slices begin). Passes
// that need an enclosing range (step breakdown, memory attribution) see it;
// passes that count slices read from first_own, so that each slice counts
// once.
#ifndef TRAINPROF_ANALYSIS_RUN_LOADER_H_
#define TRAINPROF_ANALYSIS_RUN_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "analysis/trace_model.h"

namespace trainprof::analysis {

// Slices starting in [start_ns, end_ns).
struct Window {
  size_t index = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// Called with the model whose `threads` hold one window.
using WindowConsumer = std::function<void(TraceModel& model, const Window& window)>;

class RunLoader {
 public:
  RunLoader();
  ~RunLoader();
  RunLoader(const RunLoader&) = delete;
  RunLoader& operator=(const RunLoader&) = delete;

  // With more than one thread, each raw file is decoded on a thread of its
  // own while the calling thread takes its events (both passes). The
  // events, and so everything made of them, are the same.
  void use_threads(int threads);

  // Pass 1: fills everything of `model` but the slices (threads are created
  // and sorted, empty). Reader issues become warnings. Returns false and
  // sets `error` when a raw file cannot be read at all.
  bool scan(const std::string& run_dir, TraceModel* model, std::string* error);

  // Window boundaries for about `max_slices` slices a window (estimated from
  // the sample); one window when the run fits. Boundary i is window i's
  // start; the last is UINT64_MAX. Windows are cut by time alone: a step
  // may span several (the passes add up its parts).
  std::vector<uint64_t> plan_windows(uint64_t max_slices) const;

  // Pass 2: the slices of every window, in time order, to `consume`; only
  // those that TraceModel::selection keeps. After it the model's threads
  // hold the last window. Returns false and sets `error` when a raw file
  // that the scan read can no longer be read.
  bool load(TraceModel* model, const std::vector<uint64_t>& boundaries, const WindowConsumer& consume,
            std::string* error);

  // Slices and windows handed over by load().
  uint64_t slices_loaded() const;
  // Slices the scan found (what load() hands over without a selection).
  uint64_t slices_scanned() const;
  uint64_t windows_loaded() const;
  // The earliest slice start of the run (scan), UINT64_MAX if none.
  uint64_t earliest_slice_ns() const;

  struct State;  // run_loader.cc

 private:
  std::unique_ptr<State> state_;
};

// The whole run as one window (tests and small runs): scan, then load.
// Returns false and sets `error` when a raw file cannot be read at all.
bool build_model(const std::string& run_dir, TraceModel* model, std::string* error);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_RUN_LOADER_H_
