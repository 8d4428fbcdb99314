// Copyright trainprof authors.
#include "analysis/run_loader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include "analysis/timeline.h"
#include "core/log.h"
#include "raw/raw_reader.h"
#include "raw/varint.h"

namespace trainprof::analysis {
namespace {

constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
// The scan keeps this many of the longest slices whole (256 KiB): a
// range around the whole run, recorded at its end, then holds no window back.
constexpr size_t kMaxHeldSlices = size_t{1} << 12;
// Emptied window buffers kept for reuse.
constexpr size_t kSpareBuffers = 4;
// One slice in this many goes into the sample that plans windows and sizes
// their buffers.
constexpr uint64_t kSampleEvery = 1024;

// Where an event was recorded: its chunk (numbered in read order over all of
// a run's files) and its index in the chunk. Both passes read the same
// chunks in the same order, so it names one event in both.
uint64_t position_of(uint64_t chunk, size_t index) {
  return (chunk << 32) | index;
}

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

// A raw file's slice keys in its own string ids, and their model keys once
// its strings are known. Both passes look keys up here.
class FileKeys {
 public:
  FileKeys() : table_(64, Slot{~0ull, 0, 0}) {}

  // The file-local index of `k`, created on first use. An open-addressing
  // table, because nested ranges alternate names and every range looks its
  // key up.
  uint32_t local(const SliceKey& k) {
    auto p = pack(k);
    size_t mask = table_.size() - 1;
    for (size_t i = slot_of(p);; ++i) {
      Slot& slot = table_[i & mask];
      if (slot.tid_name == p.first && slot.rest == p.second) return slot.key;
      if (slot.tid_name != ~0ull) continue;
      slot = Slot{p.first, p.second, static_cast<uint32_t>(keys_.size())};
      keys_.push_back(k);
      if (keys_.size() * 2 > table_.size()) grow();
      return static_cast<uint32_t>(keys_.size() - 1);
    }
  }
  const SliceKey& key(uint32_t local) const { return keys_[local]; }

  // local() of a plain range (not a step, not an operator) of thread `tid`:
  // by name id from a table per thread, the common case made one load.
  uint32_t local_range(uint32_t tid, uint32_t name) {
    if (tid != range_tid_ || ranges_ == nullptr) {
      ranges_ = &ranges_by_thread_[tid];
      range_tid_ = tid;
    }
    std::vector<uint32_t>& by_name = *ranges_;
    if (name < by_name.size() && by_name[name] != kUnset) return by_name[name];
    SliceKey k;
    k.tid = tid;
    k.name = name;
    uint32_t local = this->local(k);
    // Ids are dense from 1; a table for far larger ones would waste memory.
    if (name < (1u << 20)) {
      if (by_name.size() <= name) by_name.resize(name + 1, kUnset);
      by_name[name] = local;
    }
    return local;
  }

  // The model key of a local key, once `ids` (file string id -> model id)
  // is set.
  uint32_t model(TraceModel& m, uint32_t local) {
    while (model_.size() <= local) {
      SliceKey k = keys_[model_.size()];
      k.name = id(k.name);
      k.inputs = id(k.inputs);
      model_.push_back(m.key_of(k));
    }
    return model_[local];
  }
  uint32_t id(uint32_t file_id) const { return file_id < ids.size() ? ids[file_id] : 0u; }

  std::vector<uint32_t> ids;

 private:
  struct Slot {
    uint64_t tid_name;  // ~0: empty
    uint64_t rest;
    uint32_t key;
  };
  static std::pair<uint64_t, uint64_t> pack(const SliceKey& k) {
    return {(uint64_t{k.tid} << 32) | k.name, (uint64_t{k.inputs} << 32) | (uint64_t{k.op_flags} << 8) |
                                                  (k.is_op ? 2u : 0u) | (k.is_step ? 1u : 0u)};
  }
  static size_t slot_of(std::pair<uint64_t, uint64_t> p) {
    return ((p.first ^ (p.second * 0xff51afd7ed558ccdull)) * 0x9E3779B97F4A7C15ull) >> 40;
  }
  void grow() {
    std::vector<Slot> old(table_.size() * 2, Slot{~0ull, 0, 0});
    old.swap(table_);
    size_t mask = table_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.tid_name == ~0ull) continue;
      size_t i = slot_of({slot.tid_name, slot.rest});
      while (table_[i & mask].tid_name != ~0ull) ++i;
      table_[i & mask] = slot;
    }
  }

