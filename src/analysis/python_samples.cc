// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/python_samples.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

namespace trainprof::analysis {

OutsideOperatorsAccumulator::OutsideOperatorsAccumulator(TraceModel& m) {
  // A sample that ends in a step stands for no time before the steps
  // around it began: a span from the start-up into the first step would
  // give that step the start-up's gaps. Across two adjacent steps it
  // stays whole: the time is the steps' either way, and the stack found at
  // its end is as good for the part before the boundary as after it.
  std::vector<StepWindow> by_start = steps_by_start(m.steps);
  std::vector<uint64_t> run_start(by_start.size());  // where each step's run of adjacent steps begins
  for (size_t i = 0; i < by_start.size(); ++i) {
    // One step() ends a step and begins the next a clock read later.
    bool adjacent =
        i > 0 && by_start[i].start_ns - std::min(by_start[i].start_ns, by_start[i - 1].end_ns) < kGlueGapNs;
    run_start[i] = adjacent ? run_start[i - 1] : by_start[i].start_ns;
  }
  for (StackSample& s : m.stack_samples) {
    auto after = std::upper_bound(by_start.begin(), by_start.end(), s.end_ns - 1,
                                  [](uint64_t t, const StepWindow& w) { return t < w.start_ns; });
    if (after == by_start.begin() || s.end_ns > std::prev(after)->end_ns) continue;
    s.start_ns = std::max(s.start_ns, run_start[static_cast<size_t>(std::prev(after) - by_start.begin())]);
  }
  for (size_t i = 0; i < m.stack_samples.size();) {
    Thread& t = threads_[m.stack_samples[i].tid];
    t.next = i;
    while (i < m.stack_samples.size() && m.stack_samples[i].tid == m.stack_samples[t.next].tid) ++i;
    t.end = i;
  }
  // The scan read every communication call, in start order, before the
  // windows' slices. An NCCL operation on the device keeps the GPU busy,
  // not the host.
  if (threads_.empty()) return;
  for (const CommCall& c : m.comm_calls) {
    if ((c.flags & raw::kCommOnDevice) != 0 || c.end_ns <= c.start_ns) continue;
    comm_reach_.push_back(std::max(c.end_ns, comm_reach_.empty() ? uint64_t{0} : comm_reach_.back()));
    comm_.emplace_back(c.start_ns, c.end_ns);
  }
}

void OutsideOperatorsAccumulator::add_window(TraceModel& m) {
  if (threads_.empty()) return;
  for (const ThreadSlices& thread : m.threads) {
    auto it = threads_.find(thread.tid);
    if (it == threads_.end()) continue;
    Thread& t = it->second;
    for (size_t i = thread.first_own; i < thread.slices.size(); ++i) {
      const Slice& s = thread.slices[i];
      // A thread's slices come in timeline order: an outermost one starts
      // after the last outermost one ended. Steps cover everything.
      if (m.is_step(s) || s.start_ns < t.open_end) continue;
      gap_until(m, t, s.start_ns);
      t.open_end = m.end(s);
    }
  }
}

void OutsideOperatorsAccumulator::add_gap(Thread& t, uint64_t from, uint64_t to) const {
  // The first call that may reach past `from`: every one before it ended by then.
  size_t first = static_cast<size_t>(std::upper_bound(comm_reach_.begin(), comm_reach_.end(), from) -
                                     comm_reach_.begin());
  for (size_t i = first; i < comm_.size(); ++i) {
    const auto& [start, end] = comm_[i];
    if (start >= to) break;
    if (end <= from) continue;
    if (start > from) t.gaps.emplace_back(from, start);
    from = std::max(from, end);
    if (from >= to) return;
  }
  t.gaps.emplace_back(from, to);
}

void OutsideOperatorsAccumulator::gap_until(TraceModel& m, Thread& t, uint64_t start_ns) {
  if (start_ns > t.open_end && start_ns - t.open_end >= kGlueGapNs) add_gap(t, t.open_end, start_ns);
  // Every sample that ends by `start_ns` has met all its gaps.
  for (; t.next < t.end && m.stack_samples[t.next].end_ns <= start_ns; ++t.next) {
    StackSample& sample = m.stack_samples[t.next];
    uint64_t outside = 0;
    for (const auto& [from, to] : t.gaps) {
      uint64_t a = std::max(from, sample.start_ns), b = std::min(to, sample.end_ns);
      if (b > a) outside += b - a;
    }
    // Waiting for a CPU is no function's work: a thread preempted by other
    // work of the machine between two operators leaves a gap the length of
    // the wait, where no function of its own ran. Taken from the outside
    // part first, since a preemption inside an operator leaves no gap.
    sample.outside_ns = outside - std::min(outside, sample.cpu_wait_ns);
  }
  // What the pending samples can still meet: gaps that end after the
  // earliest start among them.
  uint64_t keep_from = t.next < t.end ? m.stack_samples[t.next].start_ns : UINT64_MAX;
  auto gone = std::find_if(t.gaps.begin(), t.gaps.end(), [keep_from](const std::pair<uint64_t, uint64_t>& g) {
    return g.second > keep_from;
  });
  t.gaps.erase(t.gaps.begin(), gone);
}

void OutsideOperatorsAccumulator::finish(TraceModel& m) {
  // After a thread's last slice: one gap to the end of its samples.
  for (auto& [tid, t] : threads_) gap_until(m, t, UINT64_MAX);
}

void attribute_stack_samples(TraceModel& m) {
  OutsideOperatorsAccumulator a(m);
  a.add_window(m);
  a.finish(m);
}

bool is_library_file(const std::string& file) {
  return file.find("/lib/python") != std::string::npos || file.find("site-packages") != std::string::npos ||
         file.find("dist-packages") != std::string::npos || file.rfind("<", 0) == 0;
}

std::vector<StackFrame> parse_stack(const std::string& stack) {
  std::vector<StackFrame> frames;
  size_t at = 0;
  while (at <= stack.size()) {
    size_t next = stack.find(';', at);
    if (next == std::string::npos) next = stack.size();
    std::string frame = stack.substr(at, next - at);
    at = next + 1;
    size_t colon = frame.find("): ");
    size_t paren = colon == std::string::npos ? std::string::npos : frame.rfind('(', colon);
    if (paren == std::string::npos) continue;
    StackFrame f;
    f.file = frame.substr(0, paren);
    f.line = std::atoi(frame.substr(paren + 1, colon - paren - 1).c_str());
    f.function = frame.substr(colon + 3);
    constexpr std::string_view kGenerator = " (generator)";
    if (f.function.ends_with(kGenerator)) {
      f.generator = true;
      f.function.resize(f.function.size() - kGenerator.size());
    }
    frames.push_back(std::move(f));
  }
  return frames;
}

namespace {

// A stack's program frame and whether it pulls the loop's input.
struct Attributed {
  StackFrame frame;
  bool input = false;
  bool known = false;
};

Attributed attribute(const std::string& stack) {
  std::vector<StackFrame> frames = parse_stack(stack);
  Attributed a;
  if (frames.empty()) return a;
  a.known = true;
  size_t own = 0;
  while (own < frames.size() && is_library_file(frames[own].file)) ++own;
  if (own == frames.size()) own = 0;  // library code only: its innermost frame
  for (size_t i = 0; i <= own; ++i) a.input |= frames[i].generator || frames[i].function == "__next__";
  a.frame = frames[own];
  return a;
}

// Functions' time, summed by (file, function), each line's apart.
class FunctionTotals {
 public:
  void add(const Attributed& a, uint64_t ns) {
    Entry& e = by_function_[{a.frame.file, a.frame.function}];
    e.ns += ns;
    e.by_line[a.frame.line] += ns;
    e.input |= a.input;
  }
  std::vector<OutsideFunction> sorted() const {
    std::vector<OutsideFunction> out;
    for (const auto& [key, e] : by_function_) {
      if (e.ns == 0) continue;
      auto line = std::max_element(e.by_line.begin(), e.by_line.end(),
                                   [](const auto& x, const auto& y) { return x.second < y.second; });
      out.push_back(OutsideFunction{key.second, key.first, line->first, e.ns, e.input});
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const OutsideFunction& x, const OutsideFunction& y) { return x.ns > y.ns; });
    return out;
  }

