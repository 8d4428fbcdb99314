// Copyright trainprof authors.
#include "analysis/trace_model.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <filesystem>
#include <unordered_map>

#include "analysis/timeline.h"
#include "raw/varint.h"

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

// One file's events carry file-local string ids (and slice keys made of
// them) until the file has been read and its string table is known.
struct FileEvents {
  explicit FileEvents(const TraceModel& m)
      : first_instant(m.instants.size()),
        first_counter(m.counters.size()),
        first_async(m.async_ranges.size()),
        first_data(m.data_stages.size()),
        key_table(64, KeySlot{~0ull, 0, 0}) {
    for (const ThreadSlices& t : m.threads) first_slice.push_back(t.slices.size());
  }

  // Per model thread: its slice count before this file (threads this file
  // adds start at 0).
  std::vector<size_t> first_slice;
  size_t first_instant, first_counter, first_async, first_data;
  std::unordered_map<uint64_t, uint64_t> async_end_ns;  // an end may precede its begin
  std::vector<SliceKey> local_keys;
  // SliceKey -> local key: an open-addressing table, because nested ranges
  // alternate names and every range looks its key up.
  struct KeySlot {
    uint64_t tid_name;  // ~0: empty
    uint64_t rest;
    uint32_t key;
  };
  std::vector<KeySlot> key_table;
  // Resolved in finish(), once slices have their final keys (an operator's
  // inputs re-key it after it was added).
  std::vector<std::pair<SliceRef, uint64_t>> long_durations;
  struct PendingLink {
    SliceRef slice;
    uint32_t fwd_thread;
    int64_t sequence_nr;
  };
  std::vector<PendingLink> links;
  // Each thread's last operator, for its kOperatorInputs record.
  std::unordered_map<uint32_t, SliceRef> last_op;
  // The thread of the last event: events come a chunk (one thread) at a time.
  uint32_t cached_tid = 0;
  uint32_t cached_thread = ~0u;

  static std::pair<uint64_t, uint64_t> pack(const SliceKey& k) {
    return {(uint64_t{k.tid} << 32) | k.name, (uint64_t{k.inputs} << 32) | (uint64_t{k.op_flags} << 8) |
                                                  (k.is_op ? 2u : 0u) | (k.is_step ? 1u : 0u)};
  }
  static size_t slot_of(std::pair<uint64_t, uint64_t> p) {
    return ((p.first ^ (p.second * 0xff51afd7ed558ccdull)) * 0x9E3779B97F4A7C15ull) >> 40;
  }

  uint32_t local_key(const SliceKey& k) {
    auto p = pack(k);
    size_t mask = key_table.size() - 1;
    for (size_t i = slot_of(p);; ++i) {
      KeySlot& slot = key_table[i & mask];
      if (slot.tid_name == p.first && slot.rest == p.second) return slot.key;
      if (slot.tid_name != ~0ull) continue;
      slot = KeySlot{p.first, p.second, static_cast<uint32_t>(local_keys.size())};
      local_keys.push_back(k);
      if (local_keys.size() * 2 > key_table.size()) grow_key_table();
      return static_cast<uint32_t>(local_keys.size() - 1);
    }
  }
  void grow_key_table() {
    std::vector<KeySlot> old(key_table.size() * 2, KeySlot{~0ull, 0, 0});
    old.swap(key_table);
    size_t mask = key_table.size() - 1;
    for (const KeySlot& slot : old) {
      if (slot.tid_name == ~0ull) continue;
      size_t i = slot_of({slot.tid_name, slot.rest});
      while (key_table[i & mask].tid_name != ~0ull) ++i;
      key_table[i & mask] = slot;
    }
  }

  uint32_t thread(TraceModel& m, uint32_t tid) {
    if (tid != cached_tid || cached_thread == ~0u) {
      cached_tid = tid;
      cached_thread = m.thread_of(tid);
    }
    return cached_thread;
  }