  static constexpr uint32_t kUnset = ~0u;
  std::vector<SliceKey> keys_;
  std::vector<Slot> table_;
  std::vector<uint32_t> model_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> ranges_by_thread_;
  std::vector<uint32_t>* ranges_ = nullptr;  // of range_tid_
  uint32_t range_tid_ = 0;
};

// The key of a range, step or operator event, in its file's string ids.
SliceKey slice_key(const raw::RawEvent& e) {
  SliceKey k;
  k.tid = e.tid;
  k.name = e.name_id;
  k.is_step = e.kind == raw::EventKind::kStep;
  k.is_op = e.kind == raw::EventKind::kOperator;
  if (k.is_op) k.op_flags = static_cast<uint8_t>(e.a & 0xff);
  return k;
}

// A slice that the scan keeps whole: a step, or one of the longest.
struct HeldSlice {
  uint64_t start_ns;
  uint64_t dur_ns;
  uint64_t position;
  uint64_t inputs_chunk;  // the chunk of its operator-inputs record, kNone if none
  uint32_t key;           // file-local until its file is scanned, then the model's
  uint32_t tid;
  uint32_t file;
  bool is_step;
};

// Start times of the slices that pass 2 places, per chunk.
struct ChunkStarts {
  uint64_t min = kNone;
  uint64_t max = 0;
  void add(uint64_t t) {
    min = std::min(min, t);
    max = std::max(max, t);
  }
};

// A raw file: its keys, and the chunks it holds.
struct ScannedFile {
  std::string path;
  uint64_t first_chunk = 0;
  uint64_t chunks = 0;
  FileKeys keys;
};

}  // namespace

struct RunLoader::State {
  std::vector<ScannedFile> files;
  std::vector<ChunkStarts> chunks;
  std::vector<HeldSlice> held;          // steps and the longest slices; by position once scanned
  std::vector<uint32_t> held_by_start;  // `held` indices, by start, once scanned
  // The longest slices held, shortest on top; steps are never in it. Entries
  // carry their order so that the heap's moves touch nothing else.
  struct Longest {
    uint64_t dur_ns;
    uint64_t position;
    uint32_t held;  // `held` index
  };
  std::vector<Longest> longest;
  std::vector<uint32_t> free_held;  // `held` entries evicted from the heap
  struct Sampled {
    uint64_t start_ns;
    uint32_t tid;
  };
  std::vector<Sampled> sample;  // every kSampleEvery-th slice, by start once scanned
  uint64_t slices_scanned = 0;
  uint64_t earliest_slice_ns = kNone;
  uint64_t slices_loaded = 0;
  uint64_t windows_loaded = 0;

  // Heap order: shorter first, then recorded earlier (of two equal slices
  // the one recorded later, the enclosing one, stays held). std heaps put
  // the greatest on top: "greater" here is shorter.
  static bool longer(const Longest& a, const Longest& b) {
    return a.dur_ns != b.dur_ns ? a.dur_ns > b.dur_ns : a.position > b.position;
  }

  // Holds `s` if it is a step or among the longest so far; returns its
  // `held` index, or kNone when pass 2 will place it. A slice pushed out
  // of the heap becomes pass 2's: its chunks learn its start.
  // Whether a slice that is not a step could be held: cheap, first.
  bool may_hold(uint64_t dur_ns) const {
    return longest.size() < kMaxHeldSlices || dur_ns >= longest.front().dur_ns;
  }
  uint64_t hold(const HeldSlice& s) {
    if (!s.is_step && longest.size() == kMaxHeldSlices) {
      const Longest& least = longest.front();
      if (s.dur_ns < least.dur_ns || (s.dur_ns == least.dur_ns && s.position < least.position)) return kNone;
      std::pop_heap(longest.begin(), longest.end(), longer);
      release(longest.back().held);
      longest.pop_back();
    }
    uint32_t index;
    if (!free_held.empty()) {
      index = free_held.back();
      free_held.pop_back();
      held[index] = s;
    } else {
      index = static_cast<uint32_t>(held.size());
      held.push_back(s);
    }
    if (!s.is_step) {
      longest.push_back(Longest{s.dur_ns, s.position, index});
      std::push_heap(longest.begin(), longest.end(), longer);
    }
    return index;
  }
  void release(uint32_t index) {
    const HeldSlice& h = held[index];
    chunks[h.position >> 32].add(h.start_ns);
    if (h.inputs_chunk != kNone) chunks[h.inputs_chunk].add(h.start_ns);
    held[index].position = kNone;  // no longer held
    free_held.push_back(index);
  }
};

