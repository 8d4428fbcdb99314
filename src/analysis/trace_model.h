// Copyright trainprof authors. The analysis model: one run's events, columnar
// enough to sort and scan, with names interned once.
#ifndef TRAINPROF_ANALYSIS_TRACE_MODEL_H_
#define TRAINPROF_ANALYSIS_TRACE_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "raw/raw_reader.h"

namespace trainprof::analysis {

enum class SliceKind : uint8_t {
  kStep,       // ProfilerStep#N
  kUserRange,  // TRAINPROF_RANGE / Range
};

// A complete range on one thread. Times are CLOCK_MONOTONIC ns. 32 bytes:
// the model holds one per range, so its size bounds the analysis's memory.
struct Slice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t self_ns = 0;  // end - start minus direct children (compute_self_times)
  uint32_t tid = 0;
  uint32_t name : 31 = 0;    // TraceModel::strings index
  uint32_t is_step : 1 = 0;  // ProfilerStep#N (else a user range)
  uint64_t duration() const { return end_ns - start_ns; }
  SliceKind kind() const { return is_step ? SliceKind::kStep : SliceKind::kUserRange; }
};
static_assert(sizeof(Slice) == 32, "Slice is the model's per-range cost");

struct Instant {
  uint64_t ts_ns;
  uint32_t tid;
  uint32_t name;
  uint32_t domain;
};

struct CounterSample {
  uint64_t ts_ns;
  uint32_t tid;
  uint32_t name;
  double value;
};

// range_start / range_end pair (may cross threads).
struct AsyncRange {
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t begin_tid;
  uint32_t name;
  uint32_t domain;
  uint64_t id;
};

struct StepWindow {
  int64_t number;
  uint64_t start_ns;
  uint64_t end_ns;
};

struct TraceModel {
  int rank = 0;
  int world_size = 1;
  std::string host;
  uint32_t pid = 0;
  int64_t realtime_offset_ns = 0;  // realtime = monotonic + offset
  uint64_t session_start_ns = 0;   // monotonic ns of the run's first anchor

  std::vector<std::string> strings;  // index 0 is ""
  std::map<uint32_t, std::string> thread_names;
  std::vector<Slice> slices;
  std::vector<Instant> instants;
  std::vector<CounterSample> counters;
  std::vector<AsyncRange> async_ranges;
  std::vector<StepWindow> steps;  // sorted by number
  std::vector<std::string> warnings;
  uint64_t event_count = 0;

  const std::string& name(uint32_t id) const { return strings[id]; }
  // N of a ProfilerStep#N slice (-1 for others).
  int64_t step_number(const Slice& s) const;
};

// Builds the model of one run from its raw files, streaming: events go from
// the reader straight into the model. Reader issues (truncated tail, corrupt
// chunks) and unmatched async ranges become warnings. Returns false and sets
// `error` when a raw file cannot be read at all.
bool build_model(const std::string& run_dir, TraceModel* model, std::string* error);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_TRACE_MODEL_H_
