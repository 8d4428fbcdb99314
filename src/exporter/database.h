// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// PROFILER_OUTPUT/trainprof.db: one run's analysis as a SQLite database (export
// type "db"; docs/DB_SCHEMA.md).
//
// Fed like the timeline: slices window by window, then the rest at the end,
// all in one transaction with prepared statements. The file is made under a
// fresh temporary name in the output directory (base/safe_file.h) and
// renamed into place once complete, so a reader never opens half a database
// and a failed analysis leaves the previous one.
#ifndef TRAINPROF_EXPORTER_DATABASE_H_
#define TRAINPROF_EXPORTER_DATABASE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/trace_model.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

class DatabaseWriter {
 public:
  explicit DatabaseWriter(const OutputPath& path);
  ~DatabaseWriter();  // removes the temporary file unless finished
  DatabaseWriter(const DatabaseWriter&) = delete;
  DatabaseWriter& operator=(const DatabaseWriter&) = delete;

  // One window's own slices (ranges, operators, steps).
  void add_window(const analysis::TraceModel& m);

  // Strings, threads, steps and their breakdown, operator statistics,
  // memory (with the operator each report came from), data stages,
  // communication, Python stack samples and the functions outside
  // operators per step (`outside`, null: none), and run info; then commits
  // and renames into place. Returns "" or the first error.
  std::string finish(const analysis::TraceModel& m, const std::vector<analysis::StepTraceRow>& steps,
                     const std::vector<analysis::OpStatisticRow>& operators,
                     const std::vector<uint32_t>& memory_operators, const std::string& run_info_json,
                     const analysis::OutsideOperators* outside = nullptr);

  uint64_t rows() const { return rows_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t rows_ = 0;
};

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_DATABASE_H_