namespace {

// Pass 1 over one file: everything but the slices goes into the model; the
// slices leave their trace in the sample, the chunk starts and the held set.
class FileScanner {
 public:
  FileScanner(TraceModel& m, RunLoader::State& st, uint32_t file)
      : m_(m),
        st_(st),
        file_(file),
        first_instant_(m.instants.size()),
        first_counter_(m.counters.size()),
        first_async_(m.async_ranges.size()),
        first_data_(m.data_stages.size()) {}

  void chunk(const raw::RawEvent* events, size_t count) {
    uint64_t chunk = st_.chunks.size();
    st_.chunks.emplace_back();
    ++st_.files[file_].chunks;
    m_.event_count += count;
    for (size_t i = 0; i < count; ++i) add(events[i], chunk, i);
  }

  // File-local ids -> model ids, once the file's strings are known.
  void finish(const raw::RawFile& f, StringMerger& merger) {
    FileKeys& keys = st_.files[file_].keys;
    keys.ids = merger.map_file(f);
    for (HeldSlice& h : st_.held) {
      if (h.file == file_ && h.position != kNone) h.key = keys.model(m_, h.key);
    }
    for (const Link& l : links_) {
      m_.op_links.push_back(OpLink{l.start_ns, keys.model(m_, l.key), l.fwd_thread, l.sequence_nr});
    }
    for (size_t i = first_instant_; i < m_.instants.size(); ++i) {
      m_.instants[i].name = keys.id(m_.instants[i].name);
      m_.instants[i].domain = keys.id(m_.instants[i].domain);
    }
    for (size_t i = first_counter_; i < m_.counters.size(); ++i) {
      m_.counters[i].name = keys.id(m_.counters[i].name);
    }
    for (size_t i = first_data_; i < m_.data_stages.size(); ++i) {
      DataStageSlice& d = m_.data_stages[i];
      d.operation = keys.id(d.operation);
      d.stage = keys.id(d.stage);
      d.custom_info = keys.id(d.custom_info);
    }
    size_t unended = 0;
    for (size_t i = first_async_; i < m_.async_ranges.size(); ++i) {
      AsyncRange& a = m_.async_ranges[i];
      a.name = keys.id(a.name);
      a.domain = keys.id(a.domain);
      auto it = async_end_ns_.find(a.id);
      if (it != async_end_ns_.end()) {
        a.end_ns = std::max(it->second, a.start_ns);
      } else {
        ++unended;
      }
    }
    if (unended > 0) {
      m_.warnings.push_back(std::to_string(unended) +
                            " range_start() without range_end(); shown up to the end of the run");
    }
  }

  uint64_t last_end_ns() const { return last_end_ns_; }

 private:
  // The operator before an inputs record (kOperatorInputs follows its
  // operator on the same thread).
  struct LastOp {
    uint64_t start_ns;
    uint64_t position;
    uint64_t held;  // `held` index or kNone
    uint64_t link;  // links_ index or kNone
    uint32_t key;
  };
  struct Link {
    uint64_t start_ns;
    uint32_t key;  // file-local
    uint32_t fwd_thread;
    int64_t sequence_nr;
  };

  void add(const raw::RawEvent& e, uint64_t chunk, size_t index) {
    switch (e.kind) {
      case raw::EventKind::kRange:
      case raw::EventKind::kStep:
      case raw::EventKind::kOperator: slice(e, chunk, index); break;
      case raw::EventKind::kOperatorInputs: inputs(e, chunk); break;
      case raw::EventKind::kMark:
        m_.instants.push_back(Instant{e.t0_ns, e.tid, e.name_id, static_cast<uint32_t>(e.a)});
        break;
      case raw::EventKind::kCounter:
        m_.counters.push_back(CounterSample{e.t0_ns, e.tid, e.name_id, std::bit_cast<double>(e.b)});
        break;
      case raw::EventKind::kAsyncBegin:
        m_.async_ranges.push_back(AsyncRange{e.t0_ns, 0, e.tid, e.name_id, static_cast<uint32_t>(e.a), e.b});
        break;
      case raw::EventKind::kAsyncEnd: async_end_ns_[e.b] = e.t0_ns; break;
      case raw::EventKind::kDataStage:
        m_.data_stages.push_back(DataStageSlice{e.t0_ns, e.t1_ns - e.t0_ns, e.tid, e.name_id,
                                                static_cast<uint32_t>(e.a), static_cast<uint32_t>(e.b)});
        break;
      case raw::EventKind::kMemory:
        m_.memory.push_back(MemoryRecord{e.t0_ns, e.b, raw::unzigzag(e.a), e.total_allocated,
                                         e.total_reserved, e.tid, static_cast<uint32_t>(e.device)});
        break;
    }
  }