  SliceRef add_slice(TraceModel& m, const raw::RawEvent& e, const SliceKey& k) {
    Slice s;
    s.start_ns = e.t0_ns;
    s.key = local_key(k);
    uint64_t dur = e.t1_ns - e.t0_ns;
    s.dur32 = dur < kLongDuration ? static_cast<uint32_t>(dur) : kLongDuration;
    uint32_t t = thread(m, e.tid);
    std::vector<Slice>& slices = m.threads[t].slices;
    SliceRef ref{t, slices.size()};
    if (s.dur32 == kLongDuration) long_durations.push_back({ref, dur});
    slices.push_back(s);
    return ref;
  }

  void add(TraceModel& m, const raw::RawEvent& e) {
    switch (e.kind) {
      case raw::EventKind::kRange:
      case raw::EventKind::kStep: {
        SliceKey k;
        k.tid = e.tid;
        k.name = e.name_id;
        k.is_step = e.kind == raw::EventKind::kStep;
        add_slice(m, e, k);
        break;
      }
      case raw::EventKind::kOperator: {
        SliceKey k;
        k.tid = e.tid;
        k.name = e.name_id;
        k.is_op = true;
        k.op_flags = static_cast<uint8_t>(e.a & 0xff);
        SliceRef ref = add_slice(m, e, k);
        last_op[e.tid] = ref;
        if (e.b != 0) {
          links.push_back(PendingLink{ref, static_cast<uint32_t>(e.a >> 8), static_cast<int64_t>(e.b - 1)});
        }
        break;
      }
      case raw::EventKind::kOperatorInputs: {
        auto it = last_op.find(e.tid);
        if (it == last_op.end() || m.slice(it->second).start_ns != e.t0_ns) break;  // its operator was lost
        Slice& op = m.slice(it->second);
        SliceKey k = local_keys[op.key];
        k.inputs = e.name_id;
        op.key = local_key(k);
        last_op.erase(it);
        break;
      }
      case raw::EventKind::kMark:
        m.instants.push_back(Instant{e.t0_ns, e.tid, e.name_id, static_cast<uint32_t>(e.a)});
        break;
      case raw::EventKind::kCounter:
        m.counters.push_back(CounterSample{e.t0_ns, e.tid, e.name_id, std::bit_cast<double>(e.b)});
        break;
      case raw::EventKind::kAsyncBegin:
        m.async_ranges.push_back(AsyncRange{e.t0_ns, 0, e.tid, e.name_id, static_cast<uint32_t>(e.a), e.b});
        break;
      case raw::EventKind::kAsyncEnd: async_end_ns[e.b] = e.t0_ns; break;
      case raw::EventKind::kDataStage:
        m.data_stages.push_back(DataStageSlice{e.t0_ns, e.t1_ns - e.t0_ns, e.tid, e.name_id,
                                               static_cast<uint32_t>(e.a), static_cast<uint32_t>(e.b)});
        break;
      case raw::EventKind::kMemory:
        m.memory.push_back(MemoryRecord{e.t0_ns, e.b, raw::unzigzag(e.a), e.total_allocated, e.total_reserved,
                                        e.tid, static_cast<uint32_t>(e.device)});
        break;
    }
  }

