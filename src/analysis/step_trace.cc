// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Step-time breakdown (step_trace_time.csv).
//
// Per step window, with C the union of operator and range intervals on every
// thread, B the union of blocking communication calls (calls, posts, waits),
// F the union of nonblocking operations in flight and W the union of the
// loop's waits for data (data stages "wait", torch's DataLoader fetches),
// all clipped to the window: Computing = |C - B - W| (the host inside MPI,
// or waiting for its batch, is not computing, even in a range around it);
// Communication = |B + F|; Overlapped = |F & (C - B - W)| (in flight while
// computing); Not Overlapped = Communication - Overlapped; Data Wait =
// |W - (B + F)|; Free = window - Computing - Not Overlapped - Data Wait (the
// four are disjoint: they add up to the window); Bubble = the blocking
// point-to-point receives; Stage = first communication start to last end,
// minus Bubble; Exclude Receive = Not Overlapped - Bubble. Preparing is the
// gap from the step's start to its first computing activity.
//
// With GPU activity (CUPTI), the device's time is the step's instead
// (StepTraceAccumulator::use_device_time): C is the union of kernels, copies
// and sets other than NCCL's, B + F also hold NCCL's kernels, Computing =
// |C|, Overlapped = |C & (B + F)|, Data Wait is the time the device was idle
// while the host waited for data (|W - C - B - F|) and Free the rest of its
// idle time: the four still add up to the window.
#include <algorithm>
#include <span>
#include <string_view>

#include "analysis/gpu_kernels.h"
#include "analysis/passes.h"
#include "raw/format.h"
#include "trainprof/dataset.h"

namespace trainprof::analysis {

bool is_data_loader_fetch(std::string_view name) {
  // "enumerate(DataLoader)#<its iterator class>.__next__"
  return name.starts_with("enumerate(DataLoader)#");
}

void UnionLength::add(uint64_t start, uint64_t end) {
  if (open_ && start <= end_) {
    end_ = std::max(end_, end);
    return;
  }
  if (open_) total_ += end_ - start_;
  start_ = start;
  end_ = end;
  open_ = true;
}

namespace {

// Disjoint [start, end) intervals in start order.
using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;

uint64_t length(const Intervals& a) {
  uint64_t total = 0;
  for (const auto& [s, e] : a) total += e - s;
  return total;
}

Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    uint64_t s = std::max(a[i].first, b[j].first), e = std::min(a[i].second, b[j].second);
    if (e > s) out.emplace_back(s, e);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Intervals subtract(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (auto [s, e] : a) {
    while (j < b.size() && b[j].second <= s) ++j;
    for (size_t k = j; k < b.size() && b[k].first < e; ++k) {
      if (b[k].first > s) out.emplace_back(s, b[k].first);
      s = std::max(s, b[k].second);
    }
    if (e > s) out.emplace_back(s, e);
  }
  return out;
}

// Adds [s, e) to `a`, built in start order.
void add_sorted(Intervals& a, uint64_t s, uint64_t e) {
  if (!a.empty() && s <= a.back().second) {
    a.back().second = std::max(a.back().second, e);
  } else {
    a.emplace_back(s, e);
  }
}

// The union of `all` (in any order, overlapping or not), disjoint and in
// start order.
Intervals union_of(Intervals all) {
  std::sort(all.begin(), all.end());
  Intervals out;
  for (const auto& [s, e] : all) add_sorted(out, s, e);
  return out;
}

Intervals union_of(const Intervals& a, const Intervals& b) {
  Intervals all = a;
  all.insert(all.end(), b.begin(), b.end());
  return union_of(std::move(all));
}

// The part of `a` inside [start, end).
Intervals clipped(const Intervals& a, uint64_t start, uint64_t end) {
  Intervals out;
  auto it =
      std::lower_bound(a.begin(), a.end(), start,
                       [](const std::pair<uint64_t, uint64_t>& i, uint64_t t) { return i.second <= t; });
  for (; it != a.end() && it->first < end; ++it) {
    uint64_t s = std::max(it->first, start), e = std::min(it->second, end);
    if (e > s) out.emplace_back(s, e);
  }
  return out;
}

// The loop's waits for data overlapping [start, end), joined, in start
// order: the data stages marked as a wait (the LibTorch loader wrapper's,
// Python's DataLoader stages, any a user marks so) and torch's DataLoader
// fetches on every thread.
Intervals data_waits(const TraceModel& m, uint64_t start, uint64_t end) {
  Intervals all;
  for (const DataStageSlice& d : m.data_stages) {
    if (d.start_ns < end && d.start_ns + d.dur_ns > start && m.name(d.stage) == kStageLoaderWait)
      all.emplace_back(d.start_ns, d.start_ns + d.dur_ns);
  }
  std::vector<bool> fetch(m.keys.size());
  bool any_fetch = false;
  for (size_t k = 0; k < m.keys.size(); ++k) {
    fetch[k] = !m.keys[k].is_step && is_data_loader_fetch(m.name(m.keys[k].name));
    any_fetch = any_fetch || fetch[k];
  }
  for (const ThreadSlices& t : m.threads) {
    if (!any_fetch) break;
    for (const Slice& s : t.slices) {
      if (s.start_ns >= end) break;  // in start order
      if (fetch[s.key] && m.end(s) > start) all.emplace_back(s.start_ns, m.end(s));
    }
  }
  return union_of(std::move(all));
}

// The communication of a window, as the step's columns need it.
struct WindowComm {
  Intervals blocking, in_flight;
  uint64_t receive_ns = 0;
  uint64_t first_ns = UINT64_MAX, last_ns = 0;
};

WindowComm window_comm(const TraceModel& m, uint64_t start, uint64_t end) {
  WindowComm w;
  Intervals receives;
  for (const CommCall& c : m.comm_calls) {  // in start order
    if (c.start_ns >= end) break;
    uint64_t s = std::max(c.start_ns, start), e = std::min(c.end_ns, end);
    if (e <= s) continue;
    bool in_flight = !is_host_call(c);  // posted, or on the GPU: communication beside the host's work
    add_sorted(in_flight ? w.in_flight : w.blocking, s, e);
    if (!in_flight && (c.flags & raw::kCommRecv) != 0 && (c.flags & raw::kCommNonblocking) == 0) {
      add_sorted(receives, s, e);
    }
    w.first_ns = std::min(w.first_ns, s);
    w.last_ns = std::max(w.last_ns, e);
  }
  w.receive_ns = length(receives);
  return w;
}

// One thread's computing time in a step window as disjoint intervals in
// start order: its slices clipped to the window, overlapping ones joined
// (nested slices vanish into their parents). Threads are merged at this
// level, an interval per top-level slice, not per slice.
class ThreadIntervals {
 public:
  ThreadIntervals(const TraceModel& m, std::span<const Slice> slices, const StepWindow& w)
      : m_(&m), at_(slices.data()), end_(slices.data() + slices.size()), w_(&w) {
    advance();
  }
  bool done() const { return done_; }
  uint64_t start() const { return start_; }
  uint64_t end() const { return end_ns_; }