  void slice(const raw::RawEvent& e, uint64_t chunk, size_t index) {
    SliceKey k = slice_key(e);
    FileKeys& keys = st_.files[file_].keys;
    uint32_t key = e.kind == raw::EventKind::kRange ? keys.local_range(e.tid, e.name_id) : keys.local(k);
    if (e.tid != cached_tid_ || !thread_known_) {
      m_.thread_of(e.tid);  // every thread with slices exists before pass 2
      cached_tid_ = e.tid;
      thread_known_ = true;
    }
    if (st_.slices_scanned++ % kSampleEvery == 0) st_.sample.push_back({e.t0_ns, e.tid});
    st_.earliest_slice_ns = std::min(st_.earliest_slice_ns, e.t0_ns);
    last_end_ns_ = std::max(last_end_ns_, e.t1_ns);
    uint64_t position = position_of(chunk, index);
    uint64_t dur = e.t1_ns - e.t0_ns;
    uint64_t held = k.is_step || st_.may_hold(dur)
                        ? st_.hold(HeldSlice{e.t0_ns, dur, position, kNone, key, e.tid, file_, k.is_step})
                        : kNone;
    if (held == kNone) st_.chunks[chunk].add(e.t0_ns);
    if (!k.is_op) return;
    uint64_t link = kNone;
    if (e.b != 0) {
      link = links_.size();
      links_.push_back(Link{e.t0_ns, key, static_cast<uint32_t>(e.a >> 8), static_cast<int64_t>(e.b - 1)});
    }
    last_op_[e.tid] = LastOp{e.t0_ns, position, held, link, key};
  }

  // An operator's input shapes re-key it.
  void inputs(const raw::RawEvent& e, uint64_t chunk) {
    auto it = last_op_.find(e.tid);
    if (it == last_op_.end() || it->second.start_ns != e.t0_ns) return;  // its operator was lost
    const LastOp& op = it->second;
    FileKeys& keys = st_.files[file_].keys;
    SliceKey k = keys.key(op.key);
    k.inputs = e.name_id;
    uint32_t key = keys.local(k);
    if (op.link != kNone) links_[op.link].key = key;
    if (op.held != kNone && st_.held[op.held].position == op.position) {
      st_.held[op.held].key = key;
      st_.held[op.held].inputs_chunk = chunk;
    } else {
      st_.chunks[chunk].add(e.t0_ns);  // pass 2 re-keys the operator when it reads this record
    }
    last_op_.erase(it);
  }

  TraceModel& m_;
  RunLoader::State& st_;
  uint32_t file_;
  size_t first_instant_, first_counter_, first_async_, first_data_;
  std::unordered_map<uint64_t, uint64_t> async_end_ns_;  // an end may precede its begin
  std::unordered_map<uint32_t, LastOp> last_op_;
  std::vector<Link> links_;
  uint64_t last_end_ns_ = 0;
  uint32_t cached_tid_ = 0;
  bool thread_known_ = false;
};

// Adds what the reader reported about one file to the model.
void note_file(TraceModel& m, const raw::RawFile& f, bool first_file) {
  if (first_file) {
    m.rank = f.header.rank;
    m.world_size = f.header.world_size;
    m.host = f.host;
    m.pid = f.header.pid;
    m.realtime_offset_ns = f.realtime_offset_ns();
    m.session_start_ns = f.anchors.front().monotonic_ns;
  }
  m.chunks_duplicated += f.chunks_duplicated;
  m.chunks_missing += f.chunks_missing;
  m.chunks_reordered += f.chunks_reordered;
  for (const raw::RawIssue& issue : f.issues) {
    m.warnings.push_back(issue.file + " at offset " + std::to_string(issue.offset) + ": " + issue.message);
  }
  if (!f.closed_cleanly) {
    m.warnings.push_back(
        f.path + " was not closed normally (process killed or still running); analysing what was flushed");
  }
  for (const auto& [tid, name] : f.thread_names) m.thread_names[tid] = name;
}

bool selected(const TraceModel& m, uint64_t start_ns) {
  return !m.selection.active || (start_ns >= m.selection.begin_ns && start_ns < m.selection.end_ns);
}

}  // namespace

