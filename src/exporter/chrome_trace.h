// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trace_view.json: Chrome trace JSON in Kineto's schema (docs/OUTPUTS.md),
// streamed with a size limit.
#ifndef TRAINPROF_EXPORTER_CHROME_TRACE_H_
#define TRAINPROF_EXPORTER_CHROME_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "analysis/critical_path.h"
#include "analysis/trace_model.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

struct ChromeTraceResult {
  std::string error;        // empty on success
  std::string cut_warning;  // set when whole steps were cut to fit the limit
  uint64_t bytes = 0;
  uint64_t events = 0;
};

// Writes trace_view.json window by window (analysis/run_loader.h): the
// header and thread metadata first, then each window's slices merged in time
// order with the run's other events (marks, counters, async ranges, data
// stages, memory, fwdbwd flows), which the model holds whole. `trace_name`
// goes into traceName (the run directory's name: outputs do not depend on
// where the run is stored); `first_slice_ns` is the run's earliest slice
// start (the time base is the earliest event).
class ChromeTraceWriter {
 public:
  ChromeTraceWriter(const analysis::TraceModel& model, const OutputPath& path, const std::string& trace_name,
                    bool pretty, uint64_t size_limit_bytes, uint64_t first_slice_ns);
  ~ChromeTraceWriter();
  ChromeTraceWriter(const ChromeTraceWriter&) = delete;
  ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;

  // The window's own slices, and the other events that start before `end_ns`.
  void add_window(const analysis::TraceModel& model, uint64_t end_ns);
  // The remaining events, the cut when the limit was reached, and unless
  // cut the steps' critical path (analysis/critical_path.h): a "Critical
  // path" track of its segments, with a flow arrow on the threads' and
  // streams' own tracks wherever the path moves between them; commits the
  // file.
  ChromeTraceResult finish(const std::vector<analysis::PathSegment>& critical_path = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The whole model as one window.
ChromeTraceResult write_chrome_trace(const analysis::TraceModel& model, const OutputPath& path,
                                     const std::string& trace_name, bool pretty, uint64_t size_limit_bytes);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CHROME_TRACE_H_
