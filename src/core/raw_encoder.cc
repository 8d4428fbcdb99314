// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/raw_encoder.h"

#include <bit>
#include <cstring>

#include "core/intern.h"
#include "raw/crc32c.h"
#include "raw/varint.h"

namespace trainprof::core {
namespace {

void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

void append_varint(std::vector<uint8_t>& out, uint64_t v) {
  uint8_t tmp[raw::kMaxVarintBytes];
  uint8_t* end = raw::put_varint(tmp, v);
  out.insert(out.end(), tmp, end);
}

template <typename T>
void append_pod(std::vector<uint8_t>& out, const T& v) {
  append_bytes(out, &v, sizeof(T));
}

}  // namespace

void RawEncoder::reset() {
  clear_output();
  new_strings_.clear();
  new_string_count_ = 0;
  next_string_id_ = 1;
  next_sequence_ = 0;
  for (CachedId& c : cache_) c = CachedId{};
  id_by_pointer_.clear();
  id_by_content_.clear();
  id_by_domain_.clear();
  id_by_step_.clear();
  step_names_.clear();
}

void RawEncoder::file_header(const raw::FileHeader& header) {
  append_pod(out_, header);
}

uint32_t RawEncoder::string_id_uncached(const char* name) {
  CachedId& cached = cache_[(reinterpret_cast<uintptr_t>(name) >> 3) % kCacheSize];
  auto it = id_by_pointer_.find(name);
  if (it != id_by_pointer_.end()) {
    cached = CachedId{name, it->second};
    return it->second;
  }
  // Equal text behind another pointer (the same literal in two libraries)
  // shares one id. Names live for the process, so views stay valid.
  uint32_t id = content_id(name);
  id_by_pointer_.emplace(name, id);
  cached = CachedId{name, id};
  return id;
}

uint32_t RawEncoder::content_id(std::string_view text) {
  auto [content_it, inserted] = id_by_content_.emplace(text, next_string_id_);
  if (inserted) {
    ++next_string_id_;
    append_varint(new_strings_, content_it->second);
    append_varint(new_strings_, text.size());
    append_bytes(new_strings_, text.data(), text.size());
    ++new_string_count_;
  }
  return content_it->second;
}

// Steps are recorded under one name, their number beside it: a process
// that steps for days would otherwise keep a string per step for its life.
// The file has "ProfilerStep#N", made here, once per step and file.
uint32_t RawEncoder::step_name_id(uint32_t step) {
  auto it = id_by_step_.find(step);
  if (it != id_by_step_.end()) return it->second;
  step_names_.push_back(std::string(kStepNamePrefix) + std::to_string(step));
  uint32_t id = content_id(step_names_.back());  // a deque: the text stays where it is
  id_by_step_.emplace(step, id);
  return id;
}

uint32_t RawEncoder::domain_string_id(uint16_t domain) {
  if (domain < id_by_domain_.size() && id_by_domain_[domain] != 0) return id_by_domain_[domain];
  uint32_t id = string_id(core::domain_name(domain));
  if (domain >= id_by_domain_.size()) id_by_domain_.resize(domain + 1u, 0);
  id_by_domain_[domain] = id;
  return id;
}

size_t RawEncoder::begin_chunk(raw::ChunkType type, uint32_t tid) {
  size_t offset = out_.size();
  raw::ChunkHeader h{};
  h.magic = raw::kChunkMagic;
  h.type = static_cast<uint16_t>(type);
  h.thread_id = tid;
  append_pod(out_, h);
  append_pod(out_, next_sequence_++);
  return offset;
}

void RawEncoder::end_chunk(size_t header_offset, uint32_t record_count) {
  raw::ChunkHeader h;
  std::memcpy(&h, out_.data() + header_offset, sizeof(h));
  h.payload_size = static_cast<uint32_t>(out_.size() - header_offset - raw::kChunkHeaderSize);
  h.record_count = record_count;
  h.crc = raw::chunk_crc(h, out_.data() + header_offset + raw::kChunkHeaderSize);
  std::memcpy(out_.data() + header_offset, &h, sizeof(h));
}

inline uint8_t* RawEncoder::put_event(uint8_t* p, uint8_t kind, uint32_t name, uint64_t t0_delta,
                                      uint64_t dur, uint64_t a, uint64_t b) {
  uint8_t head = kind & raw::kHeadKindMask;
  if (dur != 0) head |= raw::kHeadHasDuration;
  if (a != 0) head |= raw::kHeadHasA;
  if (b != 0) head |= raw::kHeadHasB;
  *p++ = head;
  p = raw::put_varint(p, name);
  p = raw::put_varint(p, raw::zigzag(static_cast<int64_t>(t0_delta)));
  if (dur != 0) p = raw::put_varint(p, dur);
  if (a != 0) p = raw::put_varint(p, a);
  if (b != 0) p = raw::put_varint(p, b);
  return p;
}

size_t RawEncoder::events(uint32_t tid, const core::Event* events, size_t count) {
  if (count == 0) return 0;
  // Worst case per event: head byte + five varints (a memory report: eight,
  // a communication call: nine, over their two slots).
  const size_t worst = count * (1 + 5 * raw::kMaxVarintBytes);
  if (scratch_capacity_ < worst) {
    scratch_ = std::make_unique_for_overwrite<uint8_t[]>(worst);  // not zeroed
    scratch_capacity_ = worst;
  }
  uint8_t* const scratch = scratch_.get();
  uint8_t* p = scratch;
  uint64_t prev_t0 = 0;
  size_t records = 0;
  for (size_t i = 0; i < count; ++i) {
    const core::Event& e = events[i];
    auto kind = static_cast<raw::EventKind>(e.kind);
    if (kind == raw::EventKind::kRange) [[likely]] {  // most events: one test, then out
      p = put_event(p, e.kind, string_id(e.name), e.t0 - prev_t0, e.t1 - e.t0, 0, 0);
      prev_t0 = e.t0;
      ++records;
      continue;
    }
    if (kind == raw::EventKind::kMemory) {
      // record_memory commits both slots at once; a lone one is skipped.
      if (i + 1 == count || events[i + 1].kind != core::kMemoryTotalsSlot) continue;
      p = put_memory(p, std::bit_cast<core::MemoryReport>(e), std::bit_cast<core::MemoryTotals>(events[++i]),
                     prev_t0);
      prev_t0 = e.t0;
      ++records;
      continue;
    }
    if (kind == raw::EventKind::kComm) {
      // record_comm commits both slots at once, as a memory report.
      if (i + 1 == count || events[i + 1].kind != core::kCommDetailSlot) continue;
      p = put_comm(p, e, std::bit_cast<core::CommDetail>(events[++i]), prev_t0);
      prev_t0 = e.t0;
      ++records;
      continue;
    }
    if (kind == raw::EventKind::kMemoryTag) {
      // record_memory_tag commits both slots at once, as a memory report.
      if (i + 1 == count || events[i + 1].kind != core::kMemoryTagSlot) continue;
      const auto detail = std::bit_cast<core::MemoryTagDetail>(events[++i]);
      p = put_event(p, e.kind, string_id(e.name), e.t0 - prev_t0, 0, detail.bytes, e.t1);
      p = raw::put_varint(p, detail.device);
      prev_t0 = e.t0;
      ++records;
      continue;
    }
    if (is_gpu_event_kind(kind)) {
      // record_gpu commits its slots at once, as a memory report.
      if (i + 1 == count || events[i + 1].kind != core::kGpuDetailSlot) continue;
      const auto detail = std::bit_cast<core::GpuDetail>(events[++i]);
      const core::GpuGraphDetail* graph = nullptr;
      core::GpuGraphDetail from_graph;
      if (i + 1 < count && events[i + 1].kind == core::kGpuGraphSlot) {
        from_graph = std::bit_cast<core::GpuGraphDetail>(events[++i]);
        graph = &from_graph;
      }
      p = put_gpu(p, e, detail, graph, prev_t0);
      prev_t0 = e.t0;
      ++records;
      continue;
    }
    if (e.kind == core::kMemoryTotalsSlot || e.kind == core::kCommDetailSlot ||
        e.kind == core::kGpuDetailSlot || e.kind == core::kMemoryTagSlot || e.kind == core::kGpuGraphSlot) {
      continue;  // a second (or third) slot alone
    }
    uint64_t dur = 0, a = 0, b = 0;
    uint32_t name = string_id(e.name);
    switch (kind) {
      case raw::EventKind::kRange: dur = e.t1 - e.t0; break;
      case raw::EventKind::kStackSample:
        dur = e.t1 - e.t0;
        a = e.aux;                                                          // the sampled thread
        b = ((static_cast<uint64_t>(e.reserved) << 16) | e.domain) * 1000;  // its CPU wait, ns
        break;
      case raw::EventKind::kStep:
        dur = e.t1 - e.t0;
        a = e.reserved;  // raw::kStep* flags
        b = e.aux;
        name = step_name_id(e.aux);
        break;
      case raw::EventKind::kMark: a = domain_string_id(e.domain); break;
      case raw::EventKind::kCounter: b = e.t1; break;
      case raw::EventKind::kAsyncBegin:
        a = domain_string_id(e.domain);
        b = e.t1;
        break;
      case raw::EventKind::kAsyncEnd: b = e.t1; break;
      case raw::EventKind::kGpuGraphNode:
        a = e.t1;   // the node id
        b = e.aux;  // the graph id
        break;
      case raw::EventKind::kOperator:
        dur = e.t1 - e.t0;
        a = e.reserved | (uint64_t{e.domain} << 8);
        b = e.aux == core::kNoSequenceNumber ? 0 : uint64_t{e.aux} + 1;
        break;
      case raw::EventKind::kOperatorInputs:
      case raw::EventKind::kMemory:
      case raw::EventKind::kComm:
      case raw::EventKind::kCommGroup:
      case raw::EventKind::kGpuKernel:
      case raw::EventKind::kGpuMemcpy:
      case raw::EventKind::kGpuMemset:
      case raw::EventKind::kGpuApi:
      case raw::EventKind::kGpuSync:
      case raw::EventKind::kMemoryTag: break;
      case raw::EventKind::kDataStage:
        dur = e.t1 - e.t0;
        a = domain_string_id(e.domain);
        b = e.aux == 0 ? 0 : domain_string_id(static_cast<uint16_t>(e.aux - 1));
        break;
    }
    p = put_event(p, e.kind, name, e.t0 - prev_t0, dur, a, b);
    prev_t0 = e.t0;
    ++records;
  }
  const size_t scratch_size = static_cast<size_t>(p - scratch);
  if (new_string_count_ > 0) {
    size_t h = begin_chunk(raw::ChunkType::kStrings, 0);
    append_bytes(out_, new_strings_.data(), new_strings_.size());
    end_chunk(h, new_string_count_);
    new_strings_.clear();
    new_string_count_ = 0;
  }
  if (records == 0) return 0;
  size_t h = begin_chunk(raw::ChunkType::kEvents, tid);
  append_bytes(out_, scratch, scratch_size);
  end_chunk(h, static_cast<uint32_t>(records));
  event_chunk_ends_.emplace_back(out_.size(), static_cast<uint32_t>(records));
  return records;
}

uint64_t RawEncoder::records_past(size_t bytes) const {
  uint64_t records = 0;
  for (const auto& [end, count] : event_chunk_ends_) {
    if (end > bytes) records += count;
  }
  return records;
}

size_t RawEncoder::records_in(const core::Event* events, size_t count) {
  size_t records = 0;
  for (size_t i = 0; i < count; ++i) {
    uint8_t kind = events[i].kind;
    records += kind != core::kMemoryTotalsSlot && kind != core::kCommDetailSlot &&
               kind != core::kGpuDetailSlot && kind != core::kMemoryTagSlot && kind != core::kGpuGraphSlot;
  }
  return records;
}

uint8_t* RawEncoder::put_memory(uint8_t* p, const core::MemoryReport& r, const core::MemoryTotals& t,
                                uint64_t prev_t0) {
  p = put_event(p, static_cast<uint8_t>(raw::EventKind::kMemory), 0, r.t0 - prev_t0, 0, raw::zigzag(r.bytes),
                r.address);
  p = raw::put_varint(p, t.total_allocated);
  p = raw::put_varint(p, t.total_reserved);
  return raw::put_varint(p, t.device);
}

uint8_t* RawEncoder::put_comm(uint8_t* p, const core::Event& call, const core::CommDetail& d,
                              uint64_t prev_t0) {
  p = put_event(p, static_cast<uint8_t>(raw::EventKind::kComm), string_id(call.name), call.t0 - prev_t0,
                call.t1 - call.t0, call.reserved,
                call.aux == core::kNoSequenceNumber ? 0 : uint64_t{call.aux} + 1);
  p = raw::put_varint(p, d.bytes);
  p = raw::put_varint(p, d.group != nullptr ? string_id(d.group) : 0);
  p = raw::put_varint(p, raw::zigzag(d.peer));
  return raw::put_varint(p, raw::zigzag(d.tag));
}

uint8_t* RawEncoder::put_gpu(uint8_t* p, const core::Event& activity, const core::GpuDetail& d,
                             const core::GpuGraphDetail* graph, uint64_t prev_t0) {
  p = put_event(p, activity.kind, string_id(activity.name), activity.t0 - prev_t0, activity.t1 - activity.t0,
                activity.aux, activity.domain);
  p = raw::put_varint(p, d.context);
  p = raw::put_varint(p, d.stream);
  p = raw::put_varint(p, d.subkind | (graph != nullptr ? raw::kGpuFromGraph : 0));
  p = raw::put_varint(p, d.bytes);
  p = raw::put_varint(p, d.detail != nullptr ? string_id(d.detail) : 0);
  p = raw::put_varint(p, d.thread);
  if (graph == nullptr) return p;
  p = raw::put_varint(p, graph->graph);
  return raw::put_varint(p, graph->node);
}

void RawEncoder::clock(const core::ClockAnchor& anchor) {
  size_t h = begin_chunk(raw::ChunkType::kClock, 0);
  append_pod(out_, anchor.ticks);
  append_pod(out_, anchor.monotonic_ns);
  append_pod(out_, anchor.realtime_ns);
  end_chunk(h, 1);
}

void RawEncoder::thread_name(uint32_t tid, std::string_view name) {
  size_t h = begin_chunk(raw::ChunkType::kThread, tid);
  append_varint(out_, tid);
  append_varint(out_, name.size());
  append_bytes(out_, name.data(), name.size());
  end_chunk(h, 1);
}

void RawEncoder::stats(uint64_t events_written, uint64_t events_dropped, bool final) {
  size_t h = begin_chunk(raw::ChunkType::kStats, 0);
  append_varint(out_, events_written);
  append_varint(out_, events_dropped);
  out_.push_back(final ? 1 : 0);
  end_chunk(h, 1);
}

}  // namespace trainprof::core
