// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// RunLoader's first pass (analysis/run_loader.h): the scan, and the plan of
// windows it makes possible.
#include <algorithm>
#include <bit>
#include <charconv>
#include <filesystem>
#include <tuple>
#include <unordered_map>

#include "analysis/gpu_launches.h"
#include "analysis/run_loader.h"
#include "analysis/run_loader_state.h"
#include "raw/raw_reader.h"
#include "raw/varint.h"

namespace trainprof::analysis {

using namespace loading;  // NOLINT(google-build-using-namespace): the state both passes share

namespace {

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

// A COMM_GROUP record ("name\x1franks\x1forigin"; ranks comma-separated),
// kept once per group name.
void add_comm_group(TraceModel& m, StringMerger& merger, const std::string& text) {
  size_t first = text.find(raw::kCommGroupSeparator);
  if (first == std::string::npos || first == 0) return;
  size_t second = text.find(raw::kCommGroupSeparator, first + 1);
  uint32_t name = merger.intern(text.substr(0, first));
  for (const CommGroup& g : m.comm_groups) {
    if (g.name == name) return;
  }
  CommGroup g;
  g.name = name;
  std::string_view ranks = std::string_view(text).substr(
      first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  while (!ranks.empty()) {
    size_t comma = ranks.find(',');
    std::string_view item = ranks.substr(0, comma);
    int32_t rank = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), rank);
    if (ec != std::errc() || end != item.data() + item.size() || rank < 0) break;  // damaged: what was read
    g.world_ranks.push_back(rank);
    if (comma == std::string_view::npos) break;
    ranks.remove_prefix(comma + 1);
  }
  if (second != std::string::npos) g.origin = text.substr(second + 1);
  m.comm_groups.push_back(std::move(g));
}

// An NCCL operation's name ("AllReduce\x1fRing\x1fLL": operation,
// algorithm, protocol; docs/FORMAT.md, COMM) in model string ids.
struct DeviceCommName {
  uint32_t operation = 0;
  uint32_t algorithm = 0;
  uint32_t protocol = 0;
};
DeviceCommName split_device_comm_name(StringMerger& merger, std::string_view text) {
  DeviceCommName parts;
  size_t first = text.find(raw::kCommNameSeparator);
  parts.operation = merger.intern(std::string(text.substr(0, first)));
  if (first == std::string_view::npos) return parts;
  std::string_view rest = text.substr(first + 1);
  size_t second = rest.find(raw::kCommNameSeparator);
  std::string_view algorithm = rest.substr(0, second);
  std::string_view protocol = second == std::string_view::npos ? std::string_view() : rest.substr(second + 1);
  if (!algorithm.empty()) parts.algorithm = merger.intern(std::string(algorithm));
  if (!protocol.empty()) parts.protocol = merger.intern(std::string(protocol));
  return parts;
}

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
    uint64_t slices_before = st_.slices_scanned;
    for (size_t i = 0; i < count; ++i) add(events[i], chunk, i);
    // A chunk is one thread's: each thread with slices exists before pass 2.
    if (st_.slices_scanned != slices_before) m_.thread_of(events[0].tid);
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
    for (size_t i = first_gpu_; i < m_.gpu.size(); ++i) {
      m_.gpu[i].name = keys.id(m_.gpu[i].name);
      m_.gpu[i].detail = keys.id(m_.gpu[i].detail);
    }
    for (GpuGraphNode& n : graph_nodes_) {  // a node described twice: the later wins
      n.operator_name = keys.id(n.operator_name);
      m_.gpu_graph_nodes[n.node] = n;
    }
    for (size_t i = first_sample_; i < m_.stack_samples.size(); ++i) {
      m_.stack_samples[i].stack = keys.id(m_.stack_samples[i].stack);
    }
    for (size_t i = first_tag_; i < m_.memory_tags.size(); ++i) {
      m_.memory_tags[i].category = keys.id(m_.memory_tags[i].category);
    }
    std::unordered_map<uint32_t, DeviceCommName> device_names;  // file-local name -> its parts
    for (size_t i = first_comm_; i < m_.comm_calls.size(); ++i) {
      CommCall& c = m_.comm_calls[i];
      if ((c.flags & raw::kCommOnDevice) != 0) {
        auto [it, fresh] = device_names.try_emplace(c.name);
        if (fresh) it->second = split_device_comm_name(merger, f.name(c.name));
        c.algorithm = it->second.algorithm;
        c.protocol = it->second.protocol;
        c.name = it->second.operation;
      } else {
        c.name = keys.id(c.name);
      }
      c.group = keys.id(c.group);
    }
    for (uint32_t name : group_names_) add_comm_group(m_, merger, f.name(name));
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
      case raw::EventKind::kComm:
        m_.comm_calls.push_back(CommCall{e.t0_ns, e.t1_ns, e.comm_bytes, e.tid, e.name_id, e.comm_group,
                                         static_cast<uint32_t>(e.a), static_cast<int64_t>(e.b) - 1,
                                         e.comm_peer, e.comm_tag, 0, 0});
        break;
      case raw::EventKind::kCommGroup: group_names_.push_back(e.name_id); break;
      case raw::EventKind::kMemory:
        (raw::memory_failed(e.device) ? m_.failed_allocations : m_.memory)
            .push_back(MemoryRecord{e.t0_ns, e.b, raw::unzigzag(e.a), e.total_allocated, e.total_reserved,
                                    e.tid, static_cast<uint32_t>(e.device & ~raw::kMemoryFailed)});
        break;
      case raw::EventKind::kMemoryTag:
        m_.memory_tags.push_back(MemoryTag{e.t0_ns, e.b, e.a, static_cast<uint32_t>(e.device), e.name_id});
        break;
      case raw::EventKind::kGpuKernel:
      case raw::EventKind::kGpuMemcpy:
      case raw::EventKind::kGpuMemset:
      case raw::EventKind::kGpuApi:
      case raw::EventKind::kGpuSync:
        m_.gpu.push_back(GpuActivity{e.t0_ns, e.t1_ns, e.kind, e.name_id, static_cast<uint32_t>(e.a),
                                     static_cast<int32_t>(e.b) - 1, e.gpu_context, e.gpu_stream,
                                     e.gpu_subkind, e.gpu_bytes, e.gpu_detail, e.gpu_thread, e.gpu_graph,
                                     e.gpu_graph_node});
        break;
      case raw::EventKind::kGpuGraphNode:
        graph_nodes_.push_back(GpuGraphNode{e.a, static_cast<uint32_t>(e.b), e.name_id, e.t0_ns});
        break;
      case raw::EventKind::kStackSample:
        m_.stack_samples.push_back(
            StackSample{std::max(e.t0_ns, e.t1_ns - std::min(e.t1_ns, kMaxSampleSpanNs)), e.t1_ns,
                        static_cast<uint32_t>(e.a), e.name_id, std::min(e.b, e.t1_ns - e.t0_ns)});
        break;
    }
  }

  void slice(const raw::RawEvent& e, uint64_t chunk, size_t index) {
    SliceKey k = slice_key(e);
    FileKeys& keys = st_.files[file_].keys;
    uint32_t key = e.kind == raw::EventKind::kRange ? keys.local_range(e.tid, e.name_id) : keys.local(k);
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
  std::vector<uint32_t> group_names_;  // kCommGroup names, file-local
  size_t first_comm_ = m_.comm_calls.size();
  size_t first_tag_ = m_.memory_tags.size();
  size_t first_sample_ = m_.stack_samples.size();
  size_t first_gpu_ = m_.gpu.size();
  std::vector<GpuGraphNode> graph_nodes_;  // this file's, with file-local string ids
  uint64_t last_end_ns_ = 0;
};

