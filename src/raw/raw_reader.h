// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Reads raw files back: every valid event, and a precise report of what could
// not be read.
//
// A truncated tail (the process was killed mid-write) or a corrupt chunk
// (failed checksum, impossible length) is reported with file and offset and
// skipped; the reader resynchronises on the next valid chunk. Nothing that
// fails its checksum is ever decoded, no count or length read from the file
// sizes memory before it is checked against the bytes that can hold it, and
// reading takes time linear in the file size, whatever its bytes.
#ifndef TRAINPROF_RAW_RAW_READER_H_
#define TRAINPROF_RAW_RAW_READER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "raw/format.h"

namespace trainprof::raw {

struct RawEvent {
  EventKind kind;
  uint32_t tid;
  uint32_t name_id;  // index into RawFile::strings (0: none)
  uint64_t t0_ns;    // CLOCK_MONOTONIC nanoseconds
  uint64_t t1_ns;    // end (ranges, steps); == t0_ns for instants
  uint64_t a;        // domain string id (marks, async begin); kMemory: zigzag(bytes)
  uint64_t b;        // step number, counter bits, async range id; kMemory: address
  // kMemory only: the allocator's totals after this report, and the device
  // (raw::memory_device, also of a kMemoryTag: a = bytes, b = address).
  uint64_t total_allocated = 0;
  uint64_t total_reserved = 0;
  uint64_t device = 0;
  // kComm only (a = flags, b = sequence number + 1): bytes, group name
  // (string id), peer and tag (-1: none).
  uint64_t comm_bytes = 0;
  uint32_t comm_group = 0;
  int32_t comm_peer = -1;
  int32_t comm_tag = -1;
  // GPU activities only (raw::is_gpu_event_kind; a = correlation id, b =
  // device + 1): context, stream, subkind, bytes, detail (string id) and,
  // for a runtime or driver call, the calling thread.
  uint32_t gpu_context = 0;
  uint32_t gpu_stream = 0;
  uint32_t gpu_subkind = 0;
  uint32_t gpu_detail = 0;
  uint64_t gpu_bytes = 0;
  uint32_t gpu_thread = 0;
  // A kernel, copy or set a CUDA graph launched: CUPTI's graph and node ids
  // (0: not from a graph).
  uint32_t gpu_graph = 0;
  uint64_t gpu_graph_node = 0;
};

struct RawIssue {
  std::string file;
  uint64_t offset = 0;
  std::string message;
  bool truncated_tail = false;  // the file simply ends early (crash or kill)
};

struct ClockPoint {
  uint64_t ticks;
  uint64_t monotonic_ns;
  uint64_t realtime_ns;
};

struct RawFile {
  std::string path;
  FileHeader header{};
  std::string host;
  std::vector<std::string> strings;  // id -> text; undefined ids are "" (and reported)
  std::map<uint32_t, std::string> thread_names;
  std::vector<RawEvent> events;          // in file order (per thread: in time order)
  std::vector<ClockPoint> anchors;       // header anchor first
  uint64_t reported_events_written = 0;  // from the last stats chunk
  uint64_t reported_events_dropped = 0;
  bool closed_cleanly = false;  // a final stats chunk was read
  std::vector<RawIssue> issues;
  // Version 2 sequence checks (docs/FORMAT.md, "Damage"): chunks dropped as
  // duplicates, sequence numbers never seen, chunks found after a higher one.
  uint64_t chunks_duplicated = 0;
  uint64_t chunks_missing = 0;
  uint64_t chunks_reordered = 0;
  // String damage (docs/FORMAT.md, "Damage"): events kept although a string
  // id they hold is defined by no STRINGS chunk, and STRINGS chunks with
  // bytes after the records their header counts (not read).
  uint64_t events_with_undefined_ids = 0;
  uint64_t string_chunks_with_unread_bytes = 0;
  // Checksum bytes spent resynchronising after damage (bounded linearly in
  // the file size; for tests).
  uint64_t resync_checksum_bytes = 0;

  const std::string& name(uint32_t id) const;
  // realtime = monotonic + this offset (from the anchors).
  int64_t realtime_offset_ns() const;
};

// Receives the events of each valid chunk (already in nanoseconds, in file
// order) instead of RawFile::events.
using EventSink = std::function<void(const RawEvent* events, size_t count)>;

// Reads one raw file. Returns nullopt and sets `error` when nothing can be
// read (missing file, not a raw file, unsupported version, bad header). With
// a sink, events are streamed to it (in file order) and not stored: memory
// then stays proportional to one chunk, not to the file.
std::optional<RawFile> read_raw_file(const std::string& path, std::string* error,
                                     const EventSink* sink = nullptr);

// The same with a sink, the decoding on a thread of its own: `sink` is called
// on the calling thread with the same events in the same order, while the
// chunks after them are decoded (at most a few chunks ahead). Decodes on the
// calling thread when no thread can be started. An exception from `sink`
// stops the decoding and is rethrown.
std::optional<RawFile> read_raw_file_decoding_ahead(const std::string& path, std::string* error,
                                                    const EventSink& sink);

// The same, from bytes in memory; `name` stands for the path in messages.
std::optional<RawFile> read_raw_bytes(const uint8_t* data, size_t size, const std::string& name,
                                      std::string* error, const EventSink* sink = nullptr);

// Event records per producer thread, from the headers of the chunks whose
// checksum holds (no decoding; a count is capped by what its chunk's bytes can
// hold): an upper estimate for reserving memory before read_raw_file. Empty
// when the file cannot be read.
std::map<uint32_t, uint64_t> event_records_by_thread(const std::string& path);

// The raw files of a run directory ({run}/raw/*.tpraw), sorted; empty with
// `error` set when there are none.
std::vector<std::string> raw_files_of_run(const std::string& run_dir, std::string* error);

// Reads every raw file of a run directory.
std::optional<std::vector<RawFile>> read_run_directory(const std::string& run_dir, std::string* error);

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_RAW_READER_H_
