// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/trace_model.h"

#include <algorithm>
#include <charconv>

namespace trainprof::analysis {
namespace {

constexpr std::string_view kStepPrefix = "ProfilerStep#";

}  // namespace

uint32_t TraceModel::key_of(const SliceKey& key) {
  auto [it, inserted] = key_index_.emplace(key.tie(), static_cast<uint32_t>(keys.size()));
  if (inserted) keys.push_back(key);
  return it->second;
}

uint32_t TraceModel::thread_of(uint32_t tid) {
  auto [it, inserted] = thread_index_.emplace(tid, static_cast<uint32_t>(threads.size()));
  if (inserted) threads.push_back(ThreadSlices{tid, {}});
  return it->second;
}

size_t TraceModel::slice_count() const {
  size_t n = 0;
  for (const ThreadSlices& t : threads) n += t.slices.size();
  return n;
}

void TraceModel::sort_threads() {
  std::sort(threads.begin(), threads.end(),
            [](const ThreadSlices& a, const ThreadSlices& b) { return a.tid < b.tid; });
  thread_index_.clear();
  for (size_t i = 0; i < threads.size(); ++i) thread_index_[threads[i].tid] = static_cast<uint32_t>(i);
}

const OpLink* TraceModel::op_link(const Slice& s) const {
  auto before = [](const OpLink& l, std::pair<uint64_t, uint32_t> at) {
    return std::make_pair(l.start_ns, l.key) < at;
  };
  auto it = std::lower_bound(op_links.begin(), op_links.end(), std::make_pair(s.start_ns, s.key), before);
  return it != op_links.end() && it->start_ns == s.start_ns && it->key == s.key ? &*it : nullptr;
}

std::vector<StepWindow> steps_by_start(std::vector<StepWindow> steps) {
  std::sort(steps.begin(), steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.start_ns < b.start_ns; });
  return steps;
}

int64_t step_at(const std::vector<StepWindow>& by_start, uint64_t t) {
  auto it = std::upper_bound(by_start.begin(), by_start.end(), t,
                             [](uint64_t v, const StepWindow& w) { return v < w.start_ns; });
  if (it == by_start.begin()) return -1;
  --it;
  return t < it->end_ns ? it->number : -1;
}

int64_t TraceModel::step_number(const Slice& s) const {
  if (!is_step(s)) return -1;
  std::string_view n = name(name_id(s));
  if (!n.starts_with(kStepPrefix)) return -1;
  int64_t v = -1;
  std::from_chars(n.data() + kStepPrefix.size(), n.data() + n.size(), v);
  return v;
}

}  // namespace trainprof::analysis
