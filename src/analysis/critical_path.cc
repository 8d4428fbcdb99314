// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// analysis/critical_path.h.
#include "analysis/critical_path.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "analysis/passes.h"
#include "analysis/path_graph.h"
#include "trainprof/dataset.h"

namespace trainprof::analysis {

bool is_comm_caller(std::string_view name) {
  return name.starts_with(kCommCallerPrefix);
}

bool is_blocking_call(std::string_view name) {
  if (name.find("Synchronize") != std::string_view::npos) return true;
  bool copy = name.starts_with("cudaMemcpy") || name.starts_with("cuMemcpy");
  return copy && name.find("Async") == std::string_view::npos;
}

PathGraph::PathGraph(const TraceModel& m, const Ranges& ranges) : m_(m), ranges_(ranges) {
  std::vector<size_t> by_end;
  std::unordered_map<uint32_t, size_t> device_by_correlation;
  for (size_t i = 0; i < m.gpu.size(); ++i) {
    const GpuActivity& a = m.gpu[i];
    if (is_device_activity(a)) {
      auto& lane = lanes_[{a.device, a.stream}];
      position_[i] = {&lane, lane.size()};
      lane.push_back(i);  // model.gpu is in start order
      by_end.push_back(i);
      if (a.correlation != 0) device_by_correlation.emplace(a.correlation, i);
    } else if (a.kind == raw::EventKind::kGpuApi && a.correlation != 0) {
      launch_by_correlation_.emplace(a.correlation, i);
    }
  }
  std::stable_sort(by_end.begin(), by_end.end(),
                   [&m](size_t a, size_t b) { return m.gpu[a].end_ns < m.gpu[b].end_ns; });
  for (const GpuActivity& a : m.gpu) {
    if (a.kind != raw::EventKind::kGpuApi || a.thread == 0 || !is_blocking_call(m.name(a.name))) continue;
    // Its own copy when it has one, else the device activity that ended
    // last before it returned.
    int64_t device = -1;
    if (auto own = device_by_correlation.find(a.correlation); own != device_by_correlation.end()) {
      device = static_cast<int64_t>(own->second);
    } else {
      auto it = std::partition_point(by_end.begin(), by_end.end(),
                                     [&m, &a](size_t d) { return m.gpu[d].end_ns <= a.end_ns; });
      if (it != by_end.begin()) device = static_cast<int64_t>(*(it - 1));
    }
    specials_[a.thread].push_back({a.start_ns, a.end_ns, PathKind::kSync, a.name, device});
  }
  for (const DataStageSlice& d : m.data_stages) {
    if (m.name(d.stage) == kStageLoaderWait)
      specials_[d.tid].push_back({d.start_ns, d.start_ns + d.dur_ns, PathKind::kDataWait, d.operation});
  }
  for (const CommCall& c : m.comm_calls) {
    if (is_host_call(c))  // a span from post to completion, or on the GPU, is no call
      specials_[c.tid].push_back({c.start_ns, c.end_ns, PathKind::kCommunication, c.name});
  }
  for (auto& [tid, specials] : specials_) {
    std::stable_sort(specials.begin(), specials.end(),
                     [](const SpecialTime& a, const SpecialTime& b) { return a.start_ns < b.start_ns; });
  }
}

void PathGraph::add_comm_caller(uint64_t start_ns, uint32_t tid, std::string_view op_name) {
  // The COMM's name is the operator's without "c10d::" and outer underscores.
  op_name.remove_prefix(std::min(op_name.size(), kCommCallerPrefix.size()));
  while (!op_name.empty() && op_name.front() == '_') op_name.remove_prefix(1);
  while (!op_name.empty() && op_name.back() == '_') op_name.remove_suffix(1);
  auto first = std::partition_point(m_.comm_calls.begin(), m_.comm_calls.end(),
                                    [start_ns](const CommCall& c) { return c.start_ns < start_ns; });
  for (auto it = first; it != m_.comm_calls.end() && it->start_ns == start_ns; ++it) {
    const CommCall& c = *it;
    if (c.tid == tid || (c.flags & raw::kCommCompletion) != 0 || m_.name(c.name) != op_name) continue;
    std::vector<SpecialTime>& list = specials_[tid];
    auto at = std::partition_point(list.begin(), list.end(),
                                   [start_ns](const SpecialTime& s) { return s.start_ns <= start_ns; });
    list.insert(at, {c.start_ns, c.end_ns, PathKind::kCommunication, c.name});
    return;
  }
}

const std::vector<CriticalPathAccumulator::Range>& PathGraph::ranges_of(uint32_t tid) const {
  static const std::vector<CriticalPathAccumulator::Range> kNone;
  auto it = ranges_.find(tid);
  return it != ranges_.end() ? it->second : kNone;
}

const std::vector<SpecialTime>& PathGraph::specials_of(uint32_t tid) const {
  static const std::vector<SpecialTime> kNone;
  auto it = specials_.find(tid);
  return it != specials_.end() ? it->second : kNone;
}

std::vector<uint32_t> PathGraph::thread_ids() const {
  std::vector<uint32_t> out;
  for (const auto& [tid, list] : ranges_) {
    if (!list.empty()) out.push_back(tid);
  }
  for (const auto& [tid, list] : specials_) out.push_back(tid);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t PathGraph::before_on_stream(size_t index) const {
  auto it = position_.find(index);
  if (it == position_.end() || it->second.index == 0) return -1;
  return static_cast<int64_t>((*it->second.lane)[it->second.index - 1]);
}

const GpuActivity* PathGraph::launch_of(const GpuActivity& a) const {
  auto it = launch_by_correlation_.find(a.correlation);
  return it != launch_by_correlation_.end() ? &m_.gpu[it->second] : nullptr;
}

namespace {

// The same work in the same place.
bool alike(const PathSegment& a, const PathSegment& b) {
  return a.step == b.step && a.kind == b.kind && a.name == b.name && a.tid == b.tid && a.device == b.device &&
         a.stream == b.stream;
}

// Appends `s` (next in time) to `out`: joined to the row before when alike
// and adjacent; folded into the run two rows back when only a row of untracked
// time on its thread lies between (that row sums the gaps).
void fold(PathSegment s, std::vector<PathSegment>* out) {
  s.span_ns = s.dur_ns;
  s.count = 1;
  if (!out->empty()) {
    PathSegment& last = out->back();
    if (alike(last, s) && last.start_ns + last.span_ns == s.start_ns) {
      last.dur_ns += s.dur_ns;
      last.span_ns += s.dur_ns;
      return;
    }
  }
  if (out->size() >= 2) {
    PathSegment& run = (*out)[out->size() - 2];
    PathSegment& gap = out->back();
    bool gap_row = gap.kind == PathKind::kHostUntracked && gap.step == s.step && gap.tid == run.tid;
    if (gap_row && alike(run, s) && run.kind != PathKind::kHostUntracked) {
      run.dur_ns += s.dur_ns;
      run.span_ns = s.start_ns + s.dur_ns - run.start_ns;
      ++run.count;
      return;
    }
    if (gap_row && alike(gap, s) && run.count > 1) {  // a gap of the run
      gap.dur_ns += s.dur_ns;
      gap.span_ns = s.start_ns + s.dur_ns - gap.start_ns;
      ++gap.count;
      return;
    }
  }
  out->push_back(s);
}

// Walks one step back from its end (analysis/critical_path.h).
class PathWalk {
 public:
  explicit PathWalk(const PathGraph& graph) : g_(graph), m_(graph.model()) {}

  // The segments of the step [start_ns, end_ns) that ran on `step_tid`.
  void walk(int64_t step, uint64_t start_ns, uint64_t end_ns, uint32_t step_tid,
            std::vector<PathSegment>* out);

 private:
  // The walk's place: a host thread, or a device activity (device >= 0).
  struct Place {
    uint32_t tid = 0;
    int64_t device = -1;
  };

  // One step back on a host thread from `t`; returns the new time.
  uint64_t back_on_host(uint32_t tid, uint64_t t, uint64_t floor, bool step_thread, Place* place);
  uint64_t back_on_device(size_t index, uint64_t t, uint64_t floor, uint32_t step_tid, Place* place);
  void emit(PathKind kind, uint32_t name, uint32_t tid, const GpuActivity* on, uint64_t start, uint64_t end) {
    if (end <= start) return;
    PathSegment s;
    s.step = step_;
    s.kind = kind;
    s.name = name;
    s.tid = tid;
    if (on != nullptr) {
      s.device = on->device;
      s.stream = on->stream;
    }
    s.start_ns = start;
    s.dur_ns = end - start;
    segments_.push_back(s);
  }

  const PathGraph& g_;
  const TraceModel& m_;
  int64_t step_ = 0;
  // Where the last look on hint_tid_'s ranges and special times ended: the
  // walk goes back in time, mostly on one thread (last_before_near).
  struct Hint {
    size_t range = 0;
    size_t special = 0;
  };
  uint32_t hint_tid_ = 0;
  Hint hint_;
  std::vector<PathSegment> segments_;  // the step's, last first
};

uint64_t PathWalk::back_on_host(uint32_t tid, uint64_t t, uint64_t floor, bool step_thread, Place* place) {
  const auto& ranges = g_.ranges_of(tid);
  const auto& specials = g_.specials_of(tid);
  if (tid != hint_tid_) {
    hint_ = Hint{};
    hint_tid_ = tid;
  }
  const SpecialTime* special = last_before_near(specials, t, &hint_.special);
  if (special != nullptr && special->end_ns >= t) {  // inside it
    uint64_t begin = std::max(special->start_ns, floor);
    if (special->kind == PathKind::kSync && special->device >= 0) {
      const GpuActivity& d = m_.gpu[static_cast<size_t>(special->device)];
      if (d.end_ns > begin && d.end_ns < t) {  // it waited for the device: the path goes there
        emit(PathKind::kSync, special->name, tid, nullptr, d.end_ns, t);
        *place = Place{0, special->device};
        return d.end_ns;
      }
    }
    emit(special->kind, special->name, tid, nullptr, begin, t);
    return begin;
  }
  // Where the last special time before `t` ended bounds what comes after it.
  uint64_t after_special = special != nullptr ? special->end_ns : 0;
  const CriticalPathAccumulator::Range* range = last_before_near(ranges, t, &hint_.range);
  if (range != nullptr && range->end_ns >= t) {
    uint64_t begin = std::max({range->start_ns, after_special, floor});
    emit(range->data_wait ? PathKind::kDataWait : PathKind::kHost, range->name, tid, nullptr, begin, t);
    return begin;
  }
  if (!step_thread) {  // idle here: what came next was the step's thread's doing
    place->tid = 0;
    return t;
  }
  uint64_t begin = std::max({range != nullptr ? range->end_ns : 0, after_special, floor});
  emit(PathKind::kHostUntracked, 0, tid, nullptr, begin, t);
  return begin;
}

uint64_t PathWalk::back_on_device(size_t index, uint64_t t, uint64_t floor, uint32_t step_tid, Place* place) {
  const GpuActivity& a = m_.gpu[index];
  uint64_t start = std::max(a.start_ns, floor);
  emit(PathKind::kDevice, a.name, 0, &a, start, std::min(t, a.end_ns));
  if (a.start_ns <= floor) return floor;
  // Held by the activity before it on its stream, or by its launch: the later.
  int64_t before_index = g_.before_on_stream(index);
  const GpuActivity* before = before_index >= 0 ? &m_.gpu[static_cast<size_t>(before_index)] : nullptr;
  const GpuActivity* launch = g_.launch_of(a);
  if (before != nullptr && (launch == nullptr || before->end_ns >= launch->start_ns)) {
    uint64_t ready = std::max(std::min(before->end_ns, a.start_ns), floor);
    emit(PathKind::kDeviceQueue, 0, 0, &a, ready, a.start_ns);
    place->device = before_index;
    return ready;
  }
  if (launch != nullptr) {
    uint64_t made = std::max(std::min(launch->start_ns, a.start_ns), floor);
    emit(PathKind::kLaunch, launch->name, launch->thread, nullptr, made, a.start_ns);
    *place = Place{launch->thread != 0 ? launch->thread : step_tid, -1};
    return made;
  }
  *place = Place{step_tid, -1};
  return a.start_ns;
}

void PathWalk::walk(int64_t step, uint64_t start_ns, uint64_t end_ns, uint32_t step_tid,
                    std::vector<PathSegment>* out) {
  step_ = step;
  segments_.clear();
  Place place{step_tid, -1};
  uint64_t t = end_ns;
  // Each turn moves back in time or hands over once; the bound is a guard.
  size_t turns = 0;
  const size_t max_turns = 4 * (m_.gpu.size() + m_.data_stages.size() + m_.comm_calls.size()) + 1000000;
  while (t > start_ns && turns++ < max_turns) {
    if (place.device >= 0) {
      t = back_on_device(static_cast<size_t>(place.device), t, start_ns, step_tid, &place);
      continue;
    }
    if (place.tid == 0) place.tid = step_tid;
    t = back_on_host(place.tid, t, start_ns, place.tid == step_tid, &place);
  }
  // Last first -> time order, neighbours alike joined, runs folded.
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) fold(*it, out);
}

}  // namespace

const char* path_kind_name(PathKind kind) {
  switch (kind) {
    case PathKind::kHost: return "host";
    case PathKind::kHostUntracked: return "host untracked";
    case PathKind::kDataWait: return "data wait";
    case PathKind::kCommunication: return "communication";
    case PathKind::kSync: return "sync";
    case PathKind::kLaunch: return "launch";
    case PathKind::kDevice: return "device";
    case PathKind::kDeviceQueue: return "device queue";
  }
  return "host";
}

CriticalPathAccumulator::CriticalPathAccumulator() = default;
CriticalPathAccumulator::~CriticalPathAccumulator() = default;

void CriticalPathAccumulator::add_window(const TraceModel& model, uint64_t window_end_ns) {
  for (const ThreadSlices& thread : model.threads) {
    uint64_t& open_end = open_end_[thread.tid];
    std::vector<Range>& list = outermost_[thread.tid];
    for (size_t i = thread.first_own; i < thread.slices.size(); ++i) {
      const Slice& s = thread.slices[i];
      if (model.is_step(s)) {
        step_thread_.emplace(model.step_number(s), thread.tid);
        continue;
      }
      if (is_comm_caller_name(model, model.name_id(s)))
        callers_.push_back({s.start_ns, thread.tid, model.name_id(s)});
      bool focus = !focus_.empty() && model.name(model.name_id(s)) == focus_;
      if (s.start_ns < open_end) {  // inside the open outermost range
        uint64_t& focus_end = focus_end_[thread.tid];
        if (focus && s.start_ns >= focus_end && !list.empty()) {
          list.back().focus_ns += std::min(model.end(s), list.back().end_ns) - s.start_ns;
          focus_end = model.end(s);
        }
        continue;
      }
      uint32_t name = model.name_id(s);
      list.push_back({s.start_ns, model.end(s), name, is_data_loader_fetch(model.name(name)),
                      focus ? model.duration(s) : 0});
      open_end = model.end(s);
      if (focus) focus_end_[thread.tid] = open_end;
    }
  }
  walk_steps(model, window_end_ns);
}

void CriticalPathAccumulator::walk_steps(const TraceModel& model, uint64_t until_ns) {
  if (!steps_known_) {  // the scan's steps and activities are complete once windows come
    steps_known_ = true;
    for (const StepWindow& w : model.steps) {
      if (w.end_ns > w.start_ns) by_end_.push_back(w);
    }
    std::stable_sort(by_end_.begin(), by_end_.end(),
                     [](const StepWindow& a, const StepWindow& b) { return a.end_ns < b.end_ns; });
    std::reverse(by_end_.begin(), by_end_.end());  // the next to walk last
    graph_ = std::make_unique<PathGraph>(model, outermost_);
  }
  for (const Caller& c : callers_) graph_->add_comm_caller(c.start_ns, c.tid, model.name(c.name));
  callers_.clear();
  PathWalk walk(*graph_);
  while (!by_end_.empty() && by_end_.back().end_ns <= until_ns) {
    StepWindow w = by_end_.back();
    by_end_.pop_back();
    auto tid = step_thread_.find(w.number);
    if (tid == step_thread_.end()) continue;  // not a step of this selection
    std::vector<PathSegment> rows;
    walk.walk(w.number, w.start_ns, w.end_ns, tid->second, &rows);
    for (StepObserver* o : observers_) o->step(*graph_, w, tid->second, rows);
    walked_.emplace_back(w.number, std::move(rows));
  }
  // What no step left can reach.
  uint64_t keep_from = UINT64_MAX;
  for (const StepWindow& w : by_end_) keep_from = std::min(keep_from, w.start_ns);
  for (auto& [tid, list] : outermost_) {
    auto reached = std::partition_point(list.begin(), list.end(),
                                        [keep_from](const Range& r) { return r.end_ns <= keep_from; });
    list.erase(list.begin(), reached);
  }
}

bool CriticalPathAccumulator::is_comm_caller_name(const TraceModel& model, uint32_t name) {
  if (name >= caller_names_.size()) caller_names_.resize(model.strings.size(), kUnknown);
  if (name >= caller_names_.size()) return false;
  uint8_t& known = caller_names_[name];
  if (known == kUnknown) known = is_comm_caller(model.name(name)) ? kYes : kNo;
  return known == kYes;
}

std::vector<PathSegment> CriticalPathAccumulator::finish(const TraceModel& model) {
  walk_steps(model, UINT64_MAX);
  std::stable_sort(walked_.begin(), walked_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PathSegment> out;
  for (auto& [step, rows] : walked_) out.insert(out.end(), rows.begin(), rows.end());
  walked_.clear();
  return out;
}

std::vector<PathSegment> critical_path(const TraceModel& model) {
  CriticalPathAccumulator a;
  a.add_window(model, UINT64_MAX);
  return a.finish(model);
}

std::vector<PathShare> path_shares(const std::vector<PathSegment>& segments) {
  std::map<std::pair<PathKind, uint32_t>, uint64_t> sums;
  for (const PathSegment& s : segments) sums[{s.kind, s.name}] += s.dur_ns;
  std::vector<PathShare> out;
  for (const auto& [key, ns] : sums) out.push_back({key.first, key.second, ns});
  std::stable_sort(out.begin(), out.end(),
                   [](const PathShare& a, const PathShare& b) { return a.ns > b.ns; });
  return out;
}

}  // namespace trainprof::analysis
