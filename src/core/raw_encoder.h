// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Encodes in-memory events into raw-format chunks.
//
// Owned by the flusher thread (not thread-safe). Names are mapped from their
// process-lifetime pointers to string-table ids; a chunk of new strings is
// emitted before the first events chunk that uses them, so a reader that
// stops anywhere has every string it needs for the events before that point.
#ifndef TRAINPROF_CORE_RAW_ENCODER_H_
#define TRAINPROF_CORE_RAW_ENCODER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/event.h"
#include "raw/format.h"

namespace trainprof::core {

class RawEncoder {
 public:
  // Starts a new file: forgets all string ids, numbers chunks from 0 again.
  void reset();

  void file_header(const raw::FileHeader& header);
  // Returns the number of records written (a memory report's two slots
  // make one record).
  size_t events(uint32_t tid, const core::Event* events, size_t count);
  void clock(const core::ClockAnchor& anchor);
  void thread_name(uint32_t tid, std::string_view name);
  void stats(uint64_t events_written, uint64_t events_dropped, bool final);

  // Bytes encoded since the last clear_output().
  const std::vector<uint8_t>& output() const { return out_; }
  void clear_output() {
    out_.clear();
    event_chunk_ends_.clear();
  }
  // Records of the EVENTS chunks of output() that do not lie wholly in its
  // first `bytes` bytes: what a write that stopped there lost.
  uint64_t records_past(size_t bytes) const;
  // Records in `count` slots, as events() counts them (a memory report, a
  // communication call or a GPU activity takes two slots).
  static size_t records_in(const core::Event* events, size_t count);

 private:
  // The id of `name`: a look in the direct-mapped cache, inline (most
  // events reuse a few names), then the maps.
  uint32_t string_id(const char* name) {
    if (name == nullptr) return 0;
    const CachedId& cached = cache_[(reinterpret_cast<uintptr_t>(name) >> 3) % kCacheSize];
    if (cached.pointer == name) return cached.id;
    return string_id_uncached(name);
  }
  uint32_t string_id_uncached(const char* name);
  // The id of `text` (which outlives the encoder's file), a new string the first time.
  uint32_t content_id(std::string_view text);
  // The id of "ProfilerStep#<step>".
  uint32_t step_name_id(uint32_t step);
  uint32_t domain_string_id(uint16_t domain);
  size_t begin_chunk(raw::ChunkType type, uint32_t tid);
  void end_chunk(size_t header_offset, uint32_t record_count);
  // Inlined into the per-event loop (a call per event cost a quarter of it).
  [[gnu::always_inline]] static uint8_t* put_event(uint8_t* p, uint8_t kind, uint32_t name, uint64_t t0_delta,
                                                   uint64_t dur, uint64_t a, uint64_t b);
  static uint8_t* put_memory(uint8_t* p, const core::MemoryReport& report, const core::MemoryTotals& totals,
                             uint64_t prev_t0);
  // `graph`: nullptr unless a CUDA graph launched the activity.
  uint8_t* put_gpu(uint8_t* p, const core::Event& activity, const core::GpuDetail& detail,
                   const core::GpuGraphDetail* graph, uint64_t prev_t0);
  uint8_t* put_comm(uint8_t* p, const core::Event& call, const core::CommDetail& detail, uint64_t prev_t0);

  std::vector<uint8_t> out_;
  // Where each EVENTS chunk of out_ ends, and its records.
  std::vector<std::pair<size_t, uint32_t>> event_chunk_ends_;
  // The events chunk's payload while it is encoded (its strings chunk goes
  // first). Not a vector: resizing one zero-fills every byte each time.
  std::unique_ptr<uint8_t[]> scratch_;
  size_t scratch_capacity_ = 0;
  std::vector<uint8_t> new_strings_;
  uint32_t new_string_count_ = 0;
  uint32_t next_string_id_ = 1;  // 0: no name
  uint32_t next_sequence_ = 0;   // of the next chunk (kChunkSequenceSize)
  // Direct-mapped cache in front of id_by_pointer_: most events reuse a few names.
  struct CachedId {
    const void* pointer = nullptr;
    uint32_t id = 0;
  };
  static constexpr size_t kCacheSize = 1024;
  CachedId cache_[kCacheSize];
  std::unordered_map<const void*, uint32_t> id_by_pointer_;
  std::unordered_map<std::string_view, uint32_t> id_by_content_;
  std::vector<uint32_t> id_by_domain_;
  std::unordered_map<uint32_t, uint32_t> id_by_step_;
  std::deque<std::string> step_names_;  // the texts of id_by_step_, for this file
};

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_RAW_ENCODER_H_
