// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// analysis/what_if.h.
#include "analysis/what_if.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "analysis/gpu_kernels.h"
#include "analysis/path_graph.h"

namespace trainprof::analysis {
namespace {

// A piece of a host thread inside the step, recorded and re-timed.
struct Piece {
  uint64_t start_ns;
  uint64_t end_ns;
  PathKind kind;
  uint32_t name;
  int64_t device;     // kSync: the activity it waited for
  uint64_t focus_ns;  // of the focus's slices in it
  uint64_t new_start = 0;
  uint64_t new_end = 0;
  uint64_t dur() const { return end_ns - start_ns; }
};

// Thread `tid`'s pieces in [begin, end): its special times, and between them
// the parts of its outermost ranges; on the step's thread the rest is
// untracked host time, on others idle time (no piece).
std::vector<Piece> thread_pieces(const std::vector<CriticalPathAccumulator::Range>& ranges,
                                 const std::vector<SpecialTime>& specials, uint64_t begin, uint64_t end,
                                 bool step_thread) {
  std::vector<Piece> out;
  // Outermost ranges do not overlap: their ends are in order too.
  auto range =
      std::partition_point(ranges.begin(), ranges.end(),
                           [begin](const CriticalPathAccumulator::Range& r) { return r.end_ns <= begin; });
  auto fill = [&](uint64_t from, uint64_t to) {  // ranges and untracked time of [from, to)
    uint64_t cursor = from;
    for (; range != ranges.end() && range->start_ns < to; ++range) {
      uint64_t s = std::max(range->start_ns, cursor), e = std::min(range->end_ns, to);
      if (e <= s) continue;
      if (step_thread && s > cursor) out.push_back({cursor, s, PathKind::kHostUntracked, 0, -1, 0});
      uint64_t length = range->end_ns - range->start_ns;
      uint64_t focus = length > 0
                           ? static_cast<uint64_t>(static_cast<double>(range->focus_ns) *
                                                   static_cast<double>(e - s) / static_cast<double>(length))
                           : 0;
      out.push_back({s, e, range->data_wait ? PathKind::kDataWait : PathKind::kHost, range->name, -1, focus});
      cursor = e;
      if (range->end_ns > to) break;  // goes on after `to`
    }
    if (step_thread && to > cursor) out.push_back({cursor, to, PathKind::kHostUntracked, 0, -1, 0});
  };
  uint64_t cursor = begin;
  for (const SpecialTime& sp : specials) {
    if (sp.start_ns >= end) break;
    uint64_t s = std::max(sp.start_ns, cursor), e = std::min(sp.end_ns, end);
    if (e <= s) continue;
    fill(cursor, s);
    out.push_back({s, e, sp.kind, sp.name, sp.device, 0});
    cursor = e;
  }
  fill(cursor, end);
  return out;
}

// Sorts `v` by `less`, given the boundaries of runs that may already be in
// order: runs in order (the usual case: a thread's pieces follow each
// other) are merged, in about n log(runs) instead of n log n; else sorted.
template <typename T, typename Less>
void merge_runs(std::vector<T>& v, const std::vector<size_t>& runs, Less less) {
  auto at = [&v](size_t i) { return v.begin() + static_cast<std::ptrdiff_t>(i); };
  for (size_t r = 1; r < runs.size(); ++r) {
    if (!std::is_sorted(at(runs[r - 1]), at(runs[r]), less)) {
      std::sort(v.begin(), v.end(), less);
      return;
    }
  }
  for (size_t r = 2; r < runs.size(); ++r) std::inplace_merge(v.begin(), at(runs[r - 1]), at(runs[r]), less);
}

class Retimer {
 public:
  // `faster_ids`: the string ids of change.faster.
  Retimer(const PathGraph& graph, const WhatIf& change, const std::vector<uint32_t>& faster_ids)
      : g_(graph), m_(graph.model()), change_(change), faster_ids_(faster_ids) {}

  uint64_t step_length(uint64_t start, uint64_t end, uint32_t step_tid);

 private:
  struct Device {
    uint64_t new_start, new_end;
  };
  bool is_faster(uint32_t name) const {
    return std::find(faster_ids_.begin(), faster_ids_.end(), name) != faster_ids_.end();
  }
  // A piece's length after the change.
  uint64_t new_duration(const Piece& p) const {
    if (change_.hide_data_wait && p.kind == PathKind::kDataWait) return 0;
    if (change_.overlap_communication && p.kind == PathKind::kCommunication) return 0;
    double k = change_.speedup > 0 ? change_.speedup : 1.0;
    if (p.kind == PathKind::kHost && is_faster(p.name))
      return static_cast<uint64_t>(static_cast<double>(p.dur()) / k);
    double saved = static_cast<double>(std::min(p.focus_ns, p.dur())) * (1.0 - 1.0 / k);
    return p.dur() - static_cast<uint64_t>(saved);
  }
  // Where recorded time `t` of thread `tid` is after the change (t itself
  // outside this step's pieces).
  uint64_t moved(uint32_t tid, uint64_t t) const {
    auto it = pieces_.find(tid);
    if (it == pieces_.end()) return t;
    const Piece* p = last_before(it->second, t + 1);
    if (p == nullptr || t > p->end_ns) return t;
    double rate = p->kind == PathKind::kSync || p->dur() == 0
                      ? 1.0
                      : static_cast<double>(p->new_end - p->new_start) / static_cast<double>(p->dur());
    return p->new_start + static_cast<uint64_t>(static_cast<double>(t - p->start_ns) * rate);
  }
  uint64_t device_end(size_t index) const {
    auto it = devices_.find(index);
    return it != devices_.end() ? it->second.new_end : m_.gpu[index].end_ns;
  }
  void start_piece(uint32_t tid, size_t index, uint64_t step_start);
  void end_sync(Piece& p);
  void start_device(size_t index);

