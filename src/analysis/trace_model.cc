// Copyright trainprof authors.
#include "analysis/trace_model.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <filesystem>
#include <unordered_map>

namespace trainprof::analysis {
namespace {

constexpr std::string_view kStepPrefix = "ProfilerStep#";

// Model-wide string table; each file's ids are remapped once it is read.
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

// Collects one file's events with file-local string ids.
struct FileEvents {
  size_t first_slice, first_instant, first_counter, first_async;
  std::unordered_map<uint64_t, uint64_t> async_end_ns;  // an end may precede its begin
};

}  // namespace

int64_t TraceModel::step_number(const Slice& s) const {
  if (!s.is_step) return -1;
  std::string_view n = name(s.name);
  if (!n.starts_with(kStepPrefix)) return -1;
  int64_t v = -1;
  std::from_chars(n.data() + kStepPrefix.size(), n.data() + n.size(), v);
  return v;
}

bool build_model(const std::string& run_dir, TraceModel* model, std::string* error) {
  TraceModel& m = *model;
  StringMerger merger(&m);
  std::vector<std::string> paths = raw::raw_files_of_run(run_dir, error);
  if (paths.empty()) return false;
  // Reserve by the raw size (an event takes >= 4 bytes on disk): no
  // reallocation copies; capacity never touched costs no resident memory.
  uint64_t raw_bytes = 0;
  for (const std::string& path : paths) {
    std::error_code ec;
    raw_bytes += std::filesystem::file_size(path, ec);
  }
  m.slices.reserve(raw_bytes / 4);
  bool first_file = true;
  for (const std::string& path : paths) {
    FileEvents fe{m.slices.size(), m.instants.size(), m.counters.size(), m.async_ranges.size(), {}};
    raw::EventSink sink = [&m, &fe](const raw::RawEvent* events, size_t count) {
      m.event_count += count;
      for (const raw::RawEvent* e_ptr = events; e_ptr != events + count; ++e_ptr) {
        const raw::RawEvent& e = *e_ptr;
        switch (e.kind) {
          case raw::EventKind::kRange:
          case raw::EventKind::kStep: {
            Slice s;
            s.start_ns = e.t0_ns;
            s.end_ns = e.t1_ns;
            s.tid = e.tid;
            s.name = e.name_id;
            s.is_step = e.kind == raw::EventKind::kStep;
            m.slices.push_back(s);
            break;
          }
          case raw::EventKind::kMark:
            m.instants.push_back(Instant{e.t0_ns, e.tid, e.name_id, static_cast<uint32_t>(e.a)});
            break;
          case raw::EventKind::kCounter:
            m.counters.push_back(CounterSample{e.t0_ns, e.tid, e.name_id, std::bit_cast<double>(e.b)});
            break;
          case raw::EventKind::kAsyncBegin:
            m.async_ranges.push_back(
                AsyncRange{e.t0_ns, 0, e.tid, e.name_id, static_cast<uint32_t>(e.a), e.b});
            break;
          case raw::EventKind::kAsyncEnd: fe.async_end_ns[e.b] = e.t0_ns; break;
        }
      }
    };
    std::error_code size_ec;
    if (std::filesystem::file_size(path, size_ec) == 0 && !size_ec) {
      // Created, then the process died before the header reached the disk.
      m.warnings.push_back(path + " is empty: the process ended before writing any data");
      continue;
    }
    std::optional<raw::RawFile> f = raw::read_raw_file(path, error, &sink);
    if (!f) return false;
    if (first_file) {
      m.rank = f->header.rank;
      m.world_size = f->header.world_size;
      m.host = f->host;
      m.pid = f->header.pid;
      m.realtime_offset_ns = f->realtime_offset_ns();
      m.session_start_ns = f->anchors.front().monotonic_ns;
      first_file = false;
    }
    for (const raw::RawIssue& issue : f->issues) {
      m.warnings.push_back(issue.file + " at offset " + std::to_string(issue.offset) + ": " + issue.message);
    }
    if (!f->closed_cleanly) {
      m.warnings.push_back(
          f->path + " was not closed normally (process killed or still running); analysing what was flushed");
    }
    // File-local string ids -> model ids.
    std::vector<uint32_t> ids = merger.map_file(*f);
    auto id = [&](uint32_t file_id) { return file_id < ids.size() ? ids[file_id] : 0u; };
    for (size_t i = fe.first_slice; i < m.slices.size(); ++i) m.slices[i].name = id(m.slices[i].name);
    for (size_t i = fe.first_instant; i < m.instants.size(); ++i) {
      m.instants[i].name = id(m.instants[i].name);
      m.instants[i].domain = id(m.instants[i].domain);
    }
    for (size_t i = fe.first_counter; i < m.counters.size(); ++i) m.counters[i].name = id(m.counters[i].name);
    size_t unended = 0;
    for (size_t i = fe.first_async; i < m.async_ranges.size(); ++i) {
      AsyncRange& a = m.async_ranges[i];
      a.name = id(a.name);
      a.domain = id(a.domain);
      auto it = fe.async_end_ns.find(a.id);
      if (it != fe.async_end_ns.end()) {
        a.end_ns = std::max(it->second, a.start_ns);
      } else {
        ++unended;
      }
    }
    if (unended > 0) {
      m.warnings.push_back(std::to_string(unended) +
                           " range_start() without range_end(); shown up to the end of the run");
    }
    for (const auto& [tid, name] : f->thread_names) m.thread_names[tid] = name;
  }
  // Steps, and unended async ranges closed at the last event of the run.
  uint64_t last = m.session_start_ns;
  for (const Slice& s : m.slices) {
    last = std::max(last, s.end_ns);
    if (s.is_step) m.steps.push_back(StepWindow{m.step_number(s), s.start_ns, s.end_ns});
  }
  for (AsyncRange& a : m.async_ranges) {
    if (a.end_ns == 0) a.end_ns = std::max(a.start_ns, last);
  }
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.number < b.number; });
  return true;
}

}  // namespace trainprof::analysis
