// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// --steps / step_list: narrow the model to steps.
//
// Called after the scan: the events it read whole (counters, marks, data
// stages, memory, GPU activity, operator links) are narrowed here; the
// slices, read window by window later, by the loader with the same
// SliceSelection.
#include <algorithm>

#include "analysis/passes.h"

namespace trainprof::analysis {
namespace {

std::string describe_steps(const TraceModel& m) {
  if (m.steps.empty()) return "this run recorded no steps (no ProfilerStep#N)";
  std::string s = "recorded steps: ";
  // Ranges of consecutive numbers: "3-5, 9".
  for (size_t i = 0; i < m.steps.size();) {
    size_t j = i;
    while (j + 1 < m.steps.size() && m.steps[j + 1].number == m.steps[j].number + 1) ++j;
    if (i > 0) s += ", ";
    s += std::to_string(m.steps[i].number);
    if (j > i) {
      s += '-';  // not "-" + to_string(...): GCC 12 -O3 warns (-Wrestrict) on that
      s += std::to_string(m.steps[j].number);
    }
    i = j + 1;
  }
  if (m.start_up.number >= 0) s += "; " + std::to_string(m.start_up.number) + " is the start-up, not a step";
  if (m.tail.number >= 0)
    s += "; " + std::to_string(m.tail.number) + " is the tail after the last step, not a step";
  return s;
}

template <typename T, typename Pred>
void keep_if(std::vector<T>& v, Pred keep) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const T& x) { return !keep(x); }), v.end());
}

}  // namespace

std::string select_steps(TraceModel& m, const std::vector<int64_t>& list) {
  if (list.empty()) return "";
  for (size_t i = 1; i < list.size(); ++i) {
    if (list[i] != list[i - 1] + 1) {
      return "step list must be consecutive integers in increasing order; " + describe_steps(m);
    }
  }
  std::vector<StepWindow> chosen;
  for (int64_t n : list) {
    auto it =
        std::find_if(m.steps.begin(), m.steps.end(), [n](const StepWindow& w) { return w.number == n; });
    if (it == m.steps.end()) {
      bool phase = n == m.start_up.number || n == m.tail.number;
      return "step " + std::to_string(n) + (phase ? " is not a step; " : " was not recorded; ") +
             describe_steps(m);
    }
    chosen.push_back(*it);
  }
  const SliceSelection selection{true, chosen.front().start_ns, chosen.back().end_ns, list.front(),
                                 list.back()};
  auto inside = [&](uint64_t t) { return selection.keeps(t); };
  keep_if(m.op_links, [&](const OpLink& l) { return inside(l.start_ns); });
  keep_if(m.instants, [&](const Instant& i) { return inside(i.ts_ns); });
  keep_if(m.counters, [&](const CounterSample& c) { return inside(c.ts_ns); });
  keep_if(m.data_stages, [&](const DataStageSlice& d) { return inside(d.start_ns); });
  keep_if(m.async_ranges, [&](const AsyncRange& a) { return inside(a.start_ns); });
  keep_if(m.memory, [&](const MemoryRecord& r) { return inside(r.ts_ns); });
  keep_if(m.failed_allocations, [&](const MemoryRecord& r) { return inside(r.ts_ns); });
  keep_if(m.memory_tags, [&](const MemoryTag& t) { return inside(t.ts_ns); });
  keep_if(m.gpu, [&](const GpuActivity& a) { return inside(a.start_ns); });
  keep_if(m.stack_samples, [&](const StackSample& s) { return inside(s.start_ns); });
  m.steps = chosen;
  m.selection = selection;
  return "";
}

}  // namespace trainprof::analysis