// Why a raw file has no final flush: the write the disk refused when the
// run's profiler_info.json names one, the signal that ended the process
// (its handler flushes, but cannot close files safely), else a killed (or
// running) process.
std::string unclosed_warning(const TraceModel& m, const std::string& path) {
  if (m.io_error.empty() && m.stop_reason == "signal") {
    return path +
           " ends at the signal that ended the process (SIGTERM or SIGINT), which flushed what was "
           "recorded before it; analysing that";
  }
  if (m.io_error.empty()) {
    return path + " was not closed normally (process killed or still running); analysing what was flushed";
  }
  return path + " ends where the recording failed: " + m.io_error + " (" + std::to_string(m.events_lost) +
         " recorded events never reached it); analysing what did";
}

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
  m.events_with_undefined_ids += f.events_with_undefined_ids;
  m.string_chunks_with_unread_bytes += f.string_chunks_with_unread_bytes;
  for (const raw::RawIssue& issue : f.issues) {
    m.warnings.push_back(issue.file + " at offset " + std::to_string(issue.offset) + ": " + issue.message);
  }
  if (!f.closed_cleanly) {
    m.closed_cleanly = false;
    m.warnings.push_back(unclosed_warning(m, f.path));
  }
  for (const auto& [tid, name] : f.thread_names) m.thread_names[tid] = name;
}