 private:
  struct Entry {
    uint64_t ns = 0;
    std::map<int, uint64_t> by_line;
    bool input = false;
  };
  std::map<std::pair<std::string, std::string>, Entry> by_function_;
};

class StackCache {
 public:
  explicit StackCache(const TraceModel& m) : m_(m) {}
  const Attributed& of(uint32_t stack) {
    auto [it, fresh] = cache_.try_emplace(stack);
    if (fresh) it->second = attribute(m_.name(stack));
    return it->second;
  }

 private:
  const TraceModel& m_;
  std::unordered_map<uint32_t, Attributed> cache_;
};

// The samples of `tid` that end in (start_ns, end_ns].
std::pair<size_t, size_t> samples_in(const TraceModel& m, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  auto key = [](const StackSample& s) { return std::make_pair(s.tid, s.end_ns); };
  auto first = std::upper_bound(
      m.stack_samples.begin(), m.stack_samples.end(), std::make_pair(tid, start_ns),
      [&](const std::pair<uint32_t, uint64_t>& v, const StackSample& s) { return v < key(s); });
  auto last = std::upper_bound(
      first, m.stack_samples.end(), std::make_pair(tid, end_ns),
      [&](const std::pair<uint32_t, uint64_t>& v, const StackSample& s) { return v < key(s); });
  return {static_cast<size_t>(first - m.stack_samples.begin()),
          static_cast<size_t>(last - m.stack_samples.begin())};
}

}  // namespace