  const PathGraph& g_;
  const TraceModel& m_;
  const WhatIf& change_;
  const std::vector<uint32_t>& faster_ids_;
  uint32_t step_tid_ = 0;
  std::map<uint32_t, std::vector<Piece>> pieces_;
  std::unordered_map<size_t, Device> devices_;
};

void Retimer::start_piece(uint32_t tid, size_t index, uint64_t step_start) {
  std::vector<Piece>& list = pieces_[tid];
  Piece& p = list[index];
  bool step_thread = tid == step_tid_;
  uint64_t shifted = step_thread ? p.start_ns : moved(step_tid_, p.start_ns);
  if (index > 0) {
    const Piece& before = list[index - 1];
    p.new_start = before.end_ns == p.start_ns ? before.new_end : std::max(before.new_end, shifted);
  } else {
    p.new_start = step_thread ? step_start : shifted;
  }
  if (p.kind != PathKind::kSync) p.new_end = p.new_start + new_duration(p);
}

void Retimer::end_sync(Piece& p) {
  if (p.device < 0) {
    p.new_end = p.new_start + p.dur();
    return;
  }
  const GpuActivity& d = m_.gpu[static_cast<size_t>(p.device)];
  uint64_t device_now = device_end(static_cast<size_t>(p.device));
  if (d.end_ns > p.start_ns) {  // it waited: what it took after the device finished stays
    uint64_t after = p.end_ns - std::min(p.end_ns, d.end_ns);
    p.new_end = std::max(p.new_start, device_now) + after;
  } else {
    p.new_end = std::max(p.new_start + p.dur(), device_now);
  }
}

void Retimer::start_device(size_t index) {
  const GpuActivity& a = m_.gpu[index];
  int64_t before = g_.before_on_stream(index);
  const GpuActivity* launch = g_.launch_of(a);
  uint64_t ready = 0, ready_now = 0;
  if (before >= 0) {
    ready = m_.gpu[static_cast<size_t>(before)].end_ns;
    ready_now = device_end(static_cast<size_t>(before));
  }
  if (launch != nullptr) {
    ready = std::max(ready, launch->start_ns);
    ready_now =
        std::max(ready_now, moved(launch->thread != 0 ? launch->thread : step_tid_, launch->start_ns));
  }
  Device d;
  if (before < 0 && launch == nullptr) {
    d.new_start = moved(step_tid_, a.start_ns);
  } else {
    d.new_start = ready_now + (a.start_ns > ready ? a.start_ns - ready : 0);  // with its latency
  }
  double k = change_.speedup > 0 ? change_.speedup : 1.0;
  uint64_t dur = a.end_ns - a.start_ns;
  if (is_faster(a.name)) dur = static_cast<uint64_t>(static_cast<double>(dur) / k);
  if (change_.overlap_communication && is_nccl_kernel(m_.name(a.name))) dur = 0;
  d.new_end = d.new_start + dur;
  devices_[index] = d;
}

uint64_t Retimer::step_length(uint64_t start, uint64_t end, uint32_t step_tid) {
  step_tid_ = step_tid;
  pieces_.clear();
  devices_.clear();
  for (uint32_t tid : g_.thread_ids()) {
    std::vector<Piece> list =
        thread_pieces(g_.ranges_of(tid), g_.specials_of(tid), start, end, tid == step_tid);
    if (!list.empty()) pieces_[tid] = std::move(list);
  }
  if (pieces_.count(step_tid) == 0) pieces_[step_tid] = {{start, end, PathKind::kHostUntracked, 0, -1, 0}};
  // Events in recorded order: ends before starts at one time (a device's
  // before a host's), the step's thread before the others.
  struct Event {
    uint64_t t;
    int order;  // 0 device end, 1 host end, 2 device start, 3 step-thread start, 4 other start
    uint32_t tid;
    size_t index;
  };
  // Events of one time and order are of different threads or devices, and
  // each changes only its own piece: their order among them does not matter.
  auto earlier = [](const Event& a, const Event& b) {
    return std::tie(a.t, a.order) < std::tie(b.t, b.order);
  };
  std::vector<Event> events;
  std::vector<size_t> runs{0};  // each thread's events, then the devices': each in order as made
  for (const auto& [tid, list] : pieces_) {
    for (size_t i = 0; i < list.size(); ++i) {
      events.push_back({list[i].start_ns, tid == step_tid ? 3 : 4, tid, i});
      if (list[i].kind == PathKind::kSync) events.push_back({list[i].end_ns, 1, tid, i});
    }
    runs.push_back(events.size());
  }
  for (size_t i = 0; i < m_.gpu.size(); ++i) {
    const GpuActivity& a = m_.gpu[i];
    if (a.start_ns >= end) break;  // in start order
    if (a.start_ns >= start && is_device_activity(a)) events.push_back({a.start_ns, 2, 0, i});
  }
  runs.push_back(events.size());
  merge_runs(events, runs, earlier);
  for (const Event& e : events) {
    if (e.order == 2) {
      start_device(e.index);
    } else if (e.order == 1) {
      end_sync(pieces_[e.tid][e.index]);
    } else {
      start_piece(e.tid, e.index, start);
    }
  }
  const Piece& last = pieces_[step_tid].back();
  return last.new_end > start ? last.new_end - start : 0;
}

double median_of(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

}  // namespace

std::string what_if_label(const WhatIf& change) {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (change.hide_data_wait) add("data wait hidden");
  if (change.overlap_communication) add("communication overlapped");
  if (!change.faster.empty()) {
    char k[32];
    std::snprintf(k, sizeof(k), "%gx", change.speedup);
    add(change.faster + " " + k + " faster");
  }
  return out.empty() ? "as recorded" : out;
}

WhatIfObserver::WhatIfObserver(WhatIf change, bool pick_longest, bool focused)
    : change_(std::move(change)), pick_longest_(pick_longest), focused_(focused) {}

void WhatIfObserver::step(const PathGraph& graph, const StepWindow& step, uint32_t step_tid,
                          const std::vector<PathSegment>& path) {
  const TraceModel& m = graph.model();
  if (pick_longest_) {  // the longest named range or device activity on this first step's path
    pick_longest_ = false;
    for (const PathShare& s : path_shares(path)) {
      if (s.name == 0 || (s.kind != PathKind::kHost && s.kind != PathKind::kDevice)) continue;
      change_.faster = m.name(s.name);
      change_.speedup = 2.0;
      break;
    }
    if (change_.faster.empty()) return;  // nothing to make faster: no estimate
  }
  if (!faster_known_) {
    faster_known_ = true;
    for (uint32_t id = 0; id < m.strings.size() && !change_.faster.empty(); ++id) {
      if (m.strings[id] == change_.faster) faster_ids_.push_back(id);
    }
  }
  // Work off the path cannot shorten the step: when the change touches
  // nothing on it (an operator inside other ranges excepted: the path names
  // only the outermost), the step stays as recorded without re-timing it.
  bool touches = std::any_of(path.begin(), path.end(), [this](const PathSegment& s) {
    return (change_.hide_data_wait && s.kind == PathKind::kDataWait) ||
           (change_.overlap_communication &&
            (s.kind == PathKind::kCommunication || s.kind == PathKind::kDevice)) ||
           (!change_.faster.empty() &&
            std::find(faster_ids_.begin(), faster_ids_.end(), s.name) != faster_ids_.end());
  });
  bool any = change_.hide_data_wait || change_.overlap_communication || !change_.faster.empty();
  if (any && !touches && !focused_) {
    estimates_.push_back({step.number, step.end_ns - step.start_ns, step.end_ns - step.start_ns});
    return;
  }
  Retimer retimer(graph, change_, faster_ids_);
  estimates_.push_back(
      {step.number, step.end_ns - step.start_ns, retimer.step_length(step.start_ns, step.end_ns, step_tid)});
}

std::vector<StepEstimate> what_if(const TraceModel& model, const WhatIf& change, const std::string& focus) {
  CriticalPathAccumulator paths;
  paths.set_focus(focus);
  WhatIfObserver observer(change, false, !focus.empty());
  paths.add_observer(&observer);
  paths.add_window(model, UINT64_MAX);
  paths.finish(model);
  std::vector<StepEstimate> out = observer.estimates();
  std::stable_sort(out.begin(), out.end(),
                   [](const StepEstimate& a, const StepEstimate& b) { return a.step < b.step; });
  return out;
}

WhatIfSummary summarize_what_if(const std::vector<StepEstimate>& steps) {
  std::vector<uint64_t> recorded;
  for (const StepEstimate& s : steps) recorded.push_back(s.recorded_ns);
  double median = median_of(recorded);
  std::vector<uint64_t> kept_recorded, kept_estimated;
  for (const StepEstimate& s : steps) {
    if (static_cast<double>(s.recorded_ns) < median / 2) continue;  // the step open at stop(), ...
    kept_recorded.push_back(s.recorded_ns);
    kept_estimated.push_back(s.estimated_ns);
  }
  WhatIfSummary out;
  out.steps = kept_recorded.size();
  out.recorded_ms = median_of(kept_recorded) / 1e6;
  out.estimated_ms = median_of(kept_estimated) / 1e6;
  return out;
}

}  // namespace trainprof::analysis
