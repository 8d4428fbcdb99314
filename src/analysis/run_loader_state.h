// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the two passes of RunLoader share (analysis/run_loader.h): run_scan.cc
// fills it, run_loader.cc reads it. Internal to those two files.
#ifndef TRAINPROF_ANALYSIS_RUN_LOADER_STATE_H_
#define TRAINPROF_ANALYSIS_RUN_LOADER_STATE_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/run_loader.h"
#include "raw/raw_reader.h"

namespace trainprof::analysis {
namespace loading {

inline constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
// The scan keeps this many of the longest slices whole (256 KiB): a
// range around the whole run, recorded at its end, then holds no window back.
inline constexpr size_t kMaxHeldSlices = size_t{1} << 12;
// One slice in this many goes into the sample that plans windows and sizes
// their buffers.
inline constexpr uint64_t kSampleEvery = 1024;

// Where an event was recorded: its chunk (numbered in read order over all of
// a run's files) and its index in the chunk. Both passes read the same
// chunks in the same order, so it names one event in both.
inline uint64_t position_of(uint64_t chunk, size_t index) {
  return (chunk << 32) | index;
}
inline uint64_t chunk_of(uint64_t position) {
  return position >> 32;
}

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
    return {(uint64_t{k.tid} << 32) | k.name, (uint64_t{k.inputs} << 32) | (uint64_t{k.step_flags} << 16) |
                                                  (uint64_t{k.op_flags} << 8) | (k.is_op ? 2u : 0u) |
                                                  (k.is_step ? 1u : 0u)};
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
inline SliceKey slice_key(const raw::RawEvent& e) {
  SliceKey k;
  k.tid = e.tid;
  k.name = e.name_id;
  k.is_step = e.kind == raw::EventKind::kStep;
  k.is_op = e.kind == raw::EventKind::kOperator;
  if (k.is_op) k.op_flags = static_cast<uint8_t>(e.a & 0xff);
  if (k.is_step) k.step_flags = static_cast<uint8_t>(e.a & 0xff);
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

inline bool selected(const TraceModel& m, uint64_t start_ns) {
  return m.selection.keeps(start_ns);
}

}  // namespace loading

struct RunLoader::State {
  using ChunkStarts = loading::ChunkStarts;
  using HeldSlice = loading::HeldSlice;
  using ScannedFile = loading::ScannedFile;

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
  uint64_t earliest_slice_ns = loading::kNone;
  uint64_t slices_loaded = 0;
  uint64_t windows_loaded = 0;
  bool decode_ahead = false;  // each file decoded on a thread of its own

  // Reads `path`, its events to `sink` (RunLoader::use_threads).
  std::optional<raw::RawFile> read(const std::string& path, std::string* error,
                                   const raw::EventSink& sink) const {
    return decode_ahead ? raw::read_raw_file_decoding_ahead(path, error, sink)
                        : raw::read_raw_file(path, error, &sink);
  }

  // Heap order: shorter first, then recorded earlier (of two equal slices
  // the one recorded later, the enclosing one, stays held). std heaps put
  // the greatest on top: "greater" here is shorter.
  static bool longer(const Longest& a, const Longest& b) {
    return a.dur_ns != b.dur_ns ? a.dur_ns > b.dur_ns : a.position > b.position;
  }

  // Whether a slice that is not a step could be held: cheap, first.
  bool may_hold(uint64_t dur_ns) const {
    return longest.size() < loading::kMaxHeldSlices || dur_ns >= longest.front().dur_ns;
  }
  // Holds `s` if it is a step or among the longest so far; returns its
  // `held` index, or loading::kNone when pass 2 will place it. A slice
  // pushed out of the heap becomes pass 2's: its chunks learn its start.
  uint64_t hold(const HeldSlice& s) {
    if (!s.is_step && longest.size() == loading::kMaxHeldSlices) {
      if (!longer(Longest{s.dur_ns, s.position, 0}, longest.front())) return loading::kNone;
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
    chunks[loading::chunk_of(h.position)].add(h.start_ns);
    if (h.inputs_chunk != loading::kNone) chunks[h.inputs_chunk].add(h.start_ns);
    held[index].position = loading::kNone;  // no longer held
    free_held.push_back(index);
  }
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_RUN_LOADER_STATE_H_