RunLoader::RunLoader() : state_(std::make_unique<State>()) {}
RunLoader::~RunLoader() = default;

uint64_t RunLoader::slices_loaded() const {
  return state_->slices_loaded;
}

uint64_t RunLoader::windows_loaded() const {
  return state_->windows_loaded;
}

uint64_t RunLoader::earliest_slice_ns() const {
  return state_->earliest_slice_ns;
}

bool RunLoader::scan(const std::string& run_dir, TraceModel* model, std::string* error) {
  TraceModel& m = *model;
  State& st = *state_;
  StringMerger merger(&m);
  std::vector<std::string> paths = raw::raw_files_of_run(run_dir, error);
  if (paths.empty()) return false;
  uint64_t last_end = 0;
  for (const std::string& path : paths) {
    std::error_code size_ec;
    if (std::filesystem::file_size(path, size_ec) == 0 && !size_ec) {
      // Created, then the process died before the header reached the disk.
      m.warnings.push_back(path + " is empty: the process ended before writing any data");
      continue;
    }
    uint32_t file = static_cast<uint32_t>(st.files.size());
    st.files.emplace_back();
    st.files.back().path = path;
    st.files.back().first_chunk = st.chunks.size();
    FileScanner scanner(m, st, file);
    raw::EventSink sink = [&scanner](const raw::RawEvent* events, size_t count) {
      scanner.chunk(events, count);
    };
    std::optional<raw::RawFile> f = raw::read_raw_file(path, error, &sink);
    if (!f) return false;
    note_file(m, *f, file == 0);
    scanner.finish(*f, merger);
    last_end = std::max(last_end, scanner.last_end_ns());
  }
  last_end = std::max(last_end, m.session_start_ns);
  m.sort_threads();
  // Held slices in recorded order, the order pass 2 meets them in.
  std::erase_if(st.held, [](const HeldSlice& h) { return h.position == kNone; });
  std::sort(st.held.begin(), st.held.end(),
            [](const HeldSlice& a, const HeldSlice& b) { return a.position < b.position; });
  st.longest.clear();
  st.free_held.clear();
  st.held_by_start.resize(st.held.size());
  for (uint32_t i = 0; i < st.held.size(); ++i) st.held_by_start[i] = i;
  std::stable_sort(st.held_by_start.begin(), st.held_by_start.end(),
                   [&st](uint32_t a, uint32_t b) { return st.held[a].start_ns < st.held[b].start_ns; });
  for (const HeldSlice& h : st.held) {
    if (!h.is_step) continue;
    Slice s{h.start_ns, 0, h.key};
    m.steps.push_back(StepWindow{m.step_number(s), h.start_ns, h.start_ns + h.dur_ns});
  }
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.number < b.number; });
  // Unended async ranges close at the last event of the run.
  for (AsyncRange& a : m.async_ranges) {
    if (a.end_ns == 0) a.end_ns = std::max(a.start_ns, last_end);
  }
  std::sort(m.op_links.begin(), m.op_links.end(), [](const OpLink& a, const OpLink& b) {
    return std::make_pair(a.start_ns, a.key) < std::make_pair(b.start_ns, b.key);
  });
  std::stable_sort(m.memory.begin(), m.memory.end(),
                   [](const MemoryRecord& a, const MemoryRecord& b) { return a.ts_ns < b.ts_ns; });
  std::sort(st.sample.begin(), st.sample.end(),
            [](const State::Sampled& a, const State::Sampled& b) { return a.start_ns < b.start_ns; });
  return true;
}

std::vector<uint64_t> RunLoader::plan_windows(uint64_t max_slices) const {
  const State& st = *state_;
  std::vector<uint64_t> bounds{0};
  if (st.slices_scanned > max_slices) {
    uint64_t in_window = 0;
    for (const State::Sampled& sampled : st.sample) {
      in_window += kSampleEvery;
      // Slices of equal start stay in one window.
      if (in_window < max_slices || sampled.start_ns + 1 <= bounds.back()) continue;
      bounds.push_back(sampled.start_ns + 1);
      in_window = 0;
    }
  }
  bounds.push_back(kNone);
  return bounds;
}

