// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Python outside operators: which functions spent the host time of a step that
// no operator or range covers, from the stack samples of the Python package's
// sampler (TraceModel::stack_samples).
//
// A sample stands for the span since the sampler's previous look. Its
// thread may have spent part of that span in operators (torch releases the
// GIL while one runs, so the sampler looks promptly) and part in Python;
// the sample is given only the part in gaps between its thread's outermost
// ranges and operators, so that a step's untracked time is shared among
// the stacks seen in it. Gaps shorter than kGlueGapNs are left out: they
// are the framework's own glue between operators (a module's call, the
// dispatch from Python), present in every eager loop and the business of
// tiny_operators, not a function's work.
#ifndef TRAINPROF_ANALYSIS_PYTHON_SAMPLES_H_
#define TRAINPROF_ANALYSIS_PYTHON_SAMPLES_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/trace_model.h"

namespace trainprof::analysis {

// Fed window by window (analysis/run_loader.h) like SelfTimeAccumulator:
// sets each sample's outside_ns.
class OutsideOperatorsAccumulator {
 public:
  // Clips each sample that ends in a step to start no earlier than it.
  explicit OutsideOperatorsAccumulator(TraceModel& model);
  void add_window(TraceModel& model);
  void finish(TraceModel& model);

 private:
  struct Thread {
    size_t next = 0;                                  // its first sample not yet given its time
    size_t end = 0;                                   // one past its last sample
    uint64_t open_end = 0;                            // the end of the outermost slice open so far
    std::vector<std::pair<uint64_t, uint64_t>> gaps;  // long gaps a pending sample may meet
  };
  // The gap before an outermost slice that starts at `start_ns` is known:
  // kept when long, less the host's communication, and the samples that
  // end by then settled.
  void gap_until(TraceModel& model, Thread& t, uint64_t start_ns);
  void add_gap(Thread& t, uint64_t from, uint64_t to) const;

  std::unordered_map<uint32_t, Thread> threads_;  // by tid, threads with samples
  // The host's communication calls in start order, and the latest end
  // among each and those before it: a thread outside operators while a
  // collective runs waits for it (a Gloo all_reduce's wait(), DDP's wait
  // for its buckets at the end of the backward), which is communication,
  // not a function's work.
  std::vector<std::pair<uint64_t, uint64_t>> comm_;
  std::vector<uint64_t> comm_reach_;
};

// The whole model as one window.
void attribute_stack_samples(TraceModel& model);

// Shorter gaps between a thread's outermost slices are glue, not work.
inline constexpr uint64_t kGlueGapNs = 100'000;

// A stack's frame where the program's own code is: the innermost frame
// that is not the interpreter's library or an installed package.
struct StackFrame {
  std::string function;
  std::string file;
  int line = 0;
  bool generator = false;
};
std::vector<StackFrame> parse_stack(const std::string& stack);
bool is_library_file(const std::string& file);

// A function's time outside operators over the counted steps (or one step).
struct OutsideFunction {
  std::string function;  // "load_features"
  std::string file;      // as the sampler found it
  int line = 0;          // the line with the most time
  uint64_t ns = 0;
  // Pulling the loop's next input: the program's frame, or one inside it,
  // is a generator's or an iterator's __next__.
  bool input = false;
};

struct OutsideOperators {
  // Why nothing is attributed although there are samples ("" when it is):
  // with operators sampled (sample_operators), the time between recorded
  // operators is mostly unrecorded operators, not time outside them.
  std::string not_attributed;
  uint64_t samples = 0;                    // on the steps' threads, inside counted steps
  uint64_t outside_ns = 0;                 // what they were given, summed
  int64_t steps = 0;                       // counted steps
  std::vector<OutsideFunction> functions;  // the most time first
  // Per counted step: its functions, the most time first.
  std::vector<std::pair<int64_t, std::vector<OutsideFunction>>> by_step;
};

// The samples of each counted step's thread inside the step, by function.
OutsideOperators outside_operators(const TraceModel& model);

// The function with the most outside time among `tid`'s samples ending in
// [start_ns, end_ns) ("" when none): a critical-path segment's.
std::string top_outside_function(const TraceModel& model, uint32_t tid, uint64_t start_ns, uint64_t end_ns);

// Each critical-path row's top_outside_function: its untracked host
// time's ("" for other kinds and without samples).
std::vector<std::string> path_outside_functions(const TraceModel& model,
                                                const std::vector<PathSegment>& path);

// "load_features (train.py:14)": the file's last component.
std::string describe(const OutsideFunction& f);

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_PYTHON_SAMPLES_H_
