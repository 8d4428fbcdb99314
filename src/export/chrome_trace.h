// Copyright trainprof authors. trace_view.json: Chrome trace JSON in Kineto's
// schema (shared/REFERENCE.md section 4), streamed with a size limit.
#ifndef TRAINPROF_EXPORT_CHROME_TRACE_H_
#define TRAINPROF_EXPORT_CHROME_TRACE_H_

#include <cstdint>
#include <string>

#include "analysis/trace_model.h"
#include "export/output_file.h"

namespace trainprof::exporter {

struct ChromeTraceResult {
  std::string error;        // empty on success
  std::string cut_warning;  // set when whole steps were cut to fit the limit
  uint64_t bytes = 0;
  uint64_t events = 0;
};

// `trace_name` goes into traceName (the run directory's name: outputs do not
// depend on where the run is stored).
ChromeTraceResult write_chrome_trace(const analysis::TraceModel& model, const OutputPath& path,
                                     const std::string& trace_name, bool pretty, uint64_t size_limit_bytes);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORT_CHROME_TRACE_H_
