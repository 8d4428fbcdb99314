// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trace_view.pftrace: the timeline as a Perfetto protobuf trace (Trace of
// TracePackets, perfetto/trace/*.proto), streamed window by window beside or
// instead of trace_view.json, with no size limit.
//
// Layout (docs/OUTPUTS.md): a track descriptor for the process and one per
// thread; each thread's slices on a packet sequence of its own, as
// SLICE_BEGIN / SLICE_END track events whose timestamps are deltas on an
// incremental clock and whose names are interned, so that a slice costs two
// small packets; forward-backward flows as flow ids on the two operators'
// begins; marks, counters (host counters, the allocator's totals per device),
// data-pipeline stages, communication calls and async ranges on sequence 1
// with absolute timestamps, on child tracks of their thread (lanes where they
// may overlap); GPU activities (CUPTI) there too, with interned names and
// debug annotations: kernels, copies and sets on a "stream s" child of a
// top-level "GPU d" track, runtime and driver calls on a "CUDA API" child of
// their thread, synchronizations (and calls of unknown threads) on the
// process's "CUDA API and synchronization" track, a flow from each launching
// call to what it launched; the Python package's stack samples as
// PerfSample packets whose interned callstacks Perfetto shows as a flame
// graph. Times are nanoseconds since the same base as the JSON trace.
#ifndef TRAINPROF_EXPORTER_PERFETTO_TRACE_H_
#define TRAINPROF_EXPORTER_PERFETTO_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/trace_model.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

struct PerfettoTraceResult {
  std::string error;  // empty on success
  uint64_t bytes = 0;
  uint64_t slices = 0;          // thread slices written (two packets each)
  uint64_t clamped_slices = 0;  // ended early to nest in their parent (a range that crossed it)
  uint64_t gpu_slices = 0;      // GPU activities written (CUPTI: kernels, copies, sets, calls, syncs)
  uint64_t stack_samples = 0;   // Python stack samples written (PerfSample packets)
};

class PerfettoTraceWriter {
 public:
  // `first_slice_ns`: the run's earliest slice start (the time base is the
  // earliest event, as in trace_view.json). `compress`: the packets go in
  // zlib-compressed batches (TracePacket.compressed_packets, which Perfetto
  // reads), about a quarter of the size.
  PerfettoTraceWriter(const analysis::TraceModel& model, const OutputPath& path, uint64_t first_slice_ns,
                      bool compress);
  ~PerfettoTraceWriter();
  PerfettoTraceWriter(const PerfettoTraceWriter&) = delete;
  PerfettoTraceWriter& operator=(const PerfettoTraceWriter&) = delete;

  // The window's own slices; slices still open at `end_ns` end in a later window.
  void add_window(const analysis::TraceModel& model, uint64_t end_ns);
  // The events the model holds whole, the open slices' ends; commits the file.
  // With the steps' critical path (analysis/critical_path.h) on a
  // "Critical path" track of the process: a slice per row (a run over its
  // span), as trace_view.json draws it.
  PerfettoTraceResult finish(const analysis::TraceModel& model,
                             const std::vector<analysis::PathSegment>& critical_path = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_PERFETTO_TRACE_H_