namespace {

// Pass 2: slices into the buffers of their windows, windows out in order.
class WindowFeeder {
 public:
  WindowFeeder(TraceModel& m, RunLoader::State& st, const std::vector<uint64_t>& bounds,
               const WindowConsumer& consume)
      : m_(m), st_(st), bounds_(bounds), consume_(consume), carried_(m.threads.size()) {
    // The last chunk that holds a slice (or an inputs record) of each window.
    ready_after_.assign(bounds.size() - 1, kNone);
    for (uint64_t c = 0; c < st.chunks.size(); ++c) {
      const ChunkStarts& cs = st.chunks[c];
      if (cs.min == kNone) continue;
      size_t first = window_of(cs.min), last = window_of(cs.max);
      for (size_t w = first; w <= last; ++w) ready_after_[w] = c;
    }
    // Each window's slices per thread, estimated from the sample: buffers
    // are sized once instead of growing by copies.
    for (const RunLoader::State::Sampled& sampled : st.sample) {
      ++expected_[(uint64_t{window_of(sampled.start_ns)} << 32) | m.thread_of(sampled.tid)];
    }
  }

  void chunk(ScannedFile& file, uint64_t nth, const raw::RawEvent* events, size_t count) {
    if (nth >= file.chunks) return;  // written after the scan (a run still being recorded)
    uint64_t chunk = file.first_chunk + nth;
    for (size_t i = 0; i < count; ++i) {
      const raw::RawEvent& e = events[i];
      switch (e.kind) {
        case raw::EventKind::kRange:
        case raw::EventKind::kStep:
        case raw::EventKind::kOperator: slice(file, e, position_of(chunk, i)); break;
        case raw::EventKind::kOperatorInputs: inputs(file, e); break;
        default: break;  // the scan kept them
      }
    }
    while (next_ < ready_after_.size() && (ready_after_[next_] == kNone || ready_after_[next_] <= chunk)) {
      note_buffered();
      emit();
    }
  }

  void finish() {
    while (next_ < ready_after_.size()) emit();
    detail::log_debug("analysis windows: " + std::to_string(ready_after_.size()) + ", at most " +
                      std::to_string(most_pending_) + " filling at once, holding at most " +
                      std::to_string(most_buffered_ * sizeof(Slice) >> 20) + " MiB of slices");
    if (late_ > 0) {
      m_.warnings.push_back(std::to_string(late_) +
                            " slice(s) read after their window had been analysed (the run was still being "
                            "recorded); they are counted in the next window");
    }
  }

 private:
  struct Buffer {
    std::vector<std::vector<Slice>> threads;
    std::vector<std::pair<SliceRef, uint64_t>> long_durations;
  };
  struct LastOp {
    uint64_t window;
    SliceRef ref;
    uint32_t key;  // file-local
    bool placed;   // false: held, or not selected
  };

