// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/memory.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "raw/format.h"

namespace trainprof::analysis {
namespace {

// The reports [first, last) of each thread (indices into TraceModel::memory,
// in time order).
std::unordered_map<uint32_t, std::vector<uint32_t>> reports_by_thread(const std::vector<MemoryRecord>& memory,
                                                                      size_t first, size_t last) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_tid;
  for (size_t i = first; i < last; ++i) by_tid[memory[i].tid].push_back(static_cast<uint32_t>(i));
  return by_tid;
}

// Walks one thread's slices (start order, parents first) alongside its
// reports, keeping the stack of operators open at the current time.
void attribute_thread(const TraceModel& m, const std::vector<MemoryRecord>& memory,
                      const std::vector<Slice>& slices, const std::vector<uint32_t>& reports,
                      std::vector<uint32_t>* names, std::vector<uint32_t>* keys) {
  std::vector<const Slice*> open;
  size_t next = 0;
  for (uint32_t r : reports) {
    uint64_t ts = memory[r].ts_ns;
    for (; next < slices.size() && slices[next].start_ns <= ts; ++next) {
      const Slice& s = slices[next];
      if (!m.is_op(s)) continue;
      while (!open.empty() && m.end(*open.back()) <= s.start_ns) open.pop_back();
      open.push_back(&s);
    }
    while (!open.empty() && m.end(*open.back()) <= ts) open.pop_back();
    (*names)[r] = open.empty() ? 0 : m.name_id(*open.back());
    if (keys != nullptr) (*keys)[r] = open.empty() ? 0 : open.back()->key + 1;
  }
}

uint64_t allocation_key(const MemoryRecord& r) {
  // User-space addresses use 48 bits; the device keeps devices apart.
  return r.address ^ (uint64_t{r.device} << 48);
}

}  // namespace

void memory_operators(const TraceModel& m, size_t first, size_t last, std::vector<uint32_t>* names,
                      std::vector<uint32_t>* keys) {
  memory_operators(m, m.memory, first, last, names, keys);
}

void memory_operators(const TraceModel& m, const std::vector<MemoryRecord>& memory, size_t first, size_t last,
                      std::vector<uint32_t>* names, std::vector<uint32_t>* keys) {
  if (first >= last) return;
  auto by_tid = reports_by_thread(memory, first, last);
  for (const ThreadSlices& t : m.threads) {
    auto it = by_tid.find(t.tid);
    if (it != by_tid.end()) attribute_thread(m, memory, t.slices, it->second, names, keys);
  }
}

std::vector<uint32_t> memory_operators(const TraceModel& m) {
  std::vector<uint32_t> names(m.memory.size(), 0);
  memory_operators(m, 0, m.memory.size(), &names);
  return names;
}

MemoryMatch match_allocations(const TraceModel& m, const std::vector<uint32_t>& operators) {
  MemoryMatch out;
  std::unordered_map<uint64_t, size_t> open;  // allocation key -> row
  for (size_t i = 0; i < m.memory.size(); ++i) {
    const MemoryRecord& r = m.memory[i];
    if (r.bytes >= 0) {
      OperatorMemoryRow row;
      row.name = operators[i];
      row.device = r.device;
      row.bytes = static_cast<uint64_t>(r.bytes);
      row.alloc_ns = r.ts_ns;
      row.alloc_total_allocated = r.total_allocated;
      row.alloc_total_reserved = r.total_reserved;
      // An address reused without a reported free leaves the older row open.
      open[allocation_key(r)] = out.rows.size();
      out.rows.push_back(row);
      continue;
    }
    ++out.frees;
    auto it = open.find(allocation_key(r));
    if (it == open.end()) continue;  // allocated before the window
    OperatorMemoryRow& row = out.rows[it->second];
    row.released = true;
    row.release_ns = r.ts_ns;
    row.release_total_allocated = r.total_allocated;
    row.release_total_reserved = r.total_reserved;
    open.erase(it);
    ++out.frees_matched;
  }
  return out;
}

std::vector<StepMemoryPeak> step_memory_peaks(const TraceModel& m) {
  std::vector<StepMemoryPeak> out;
  if (m.memory.empty()) return out;
  const std::vector<StepWindow> steps = steps_by_start(m.steps);
  std::map<uint32_t, uint64_t> current;  // device -> total allocated after the last report
  size_t r = 0;
  for (const StepWindow& w : steps) {
    for (; r < m.memory.size() && m.memory[r].ts_ns < w.start_ns; ++r) {
      current[m.memory[r].device] = m.memory[r].total_allocated;
    }
    std::map<uint32_t, uint64_t> peak = current;
    for (; r < m.memory.size() && m.memory[r].ts_ns < w.end_ns; ++r) {
      const MemoryRecord& rec = m.memory[r];
      current[rec.device] = rec.total_allocated;
      peak[rec.device] = std::max(peak[rec.device], rec.total_allocated);
    }
    for (const auto& [device, bytes] : peak) out.push_back(StepMemoryPeak{w.number, device, bytes});
  }
  return out;
}

}  // namespace trainprof::analysis