  void advance() {
    done_ = true;
    for (; at_ != end_; ++at_) {
      uint64_t cs, ce;
      if (!clip(*at_, &cs, &ce)) continue;
      if (!done_ && cs > end_ns_) return;  // the next interval starts here
      if (done_) start_ = cs;
      end_ns_ = done_ ? ce : std::max(end_ns_, ce);
      done_ = false;
    }
  }

 private:
  bool clip(const Slice& s, uint64_t* cs, uint64_t* ce) const {
    if (m_->is_step(s)) return false;
    *cs = std::max(s.start_ns, w_->start_ns);
    *ce = std::min(m_->end(s), w_->end_ns);
    return *ce > *cs;
  }

  const TraceModel* m_;
  const Slice* at_;
  const Slice* end_;
  const StepWindow* w_;
  bool done_ = true;
  uint64_t start_ = 0, end_ns_ = 0;
};

// A step's part in one window: its columns, and when its communication began
// and ended (for Stage, which spans the whole step).
struct PartRow {
  StepTraceRow row;
  Intervals waiting;  // the loop's waits for data in it (W)
  uint64_t comm_first_ns = UINT64_MAX;
  uint64_t comm_last_ns = 0;
};

// The rows of `steps` from a window that holds every slice overlapping them
// and the loop's `waits` for data in it.
std::vector<PartRow> step_rows(const TraceModel& m, std::span<const StepWindow> steps,
                               const Intervals& waits) {
  // Each thread's slices are in start order: a window looks only at the
  // slices that start within `longest` before it, so the pass is about
  // O(n log n) and copies nothing. Clipping to the window keeps the start
  // order (starts before the window all become the window's start), so the
  // union is swept as the threads' intervals go by.
  uint64_t longest = 0;
  for (const ThreadSlices& t : m.threads) {
    for (const Slice& s : t.slices) {
      if (!m.is_step(s)) longest = std::max(longest, m.duration(s));
    }
  }
  auto starts_before = [](const Slice& s, uint64_t t) { return s.start_ns < t; };
  std::vector<PartRow> rows;
  std::vector<ThreadIntervals> threads;
  for (const StepWindow& w : steps) {
    PartRow part;
    StepTraceRow& row = part.row;
    row.step = w.number;
    row.step_ns = w.end_ns - w.start_ns;
    uint64_t from = w.start_ns > longest ? w.start_ns - longest : 0;
    threads.clear();
    for (const ThreadSlices& t : m.threads) {
      auto begin = std::lower_bound(t.slices.begin(), t.slices.end(), from, starts_before);
      auto end = std::lower_bound(begin, t.slices.end(), w.end_ns, starts_before);
      ThreadIntervals intervals(m, {begin, end}, w);
      if (!intervals.done()) threads.push_back(intervals);
    }
    Intervals computing;
    while (!threads.empty()) {
      auto next = std::min_element(threads.begin(), threads.end(),
                                   [](const auto& a, const auto& b) { return a.start() < b.start(); });
      add_sorted(computing, next->start(), next->end());
      next->advance();
      if (next->done()) threads.erase(next);
    }
    Intervals& waiting = part.waiting = clipped(waits, w.start_ns, w.end_ns);
    computing = subtract(computing, waiting);
    uint64_t first_start = computing.empty() ? w.end_ns : computing.front().first;
    if (m.comm_calls.empty()) {
      row.computing_ns = length(computing);
      row.data_wait_ns = length(waiting);
    } else {
      WindowComm comm = window_comm(m, w.start_ns, w.end_ns);
      Intervals computing_outside = subtract(computing, comm.blocking);
      Intervals comm_union = union_of(comm.blocking, comm.in_flight);
      row.computing_ns = length(computing_outside);
      row.communication_ns = length(comm_union);
      row.overlapped_ns = length(intersect(subtract(comm.in_flight, comm.blocking), computing_outside));
      row.data_wait_ns = length(subtract(waiting, comm_union));
      row.bubble_ns = comm.receive_ns;
      part.comm_first_ns = comm.first_ns;
      part.comm_last_ns = comm.last_ns;
    }
    row.preparing_ns = first_start == w.end_ns ? 0 : first_start - w.start_ns;
    rows.push_back(part);
  }
  return rows;
}

}  // namespace

StepTraceAccumulator::StepTraceAccumulator(const TraceModel& m) : steps_(steps_by_start(m.steps)) {}

void StepTraceAccumulator::add_window(const TraceModel& m, uint64_t start_ns, uint64_t end_ns) {
  while (next_ < steps_.size() && steps_[next_].start_ns < end_ns) ++next_;
  std::vector<StepWindow> parts;
  std::vector<size_t> of;
  for (size_t i = first_open_; i < next_; ++i) {
    const StepWindow& s = steps_[i];
    if (s.end_ns <= start_ns) continue;
    parts.push_back({s.number, std::max(s.start_ns, start_ns), std::min(s.end_ns, end_ns)});
    of.push_back(i);
  }
  std::vector<PartRow> rows =
      step_rows(m, parts, parts.empty() ? Intervals() : data_waits(m, parts.front().start_ns, end_ns));
  for (size_t k = 0; k < rows.size(); ++k) {
    Parts& p = parts_[of[k]];
    const StepTraceRow& r = rows[k].row;
    p.row.computing_ns += r.computing_ns;
    p.row.data_wait_ns += r.data_wait_ns;
    p.waiting.insert(p.waiting.end(), rows[k].waiting.begin(), rows[k].waiting.end());  // windows in order
    p.row.communication_ns += r.communication_ns;
    p.row.overlapped_ns += r.overlapped_ns;
    p.row.bubble_ns += r.bubble_ns;
    p.comm_first_ns = std::min(p.comm_first_ns, rows[k].comm_first_ns);
    p.comm_last_ns = std::max(p.comm_last_ns, rows[k].comm_last_ns);
    if (!p.active && r.computing_ns > 0) {
      p.row.preparing_ns = parts[k].start_ns - steps_[of[k]].start_ns + r.preparing_ns;
      p.active = true;
    }
  }
  while (first_open_ < next_ && steps_[first_open_].end_ns <= end_ns) ++first_open_;
}

namespace {

// NCCL's kernels are communication.
bool is_communication_kernel(const TraceModel& m, const GpuActivity& a) {
  return a.kind == raw::EventKind::kGpuKernel && is_nccl_kernel(m.name(a.name));
}

// The device's part of one step: what ran in it, split into computing and
// communication, each a union of intervals clipped to the step.
struct DeviceStep {
  Intervals computing, communication;
  uint64_t first_ns = UINT64_MAX;  // first device activity
  uint64_t comm_first_ns = UINT64_MAX, comm_last_ns = 0;
};

DeviceStep device_step(const TraceModel& m, const StepWindow& w, uint64_t longest_ns) {
  DeviceStep d;
  Intervals comm;
  uint64_t from = w.start_ns > longest_ns ? w.start_ns - longest_ns : 0;
  auto first = std::lower_bound(m.gpu.begin(), m.gpu.end(), from,
                                [](const GpuActivity& a, uint64_t t) { return a.start_ns < t; });
  for (auto it = first; it != m.gpu.end() && it->start_ns < w.end_ns; ++it) {
    if (!is_device_activity(*it)) continue;
    uint64_t s = std::max(it->start_ns, w.start_ns), e = std::min(it->end_ns, w.end_ns);
    if (e <= s) continue;
    d.first_ns = std::min(d.first_ns, s);
    if (is_communication_kernel(m, *it)) {
      comm.emplace_back(s, e);
    } else {
      add_sorted(d.computing, s, e);
    }
  }
  WindowComm host = window_comm(m, w.start_ns, w.end_ns);
  comm.insert(comm.end(), host.blocking.begin(), host.blocking.end());
  comm.insert(comm.end(), host.in_flight.begin(), host.in_flight.end());
  std::sort(comm.begin(), comm.end());
  for (const auto& [s, e] : comm) {
    add_sorted(d.communication, s, e);
    d.comm_first_ns = std::min(d.comm_first_ns, s);
    d.comm_last_ns = std::max(d.comm_last_ns, e);
  }
  return d;
}

}  // namespace

void StepTraceAccumulator::use_device_time(const TraceModel& m) {
  uint64_t longest = 0;
  bool any = false;
  for (const GpuActivity& a : m.gpu) {
    if (!is_device_activity(a)) continue;
    any = true;
    longest = std::max(longest, a.end_ns - a.start_ns);
  }
  if (!any) {  // no GPU: the host's time stands
    host_sampled_ = m.operator_sampling > 1;
    return;
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    DeviceStep d = device_step(m, steps_[i], longest);
    StepTraceRow& row = parts_[i].row;
    row.computing_ns = length(d.computing);
    row.communication_ns = length(d.communication);
    row.overlapped_ns = length(intersect(d.communication, d.computing));
    row.preparing_ns = d.first_ns == UINT64_MAX ? 0 : d.first_ns - steps_[i].start_ns;
    row.data_wait_ns = length(subtract(parts_[i].waiting, union_of(d.computing, d.communication)));
    parts_[i].comm_first_ns = d.comm_first_ns;
    parts_[i].comm_last_ns = d.comm_last_ns;
  }
}

std::vector<StepTraceRow> StepTraceAccumulator::finish() const {
  std::vector<StepTraceRow> rows;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Parts& p = parts_[i];
    StepTraceRow row = p.row;
    row.step = steps_[i].number;
    row.step_ns = steps_[i].end_ns - steps_[i].start_ns;
    row.communication_not_overlapped_ns = row.communication_ns - row.overlapped_ns;
    if (host_sampled_) {
      uint64_t waits = row.communication_not_overlapped_ns + row.data_wait_ns;
      row.computing_ns = row.step_ns > waits ? row.step_ns - waits : 0;
      row.preparing_ns = 0;
    }
    uint64_t busy = row.computing_ns + row.communication_not_overlapped_ns + row.data_wait_ns;
    row.free_ns = row.step_ns > busy ? row.step_ns - busy : 0;
    row.communication_not_overlapped_exclude_receive_ns =
        row.communication_not_overlapped_ns > row.bubble_ns
            ? row.communication_not_overlapped_ns - row.bubble_ns
            : 0;
    uint64_t span = p.comm_last_ns > p.comm_first_ns ? p.comm_last_ns - p.comm_first_ns : 0;
    row.stage_ns = span > row.bubble_ns ? span - row.bubble_ns : 0;
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const StepTraceRow& a, const StepTraceRow& b) { return a.step < b.step; });
  return rows;
}

std::vector<StepTraceRow> step_trace(const TraceModel& m) {
  StepTraceAccumulator steps(m);
  steps.add_window(m, 0, UINT64_MAX);
  steps.use_device_time(m);
  return steps.finish();
}

size_t whole_steps(const std::vector<double>& lengths) {
  size_t whole = lengths.size();
  if (whole > 1) {
    std::vector<double> others(lengths.begin(), lengths.end() - 1);
    std::nth_element(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(others.size() / 2),
                     others.end());
    if (lengths.back() < 0.5 * others[others.size() / 2]) --whole;
  }
  return whole;
}

}  // namespace trainprof::analysis