  size_t window_of(uint64_t t) {
    if (t >= bounds_[cached_] && t < bounds_[cached_ + 1]) return cached_;
    cached_ = static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), t) - bounds_.begin()) - 1;
    return cached_;
  }

  Buffer& buffer(size_t window) {
    if (window == buffer_window_ && buffer_ != nullptr) return *buffer_;
    while (pending_.size() <= window - next_) {
      pending_.emplace_back();  // a deque keeps references to the others
      pending_.back().threads.resize(m_.threads.size());
    }
    buffer_window_ = window;
    buffer_ = &pending_[window - next_];
    return *buffer_;
  }

  std::vector<Slice>& thread_buffer(Buffer& b, size_t window, uint32_t thread) {
    if (b.threads.size() <= thread) b.threads.resize(thread + 1);
    std::vector<Slice>& v = b.threads[thread];
    if (v.capacity() == 0) {
      if (!spare_.empty()) {
        v.swap(spare_.back());
        spare_.pop_back();
      }
      // The estimate with a margin, and room for the slices carried in front.
      auto it = expected_.find((uint64_t{window} << 32) | thread);
      uint64_t expected = it != expected_.end() ? it->second : 0;
      v.reserve(expected * kSampleEvery * 5 / 4 + 1024);
    }
    return v;
  }

  uint32_t thread(uint32_t tid) {
    if (tid != cached_tid_ || !thread_known_) {
      cached_thread_ = m_.thread_of(tid);
      cached_tid_ = tid;
      thread_known_ = true;
    }
    return cached_thread_;
  }

  void slice(ScannedFile& file, const raw::RawEvent& e, uint64_t position) {
    bool is_op = e.kind == raw::EventKind::kOperator;
    while (held_ < st_.held.size() && st_.held[held_].position < position) ++held_;  // not met: damage
    if (held_ < st_.held.size() && st_.held[held_].position == position) {
      ++held_;
      if (is_op) last_op_[e.tid] = LastOp{0, {}, 0, false};
      return;
    }
    if (!selected(m_, e.t0_ns)) {
      if (is_op) last_op_[e.tid] = LastOp{0, {}, 0, false};
      return;
    }
    uint32_t local = e.kind == raw::EventKind::kRange ? file.keys.local_range(e.tid, e.name_id)
                                                      : file.keys.local(slice_key(e));
    size_t w = window_of(e.t0_ns);
    if (w < next_) {
      w = next_;
      ++late_;
    }
    Buffer& b = buffer(w);
    uint32_t t = thread(e.tid);
    std::vector<Slice>& v = thread_buffer(b, w, t);
    uint64_t dur = e.t1_ns - e.t0_ns;
    SliceRef ref{t, v.size()};
    v.push_back(Slice{e.t0_ns, dur < kLongDuration ? static_cast<uint32_t>(dur) : kLongDuration,
                      file.keys.model(m_, local)});
    if (dur >= kLongDuration) b.long_durations.push_back({ref, dur});
    if (is_op) last_op_[e.tid] = LastOp{w, ref, local, true};
  }

  void inputs(ScannedFile& file, const raw::RawEvent& e) {
    auto it = last_op_.find(e.tid);
    if (it == last_op_.end()) return;
    LastOp op = it->second;
    last_op_.erase(it);
    if (!op.placed || op.window < next_) return;
    Slice& s = buffer(op.window).threads[op.ref.thread][op.ref.index];
    if (s.start_ns != e.t0_ns) return;  // its operator was lost
    SliceKey k = file.keys.key(op.key);
    k.inputs = e.name_id;
    s.key = file.keys.model(m_, file.keys.local(k));
  }

  // For the debug log: how far windows wait for each other.
  void note_buffered() {
    most_pending_ = std::max<uint64_t>(most_pending_, pending_.size());
    uint64_t slices = 0;
    for (const Buffer& b : pending_) {
      for (const std::vector<Slice>& v : b.threads) slices += v.capacity();
    }
    for (const std::vector<Slice>& v : spare_) slices += v.capacity();
    most_buffered_ = std::max(most_buffered_, slices);
  }

  // Hands the next window over, then keeps what is still open at its end.
  void emit() {
    Window w{next_, bounds_[next_], bounds_[next_ + 1]};
    Buffer b = pending_.empty() ? Buffer{} : std::move(pending_.front());
    if (!pending_.empty()) pending_.pop_front();
    if (buffer_window_ == next_) buffer_ = nullptr;
    b.threads.resize(m_.threads.size());
    for (const auto& [ref, dur] : b.long_durations) {
      const Slice& s = b.threads[ref.thread][ref.index];
      m_.long_durations[{s.start_ns, s.key}] = dur;
    }
    take_held(w);
    for (size_t t = 0; t < m_.threads.size(); ++t) {
      std::vector<Slice>& own = b.threads[t];
      order_thread_slices(m_, own);
      assemble(own, window_held_[t], carried_[t]);
      st_.slices_loaded += own.size() - carried_[t].size();
      m_.threads[t].first_own = carried_[t].size();
      m_.threads[t].slices.swap(own);  // `own` now holds the window before's
      own.clear();
      // A few emptied buffers are kept for the next windows (no fresh pages
      // to fault in); more would only hold memory.
      if (own.capacity() > 0 && spare_.size() < kSpareBuffers) spare_.push_back(std::move(own));
      own = std::vector<Slice>();
    }
    ++next_;
    ++st_.windows_loaded;
    consume_(m_, w);
    for (size_t t = 0; t < m_.threads.size(); ++t) {
      carried_[t].clear();
      for (const Slice& s : m_.threads[t].slices) {
        if (m_.end(s) > w.end_ns) carried_[t].push_back(s);
      }
    }
  }

  // The held slices that start in window `w`, per thread in timeline order
  // (into window_held_).
  void take_held(const Window& w) {
    window_held_.resize(m_.threads.size());
    for (std::vector<Slice>& v : window_held_) v.clear();
    size_t first = held_out_;
    while (held_out_ < st_.held_by_start.size() &&
           st_.held[st_.held_by_start[held_out_]].start_ns < w.end_ns) {
      ++held_out_;
    }
    // In the order they were recorded, for the tie rule of timeline order.
    std::sort(st_.held_by_start.begin() + static_cast<std::ptrdiff_t>(first),
              st_.held_by_start.begin() + static_cast<std::ptrdiff_t>(held_out_));
    for (size_t i = first; i < held_out_; ++i) {
      const HeldSlice& h = st_.held[st_.held_by_start[i]];
      Slice s{h.start_ns, h.dur_ns < kLongDuration ? static_cast<uint32_t>(h.dur_ns) : kLongDuration, h.key};
      if (h.is_step) {
        int64_t n = m_.step_number(s);
        if (m_.selection.active && (n < m_.selection.first_step || n > m_.selection.last_step)) continue;
      } else if (!selected(m_, h.start_ns)) {
        continue;
      }
      if (s.dur32 == kLongDuration) m_.long_durations[{s.start_ns, s.key}] = h.dur_ns;
      window_held_[m_.thread_of(h.tid)].push_back(s);
    }
    for (std::vector<Slice>& v : window_held_) order_thread_slices(m_, v);
  }

  // own (ordered) becomes carried, then own and held merged. A held slice
  // counts as recorded after every slice it ties with (it was recorded
  // later, or it would not have been among the longest): it goes first.
  // One pass from the back, so each slice moves once.
  void assemble(std::vector<Slice>& own, const std::vector<Slice>& held, const std::vector<Slice>& carried) {
    TimelineOrder before{m_};
    size_t i = own.size(), j = held.size(), c = carried.size();
    own.resize(i + j + c);
    Slice* d = own.data();
    size_t out = i + j + c;
    while (j > 0) {
      if (i > 0 && !before(d[i - 1], held[j - 1])) {
        d[--out] = d[--i];
      } else {
        d[--out] = held[--j];
      }
    }
    if (c > 0) {
      std::memmove(d + c, d, i * sizeof(Slice));
      std::copy(carried.begin(), carried.end(), d);
    }
  }

  TraceModel& m_;
  RunLoader::State& st_;
  const std::vector<uint64_t>& bounds_;
  const WindowConsumer& consume_;
  std::vector<uint64_t> ready_after_;
  std::unordered_map<uint64_t, uint32_t> expected_;  // sampled slices by (window << 32 | thread)
  std::deque<Buffer> pending_;                       // windows next_, next_ + 1, ...
  Buffer* buffer_ = nullptr;                         // of buffer_window_, the last one used
  size_t buffer_window_ = 0;
  std::vector<std::vector<Slice>> carried_;
  std::vector<std::vector<Slice>> window_held_;  // the window's held slices, per thread
  std::vector<std::vector<Slice>> spare_;        // emptied buffers, reused: no fresh pages a window
  std::unordered_map<uint32_t, LastOp> last_op_;
  size_t next_ = 0;
  size_t cached_ = 0;
  size_t held_ = 0;      // next held slice by position
  size_t held_out_ = 0;  // next held slice by start
  uint64_t late_ = 0;
  uint64_t most_pending_ = 0;
  uint64_t most_buffered_ = 0;  // slice capacity of pending and spare buffers
  uint32_t cached_tid_ = 0;
  uint32_t cached_thread_ = 0;
  bool thread_known_ = false;
};

}  // namespace

bool RunLoader::load(TraceModel* model, const std::vector<uint64_t>& boundaries,
                     const WindowConsumer& consume, std::string* error) {
  State& st = *state_;
  WindowFeeder feeder(*model, st, boundaries, consume);
  for (ScannedFile& file : st.files) {
    uint64_t nth = 0;
    raw::EventSink sink = [&](const raw::RawEvent* events, size_t count) {
      feeder.chunk(file, nth++, events, count);
    };
    if (!raw::read_raw_file(file.path, error, &sink)) return false;
  }
  feeder.finish();
  return true;
}

bool build_model(const std::string& run_dir, TraceModel* model, std::string* error) {
  RunLoader loader;
  if (!loader.scan(run_dir, model, error)) return false;
  return loader.load(
      model, loader.plan_windows(kNone), [](TraceModel&, const Window&) {}, error);
}

}  // namespace trainprof::analysis
