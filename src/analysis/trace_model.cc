// Copyright trainprof authors.
#include "analysis/trace_model.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace trainprof::analysis {
namespace {

// Maps each file's string ids to the model's (files have their own tables).
class StringMerger {
 public:
  explicit StringMerger(TraceModel* model) : model_(model) {
    model_->strings.assign(1, std::string());
    index_.emplace(std::string(), 0);
  }
  std::vector<uint32_t> map_file(const raw::RawFile& f) {
    std::vector<uint32_t> ids(f.strings.size(), 0);
    for (size_t i = 1; i < f.strings.size(); ++i) ids[i] = intern(f.strings[i]);
    return ids;
  }
  uint32_t intern(const std::string& s) {
    auto [it, inserted] = index_.emplace(s, static_cast<uint32_t>(model_->strings.size()));
    if (inserted) model_->strings.push_back(s);
    return it->second;
  }

 private:
  TraceModel* model_;
  std::unordered_map<std::string, uint32_t> index_;
};

}  // namespace

TraceModel build_model(std::vector<raw::RawFile> files) {
  TraceModel m;
  StringMerger merger(&m);
  if (!files.empty()) {
    const raw::RawFile& first = files.front();
    m.rank = first.header.rank;
    m.world_size = first.header.world_size;
    m.host = first.host;
    m.pid = first.header.pid;
    m.realtime_offset_ns = first.realtime_offset_ns();
    m.session_start_ns = first.anchors.front().monotonic_ns;
  }
  for (const raw::RawFile& f : files) {
    for (const raw::RawIssue& issue : f.issues) {
      m.warnings.push_back(issue.file + " at offset " + std::to_string(issue.offset) + ": " + issue.message);
    }
    if (!f.closed_cleanly) {
      m.warnings.push_back(f.path +
                           " was not closed normally (process killed or still running); "
                           "analysing what was flushed");
    }
    std::vector<uint32_t> ids = merger.map_file(f);
    auto id = [&](uint64_t file_id) { return file_id < ids.size() ? ids[file_id] : 0u; };
    for (const auto& [tid, name] : f.thread_names) m.thread_names[tid] = name;
    // An end may precede its begin in the file (other thread, other chunk).
    std::unordered_map<uint64_t, uint64_t> async_end_ns;  // range id -> end
    size_t first_async = m.async_ranges.size();
    m.event_count += f.events.size();
    for (const raw::RawEvent& e : f.events) {
      switch (e.kind) {
        case raw::EventKind::kRange:
          m.slices.push_back(Slice{e.t0_ns, e.t1_ns, 0, e.tid, id(e.name_id), SliceKind::kUserRange, -1});
          break;
        case raw::EventKind::kStep: {
          auto step = static_cast<int64_t>(e.b);
          m.slices.push_back(Slice{e.t0_ns, e.t1_ns, 0, e.tid, id(e.name_id), SliceKind::kStep, step});
          m.steps.push_back(StepWindow{step, e.t0_ns, e.t1_ns});
          break;
        }
        case raw::EventKind::kMark:
          m.instants.push_back(Instant{e.t0_ns, e.tid, id(e.name_id), id(e.a)});
          break;
        case raw::EventKind::kCounter:
          m.counters.push_back(CounterSample{e.t0_ns, e.tid, id(e.name_id), std::bit_cast<double>(e.b)});
          break;
        case raw::EventKind::kAsyncBegin:
          m.async_ranges.push_back(AsyncRange{e.t0_ns, 0, e.tid, id(e.name_id), id(e.a), e.b});
          break;
        case raw::EventKind::kAsyncEnd: async_end_ns[e.b] = e.t0_ns; break;
      }
    }
    size_t unended = 0;
    for (size_t i = first_async; i < m.async_ranges.size(); ++i) {
      auto it = async_end_ns.find(m.async_ranges[i].id);
      if (it != async_end_ns.end()) {
        m.async_ranges[i].end_ns = std::max(it->second, m.async_ranges[i].start_ns);
      } else {
        ++unended;
      }
    }
    if (unended > 0) {
      m.warnings.push_back(std::to_string(unended) +
                           " range_start() without range_end(); shown up to the end of the run");
    }
  }
  // Unended async ranges end with the last event of the run.
  uint64_t last = m.session_start_ns;
  for (const Slice& s : m.slices) last = std::max(last, s.end_ns);
  for (AsyncRange& a : m.async_ranges) {
    if (a.end_ns == 0) a.end_ns = std::max(a.start_ns, last);
  }
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.number < b.number; });
  return m;
}

}  // namespace trainprof::analysis
