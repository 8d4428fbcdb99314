// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the critical path (analysis/ critical_path.h) and its what-if re-timing
// (analysis/what_if.h) read of a run: each thread's outermost ranges and its
// times that are not the range around them (waits for data, communication
// calls, calls blocked on the device), each stream's activities in order, and
// each activity's launch. Internal to those two.
#ifndef TRAINPROF_ANALYSIS_PATH_GRAPH_H_
#define TRAINPROF_ANALYSIS_PATH_GRAPH_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/trace_model.h"

namespace trainprof::analysis {

// A host call that returns only when the device has done something: a
// synchronization, or a copy that is not asynchronous.
bool is_blocking_call(std::string_view name);

// A torch.distributed call on the calling thread ("c10d::allreduce_", ...).
inline constexpr std::string_view kCommCallerPrefix = "c10d::";
bool is_comm_caller(std::string_view name);

// Time on a host thread that is not the range around it: a wait for data, a
// communication call, or a call blocked on the device (`device`: the
// activity it waited for, -1 for none).
struct SpecialTime {
  uint64_t start_ns;
  uint64_t end_ns;
  PathKind kind;
  uint32_t name;
  int64_t device = -1;
};

// The last element of `v` (in start order) that starts before `t`, or null.
template <typename T>
const T* last_before(const std::vector<T>& v, uint64_t t) {
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].start_ns < t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo == 0 ? nullptr : &v[lo - 1];
}

// last_before for a walk that moves back in time: `*hint` (one past the
// element found last time, 0 at first) is looked at, and a few elements
// before it, before a binary search; updated to one past the answer. The
// answer is last_before's: the one place where the elements before `t` end.
template <typename T>
const T* last_before_near(const std::vector<T>& v, uint64_t t, size_t* hint) {
  size_t at = std::min(*hint, v.size());
  for (int tries = 0; tries < 4; ++tries) {
    bool none_later = at == v.size() || v[at].start_ns >= t;  // v[at..] start at or after t
    if (!none_later) break;                                   // t moved forward: search
    if (at == 0 || v[at - 1].start_ns < t) {
      *hint = at;
      return at == 0 ? nullptr : &v[at - 1];
    }
    --at;
  }
  const T* found = last_before(v, t);
  *hint = found == nullptr ? 0 : static_cast<size_t>(found - v.data()) + 1;
  return found;
}

// Built once the scan is complete; reads the ranges as the accumulator
// holds them at each use.
class PathGraph {
 public:
  using Ranges = std::map<uint32_t, std::vector<CriticalPathAccumulator::Range>>;
  PathGraph(const TraceModel& m, const Ranges& ranges);

  const TraceModel& model() const { return m_; }
  // Thread `tid`'s outermost ranges and special times, each in start order.
  const std::vector<CriticalPathAccumulator::Range>& ranges_of(uint32_t tid) const;
  const std::vector<SpecialTime>& specials_of(uint32_t tid) const;
  // Every thread with ranges or special times.
  std::vector<uint32_t> thread_ids() const;
  // The device activity before model.gpu[index] on its stream (an index into
  // model.gpu), -1 for none; and the call that launched it, null for none.
  int64_t before_on_stream(size_t index) const;
  const GpuActivity* launch_of(const GpuActivity& a) const;
  // The operator `op_name` (a torch.distributed "c10d::" call) started on
  // thread `tid` at `start_ns`. When a blocking communication call recorded
  // on another thread (a Gloo worker's, docs/FORMAT.md, COMM) starts at that
  // very time, it was this call: `tid` waited for it to end, and it becomes
  // special time of `tid` too.
  void add_comm_caller(uint64_t start_ns, uint32_t tid, std::string_view op_name);

 private:
  struct Position {
    const std::vector<size_t>* lane;
    size_t index;
  };
  const TraceModel& m_;
  std::map<std::pair<int32_t, uint32_t>, std::vector<size_t>> lanes_;  // (device, stream) -> activities
  std::unordered_map<size_t, Position> position_;
  std::unordered_map<uint32_t, size_t> launch_by_correlation_;
  const Ranges& ranges_;
  std::map<uint32_t, std::vector<SpecialTime>> specials_;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_PATH_GRAPH_H_