OutsideOperators outside_operators(const TraceModel& m) {
  OutsideOperators out;
  out.steps = static_cast<int64_t>(m.steps.size());
  if (m.stack_samples.empty()) return out;
  if (m.operator_sampling > 1) {
    out.not_attributed = "operators are sampled, 1 call in " + std::to_string(m.operator_sampling) +
                         " recorded: the time between recorded operators is mostly operators not recorded";
    return out;
  }
  StackCache cache(m);
  FunctionTotals run;
  for (const StepWindow& w : steps_by_start(m.steps)) {
    auto [first, last] = samples_in(m, w.tid, w.start_ns, w.end_ns);
    if (first == last) continue;
    FunctionTotals step;
    for (size_t i = first; i < last; ++i) {
      const StackSample& s = m.stack_samples[i];
      const Attributed& a = cache.of(s.stack);
      if (!a.known) continue;
      ++out.samples;
      out.outside_ns += s.outside_ns;
      step.add(a, s.outside_ns);
      run.add(a, s.outside_ns);
    }
    out.by_step.emplace_back(w.number, step.sorted());
  }
  std::sort(out.by_step.begin(), out.by_step.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out.functions = run.sorted();
  return out;
}

namespace {

std::string top_in(const TraceModel& m, StackCache& cache, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  if (end_ns <= start_ns) return "";
  auto [first, last] = samples_in(m, tid, start_ns, end_ns);
  FunctionTotals totals;
  for (size_t i = first; i < last; ++i) {
    const Attributed& a = cache.of(m.stack_samples[i].stack);
    if (a.known) totals.add(a, m.stack_samples[i].outside_ns);
  }
  std::vector<OutsideFunction> sorted = totals.sorted();
  return sorted.empty() ? "" : describe(sorted.front());
}

}  // namespace

std::string top_outside_function(const TraceModel& m, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  if (m.stack_samples.empty()) return "";
  StackCache cache(m);
  return top_in(m, cache, tid, start_ns, end_ns);
}

std::vector<std::string> path_outside_functions(const TraceModel& m, const std::vector<PathSegment>& path) {
  std::vector<std::string> out(path.size());
  if (m.stack_samples.empty()) return out;
  StackCache cache(m);  // each stack read once for all the segments
  for (size_t i = 0; i < path.size(); ++i) {
    const PathSegment& s = path[i];
    if (s.kind == PathKind::kHostUntracked)
      out[i] = top_in(m, cache, s.tid, s.start_ns, s.start_ns + s.span_ns);
  }
  return out;
}

std::string describe(const OutsideFunction& f) {
  size_t slash = f.file.find_last_of('/');
  std::string file = slash == std::string::npos ? f.file : f.file.substr(slash + 1);
  return f.function + " (" + file + ":" + std::to_string(f.line) + ")";
}

}  // namespace trainprof::analysis