  // File-local ids -> model ids, once the file's strings are known.
  void finish(TraceModel& m, const std::vector<uint32_t>& ids) {
    auto id = [&](uint32_t file_id) { return file_id < ids.size() ? ids[file_id] : 0u; };
    std::vector<uint32_t> model_key(local_keys.size());
    for (size_t k = 0; k < local_keys.size(); ++k) {
      SliceKey key = local_keys[k];
      key.name = id(key.name);
      key.inputs = id(key.inputs);
      model_key[k] = m.key_of(key);
    }
    for (size_t t = 0; t < m.threads.size(); ++t) {
      std::vector<Slice>& slices = m.threads[t].slices;
      for (size_t i = t < first_slice.size() ? first_slice[t] : 0; i < slices.size(); ++i) {
        slices[i].key = model_key[slices[i].key];
      }
    }
    for (const auto& [ref, dur] : long_durations) {
      const Slice& s = m.slice(ref);
      m.long_durations[{s.start_ns, s.key}] = dur;
    }
    for (const PendingLink& l : links) {
      const Slice& s = m.slice(l.slice);
      m.op_links.push_back(OpLink{s.start_ns, s.key, l.fwd_thread, l.sequence_nr});
    }
    for (size_t i = first_instant; i < m.instants.size(); ++i) {
      m.instants[i].name = id(m.instants[i].name);
      m.instants[i].domain = id(m.instants[i].domain);
    }
    for (size_t i = first_counter; i < m.counters.size(); ++i) m.counters[i].name = id(m.counters[i].name);
    for (size_t i = first_data; i < m.data_stages.size(); ++i) {
      DataStageSlice& d = m.data_stages[i];
      d.operation = id(d.operation);
      d.stage = id(d.stage);
      d.custom_info = id(d.custom_info);
    }
    size_t unended = 0;
    for (size_t i = first_async; i < m.async_ranges.size(); ++i) {
      AsyncRange& a = m.async_ranges[i];
      a.name = id(a.name);
      a.domain = id(a.domain);
      auto it = async_end_ns.find(a.id);
      if (it != async_end_ns.end()) {
        a.end_ns = std::max(it->second, a.start_ns);
      } else {
        ++unended;
      }
    }
    if (unended > 0) {
      m.warnings.push_back(std::to_string(unended) +
                           " range_start() without range_end(); shown up to the end of the run");
    }
  }
};

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

int64_t TraceModel::step_number(const Slice& s) const {
  if (!is_step(s)) return -1;
  std::string_view n = name(name_id(s));
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
  bool first_file = true;
  for (const std::string& path : paths) {
    std::error_code size_ec;
    if (std::filesystem::file_size(path, size_ec) == 0 && !size_ec) {
      // Created, then the process died before the header reached the disk.
      m.warnings.push_back(path + " is empty: the process ended before writing any data");
      continue;
    }
    // Reserve each thread's slices by its record count in the chunk
    // headers: no reallocation copies, and capacity never touched (records
    // that are not slices) is not resident. The counts come from chunks
    // whose checksum holds and are capped by their bytes.
    for (const auto& [tid, records] : raw::event_records_by_thread(path)) {
      std::vector<Slice>& slices = m.threads[m.thread_of(tid)].slices;
      slices.reserve(slices.size() + records);
    }
    FileEvents fe(m);
    raw::EventSink sink = [&m, &fe](const raw::RawEvent* events, size_t count) {
      m.event_count += count;
      for (size_t i = 0; i < count; ++i) fe.add(m, events[i]);
    };
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
    m.chunks_duplicated += f->chunks_duplicated;
    m.chunks_missing += f->chunks_missing;
    m.chunks_reordered += f->chunks_reordered;
    for (const raw::RawIssue& issue : f->issues) {
      m.warnings.push_back(issue.file + " at offset " + std::to_string(issue.offset) + ": " + issue.message);
    }
    if (!f->closed_cleanly) {
      m.warnings.push_back(
          f->path + " was not closed normally (process killed or still running); analysing what was flushed");
    }
    fe.finish(m, merger.map_file(*f));
    for (const auto& [tid, name] : f->thread_names) m.thread_names[tid] = name;
  }
  // Steps, and unended async ranges closed at the last event of the run.
  order_timeline(m);
  uint64_t last = m.session_start_ns;
  for (const ThreadSlices& t : m.threads) {
    for (const Slice& s : t.slices) {
      last = std::max(last, m.end(s));
      if (m.is_step(s)) m.steps.push_back(StepWindow{m.step_number(s), s.start_ns, m.end(s)});
    }
  }
  for (AsyncRange& a : m.async_ranges) {
    if (a.end_ns == 0) a.end_ns = std::max(a.start_ns, last);
  }
  std::sort(m.op_links.begin(), m.op_links.end(), [](const OpLink& a, const OpLink& b) {
    return std::make_pair(a.start_ns, a.key) < std::make_pair(b.start_ns, b.key);
  });
  std::stable_sort(m.memory.begin(), m.memory.end(),
                   [](const MemoryRecord& a, const MemoryRecord& b) { return a.ts_ns < b.ts_ns; });
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.number < b.number; });
  return true;
}

}  // namespace trainprof::analysis