// The held ProfilerStep#N slices as the model's steps and phases.
void collect_steps(TraceModel& m, const std::vector<HeldSlice>& held) {
  std::vector<StepWindow> phases[2];  // start-up, tail
  for (const HeldSlice& h : held) {
    if (!h.is_step) continue;
    Slice s{h.start_ns, 0, h.key};
    StepWindow w{m.step_number(s), h.start_ns, h.start_ns + h.dur_ns, h.tid};
    uint8_t flags = m.keys[h.key].step_flags;
    if (flags & raw::kStepStartUp) {
      phases[0].push_back(w);
    } else if (flags & raw::kStepTail) {
      phases[1].push_back(w);
    } else {
      m.steps.push_back(w);
    }
  }
  if (m.steps.empty()) {  // nothing between two step() calls: what there is counts
    for (auto& p : phases) m.steps.insert(m.steps.end(), p.begin(), p.end());
  } else {
    // One of each per run; should a run hold more, the earliest start-up
    // and the latest tail are the phases, the others count as steps.
    auto by_start = [](const StepWindow& a, const StepWindow& b) { return a.start_ns < b.start_ns; };
    std::sort(phases[0].begin(), phases[0].end(), by_start);
    std::sort(phases[1].begin(), phases[1].end(), by_start);
    if (!phases[0].empty()) m.start_up = phases[0].front();
    if (!phases[1].empty()) m.tail = phases[1].back();
    for (size_t i = 1; i < phases[0].size(); ++i) m.steps.push_back(phases[0][i]);
    for (size_t i = 0; i + 1 < phases[1].size(); ++i) m.steps.push_back(phases[1][i]);
  }
  std::sort(m.steps.begin(), m.steps.end(),
            [](const StepWindow& a, const StepWindow& b) { return a.number < b.number; });
}

}  // namespace

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
    std::optional<raw::RawFile> f = st.read(path, error, sink);
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
  collect_steps(m, st.held);
  // Unended async ranges close at the last event of the run.
  for (AsyncRange& a : m.async_ranges) {
    if (a.end_ns == 0) a.end_ns = std::max(a.start_ns, last_end);
  }
  std::sort(m.op_links.begin(), m.op_links.end(), [](const OpLink& a, const OpLink& b) {
    return std::make_pair(a.start_ns, a.key) < std::make_pair(b.start_ns, b.key);
  });
  std::stable_sort(m.comm_calls.begin(), m.comm_calls.end(),
                   [](const CommCall& a, const CommCall& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(m.gpu.begin(), m.gpu.end(),
                   [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(m.memory.begin(), m.memory.end(),
                   [](const MemoryRecord& a, const MemoryRecord& b) { return a.ts_ns < b.ts_ns; });
  std::stable_sort(m.failed_allocations.begin(), m.failed_allocations.end(),
                   [](const MemoryRecord& a, const MemoryRecord& b) { return a.ts_ns < b.ts_ns; });
  std::stable_sort(m.memory_tags.begin(), m.memory_tags.end(),
                   [](const MemoryTag& a, const MemoryTag& b) { return a.ts_ns < b.ts_ns; });
  std::stable_sort(m.stack_samples.begin(), m.stack_samples.end(),
                   [](const StackSample& a, const StackSample& b) {
                     return std::tie(a.tid, a.end_ns) < std::tie(b.tid, b.end_ns);
                   });
  place_driver_memory_on_calling_threads(m);
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

}  // namespace trainprof::analysis
