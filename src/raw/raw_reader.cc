// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "raw/raw_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "raw/crc32c.h"
#include "raw/varint.h"

namespace trainprof::raw {
namespace {

bool fits_int32(int64_t v) {
  return v >= INT32_MIN && v <= INT32_MAX;
}

// Read-only mapping of a whole file.
class MappedFile {
 public:
  bool open(const std::string& path, std::string* error) {
    // O_NONBLOCK: a FIFO planted at the path must not block the open; only
    // a regular file is read.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      *error = "cannot open '" + path + "': " + std::strerror(errno);
      return false;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      *error = "cannot stat '" + path + "': " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      *error = "'" + path + "' is not a regular file; not read";
      ::close(fd);
      return false;
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        *error = "cannot map '" + path + "': " + std::strerror(errno);
        ::close(fd);
        return false;
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return true;
  }
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Drops the pages of [from, to) from memory (they are re-read on access):
  // a large file then never sits whole in the resident set.
  void release(size_t from, size_t to) {
    const size_t page = 4096;
    size_t begin = (from + page - 1) / page * page;
    size_t end = to / page * page;
    if (data_ != nullptr && end > begin)
      madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

bool header_crc_ok(const ChunkHeader& h, const uint8_t* payload) {
  return chunk_crc(h, payload) == h.crc;
}

// Ticks to CLOCK_MONOTONIC ns: the line through the first and last anchors
// when they are 50 ms apart or more; else the calibration in the header.
struct TickConverter {
  uint64_t first_ticks = 0;
  uint64_t first_ns = 0;
  double ns_per_tick = 1.0;

  TickConverter() = default;
  TickConverter(const FileHeader& h, const std::vector<ClockPoint>& anchors) {
    const ClockPoint& first = anchors.front();
    const ClockPoint& last = anchors.back();
    first_ticks = first.ticks;
    first_ns = first.monotonic_ns;
    if (h.clock_source != 1) return;
    bool long_enough = last.monotonic_ns > first.monotonic_ns + 50'000'000ull && last.ticks > first.ticks;
    if (long_enough) {
      ns_per_tick = static_cast<double>(last.monotonic_ns - first.monotonic_ns) /
                    static_cast<double>(last.ticks - first.ticks);
    } else if (h.ticks_per_ns > 0) {
      ns_per_tick = 1.0 / h.ticks_per_ns;
    }
  }
  uint64_t to_ns(uint64_t ticks) const {
    int64_t d = static_cast<int64_t>(ticks - first_ticks);
    double ns = static_cast<double>(d) * ns_per_tick;
    // A damaged or crafted clock can map ticks past 64 bits (or to NaN):
    // clamp, the conversion of such a double is undefined.
    constexpr double kLimit = 9.2e18;
    if (!(ns > -kLimit)) ns = -kLimit;
    if (ns > kLimit) ns = kLimit;
    return first_ns + static_cast<uint64_t>(static_cast<int64_t>(ns));
  }
};

// A chunk whose checksum holds: its header, and its body (the payload after
// the version 2 sequence number).
struct Chunk {
  ChunkHeader h;
  uint32_t sequence = 0;  // version 2; 0 in version 1
  const uint8_t* body = nullptr;
  const uint8_t* end = nullptr;
  size_t offset = 0;
};

// The file's string table, read in the first pass (before any event is
// decoded), so that an event naming an id no STRINGS chunk defines is found
// wherever its chunk lies. Problems are kept by chunk offset and reported
// by the second pass, in file order, for the chunks it admits.
class StringTable {
 public:
  StringTable(RawFile* file, uint64_t max_id) : file_(file), max_id_(max_id) {}

  // The counts come from the file: each is checked against the bytes that
  // can hold it before it sizes anything. A later definition of an id wins.
  void read(const Chunk& c) {
    const uint8_t* p = c.body;
    const uint8_t* end = c.end;
    uint32_t count = c.h.record_count;
    if (count > static_cast<uint64_t>(end - p) / 2) {
      return problem(c, "malformed string table (count past the chunk)");
    }
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t id = 0, len = 0;
      if ((p = get_varint(p, end, &id)) == nullptr || (p = get_varint(p, end, &len)) == nullptr ||
          len > static_cast<uint64_t>(end - p) || id > max_id_) {
        return problem(c, "malformed string table");
      }
      if (file_->strings.size() <= id) {
        file_->strings.resize(id + 1);
        defined_.resize(id + 1);
      }
      file_->strings[id].assign(reinterpret_cast<const char*>(p), len);
      defined_[id] = true;
      p += len;
    }
    // As for events: a count one short would drop the last strings unseen.
    if (p != end) {
      problem(c,
              "string table: " + std::to_string(end - p) + " bytes after the " + std::to_string(count) +
                  " strings its header counts are not read; events naming the strings there are reported",
              true);
    }
  }

  // Whether `id` names nothing (0) or a string some chunk defined.
  bool known(uint64_t id) const { return id == 0 || (id < defined_.size() && defined_[id]); }

  // The first string id `e` holds that no chunk defined (0: none): its
  // name, or an id its kind keeps in another field (docs/FORMAT.md, "Events").
  uint64_t undefined_id(const RawEvent& e) const {
    uint64_t others[2] = {0, 0};
    switch (e.kind) {
      case EventKind::kMark:
      case EventKind::kAsyncBegin: others[0] = e.a; break;
      case EventKind::kDataStage:
        others[0] = e.a;
        others[1] = e.b;
        break;
      case EventKind::kComm: others[0] = e.comm_group; break;
      default:
        if (is_gpu_event_kind(e.kind)) others[0] = e.gpu_detail;
    }
    for (uint64_t id : {uint64_t{e.name_id}, others[0], others[1]}) {
      if (!known(id)) return id;
    }
    return 0;
  }

  // The problem pass 1 found in the chunk at `offset` ("" for none);
  // counted here, once per chunk the second pass admits.
  std::string problem_at(size_t offset) {
    auto it = problems_.find(offset);
    if (it == problems_.end()) return "";
    if (it->second.unread_bytes) ++file_->string_chunks_with_unread_bytes;
    return it->second.message;
  }

 private:
  struct Problem {
    std::string message;
    bool unread_bytes = false;
  };

  void problem(const Chunk& c, std::string message, bool unread_bytes = false) {
    problems_[c.offset] = Problem{std::move(message), unread_bytes};
  }

  RawFile* file_;
  uint64_t max_id_;
  std::vector<bool> defined_;  // by id, beside file_->strings
  std::map<size_t, Problem> problems_;
};

// Events whose string ids no STRINGS chunk defines: kept (their times and
// values hold), counted, and reported once per file with the first of them.
struct UndefinedIds {
  size_t first_offset = 0;
  uint64_t first_id = 0;
};

// Takes a decoded chunk's events: may keep them by swapping in another
// vector (read_raw_file_decoding_ahead hands them to another thread).
using BatchSink = std::function<void(std::vector<RawEvent>& events)>;

class ChunkDecoder {
 public:
  ChunkDecoder(RawFile* file, TickConverter clock, const EventSink* sink, const BatchSink* batch,
               StringTable* strings)
      : file_(file), clock_(clock), sink_(sink), batch_(batch), strings_(strings) {}

  // One issue for the events naming undefined strings, if there were any.
  void finish() {
    uint64_t n = file_->events_with_undefined_ids;
    if (n == 0) return;
    std::string message = std::to_string(n) +
                          " event(s) name string ids that no string table defines (the first, " +
                          "in the chunk at this offset, names id " + std::to_string(undefined_.first_id) +
                          "); they are kept without those names";
    file_->issues.push_back({file_->path, undefined_.first_offset, std::move(message), false});
  }

  // Returns "" or why the (checksum-valid) body is malformed.
  std::string decode(const Chunk& c) {
    switch (static_cast<ChunkType>(c.h.type)) {
      case ChunkType::kStrings: return strings_->problem_at(c.offset);  // read by the first pass
      case ChunkType::kEvents: return events(c, c.body, c.end, c.h.thread_id, c.h.record_count);
      case ChunkType::kClock: return clock(c.body, c.end);
      case ChunkType::kThread: return thread(c.body, c.end);
      case ChunkType::kStats: return stats(c.body, c.end);
    }
    return "unknown chunk type " + std::to_string(c.h.type) + " (skipped)";
  }

 private:
  std::string events(const Chunk& c, const uint8_t* p, const uint8_t* end, uint32_t tid, uint32_t count) {
    // An event takes at least 3 bytes (head, name, t0).
    if (count > static_cast<uint64_t>(end - p) / 3) return "event count does not match the chunk size";
    // Decode the whole chunk before emitting anything: a malformed chunk
    // contributes no event at all.
    scratch_.clear();
    scratch_.reserve(count);
    uint64_t prev_t0 = 0;
    for (uint32_t i = 0; i < count; ++i) {
      if (p >= end) break;
      uint8_t head = *p++;
      uint8_t kind = head & kHeadKindMask;
      uint64_t name = 0, delta = 0, dur = 0, a = 0, b = 0;
      if (!is_known_event_kind(kind)) return "unknown event kind " + std::to_string(kind);
      if ((p = get_varint(p, end, &name)) == nullptr || (p = get_varint(p, end, &delta)) == nullptr ||
          ((head & kHeadHasDuration) && (p = get_varint(p, end, &dur)) == nullptr) ||
          ((head & kHeadHasA) && (p = get_varint(p, end, &a)) == nullptr) ||
          ((head & kHeadHasB) && (p = get_varint(p, end, &b)) == nullptr)) {
        return "malformed event " + std::to_string(i);
      }
      if (name > UINT32_MAX) return "malformed event " + std::to_string(i) + " (name id)";
      uint64_t t0 = prev_t0 + static_cast<uint64_t>(unzigzag(delta));
      prev_t0 = t0;
      // Made in place, each member written once (a default-made event
      // assigned over cost the decoding half its time). Compilers without
      // aggregates made from parentheses (clang before 16: the fuzz build)
      // copy a made one in.
#if defined(__cpp_aggregate_paren_init)
      RawEvent& e = scratch_.emplace_back(static_cast<EventKind>(kind), tid, static_cast<uint32_t>(name), t0,
                                          t0 + dur, a, b);
#else
      RawEvent& e = scratch_.emplace_back(
          RawEvent{static_cast<EventKind>(kind), tid, static_cast<uint32_t>(name), t0, t0 + dur, a, b});
#endif
      if (e.kind == EventKind::kMemory && ((p = get_varint(p, end, &e.total_allocated)) == nullptr ||
                                           (p = get_varint(p, end, &e.total_reserved)) == nullptr ||
                                           (p = get_varint(p, end, &e.device)) == nullptr)) {
        return "malformed memory event " + std::to_string(i);
      }
      if (e.kind == EventKind::kGpuGraphNode && e.b > UINT32_MAX) {
        return "malformed GPU graph node " + std::to_string(i) + " (graph id)";
      }
      if (e.kind == EventKind::kMemoryTag && (p = get_varint(p, end, &e.device)) == nullptr) {
        return "malformed memory tag " + std::to_string(i);
      }
      if (e.kind == EventKind::kComm) {
        uint64_t group = 0, peer = 0, tag = 0;
        if ((p = get_varint(p, end, &e.comm_bytes)) == nullptr ||
            (p = get_varint(p, end, &group)) == nullptr || (p = get_varint(p, end, &peer)) == nullptr ||
            (p = get_varint(p, end, &tag)) == nullptr || group > UINT32_MAX || !fits_int32(unzigzag(peer)) ||
            !fits_int32(unzigzag(tag))) {
          return "malformed communication event " + std::to_string(i);
        }
        e.comm_group = static_cast<uint32_t>(group);
        e.comm_peer = static_cast<int32_t>(unzigzag(peer));
        e.comm_tag = static_cast<int32_t>(unzigzag(tag));
      }
      if (is_gpu_event_kind(e.kind)) {
        uint64_t context = 0, stream = 0, subkind = 0, detail = 0, thread = 0, graph = 0;
        if ((p = get_varint(p, end, &context)) == nullptr || (p = get_varint(p, end, &stream)) == nullptr ||
            (p = get_varint(p, end, &subkind)) == nullptr ||
            (p = get_varint(p, end, &e.gpu_bytes)) == nullptr ||
            (p = get_varint(p, end, &detail)) == nullptr || (p = get_varint(p, end, &thread)) == nullptr ||
            ((subkind & kGpuFromGraph) != 0 && ((p = get_varint(p, end, &graph)) == nullptr ||
                                                (p = get_varint(p, end, &e.gpu_graph_node)) == nullptr)) ||
            context > UINT32_MAX || stream > UINT32_MAX || (subkind & ~(kGpuFromGraph | 0xff)) != 0 ||
            detail > UINT32_MAX || thread > UINT32_MAX || graph > UINT32_MAX || e.a > UINT32_MAX ||
            e.b > UINT16_MAX) {
          return "malformed GPU event " + std::to_string(i);
        }
        e.gpu_graph = static_cast<uint32_t>(graph);
        subkind &= 0xff;
        e.gpu_context = static_cast<uint32_t>(context);
        e.gpu_stream = static_cast<uint32_t>(stream);
        e.gpu_subkind = static_cast<uint32_t>(subkind);
        e.gpu_detail = static_cast<uint32_t>(detail);
        e.gpu_thread = static_cast<uint32_t>(thread);
      }
    }
    if (scratch_.size() != count || p != end) return "event count does not match the chunk header";
    // One pass over the chunk's events: names checked, times converted.
    for (RawEvent& e : scratch_) {
      note_undefined_ids(c, e);
      bool instant = e.t1_ns == e.t0_ns;
      e.t0_ns = clock_.to_ns(e.t0_ns);
      e.t1_ns = instant ? e.t0_ns : clock_.to_ns(e.t1_ns);
    }
    if (batch_ != nullptr) {
      (*batch_)(scratch_);
    } else if (sink_ != nullptr) {
      (*sink_)(scratch_.data(), scratch_.size());  // one call per chunk
    } else {
      file_->events.insert(file_->events.end(), scratch_.begin(), scratch_.end());
    }
    return "";
  }

  // Anchors were collected by the first pass (read_clock_anchors).
  std::string clock(const uint8_t* p, const uint8_t* end) {
    return end - p == 24 ? "" : "malformed clock anchor";
  }

  std::string thread(const uint8_t* p, const uint8_t* end) {
    uint64_t tid = 0, len = 0;
    if ((p = get_varint(p, end, &tid)) == nullptr || (p = get_varint(p, end, &len)) == nullptr ||
        len != static_cast<uint64_t>(end - p)) {
      return "malformed thread name";
    }
    file_->thread_names[static_cast<uint32_t>(tid)].assign(reinterpret_cast<const char*>(p), len);
    return "";
  }

  std::string stats(const uint8_t* p, const uint8_t* end) {
    uint64_t written = 0, dropped = 0;
    if ((p = get_varint(p, end, &written)) == nullptr || (p = get_varint(p, end, &dropped)) == nullptr ||
        end - p != 1) {
      return "malformed stats";
    }
    file_->reported_events_written = written;
    file_->reported_events_dropped = dropped;
    file_->closed_cleanly = *p == 1;
    return "";
  }

  void note_undefined_ids(const Chunk& c, const RawEvent& e) {
    uint64_t id = strings_->undefined_id(e);
    if (id != 0 && file_->events_with_undefined_ids++ == 0) undefined_ = UndefinedIds{c.offset, id};
  }

  RawFile* file_;
  TickConverter clock_;
  const EventSink* sink_;
  const BatchSink* batch_;
  StringTable* strings_;
  UndefinedIds undefined_;
  std::vector<RawEvent> scratch_;
};

// Checksum bytes that resynchronisation may compute in one pass over a file.
// Every false chunk header on the way (the magic, by chance or by design)
// costs a CRC over the payload it claims, up to 16 MiB: without a bound, a
// file crafted with many of them takes time quadratic in its size. Real
// damage costs about one payload per chunk resynchronised on, far below this.
uint64_t resync_budget(size_t size) {
  return 2 * static_cast<uint64_t>(size) + (64u << 20);
}

struct Resync {
  size_t next;           // the next chunk whose checksum holds, or the file size
  bool gave_up = false;  // the budget ran out first
};

// Where the next chunk whose checksum holds starts at or after `from`.
Resync resync(const uint8_t* data, size_t size, size_t from, uint32_t min_payload, uint64_t* budget,
              uint64_t* spent) {
  for (size_t off = from; off + kChunkHeaderSize <= size; ++off) {
    uint32_t magic;
    std::memcpy(&magic, data + off, 4);
    if (magic != kChunkMagic) continue;
    ChunkHeader h;
    std::memcpy(&h, data + off, sizeof(h));
    if (h.payload_size > kMaxChunkPayload || h.payload_size > size - off - kChunkHeaderSize ||
        h.payload_size < min_payload) {
      continue;
    }
    if (h.payload_size > *budget) return Resync{size, true};
    *budget -= h.payload_size;
    *spent += h.payload_size;
    if (header_crc_ok(h, data + off + kChunkHeaderSize)) return Resync{off};
  }
  return Resync{size};
}

// Walks the chunks of one file: for every chunk whose checksum holds, in
// file order, calls fn(chunk); reports a truncated tail or corrupt chunks
// into `issues` (when given) and resynchronises on the next valid chunk.
// Linear in the file size (resync_budget).
class ChunkWalker {
 public:
  ChunkWalker(const uint8_t* data, size_t size, const std::string& path, uint32_t version,
              std::vector<RawIssue>* issues)
      : data_(data),
        size_(size),
        path_(path),
        sequenced_(version >= kFirstSequencedVersion),
        issues_(issues),
        budget_(resync_budget(size)) {}

  uint64_t resync_checksum_bytes() const { return spent_; }

  template <typename Fn>
  void run(Fn fn) {
    size_t off = kFileHeaderSize;
    while (off < size_) {
      size_t remaining = size_ - off;
      if (remaining < kChunkHeaderSize) {
        report(off, "truncated tail: " + std::to_string(remaining) + " bytes of an incomplete chunk header",
               true);
        return;
      }
      Chunk c;
      std::memcpy(&c.h, data_ + off, sizeof(c.h));
      c.offset = off;
      const ChunkHeader& h = c.h;
      bool plausible =
          h.magic == kChunkMagic && h.payload_size <= kMaxChunkPayload && h.payload_size >= min_payload();
      if (plausible && h.payload_size > remaining - kChunkHeaderSize) {
        // A chunk that runs past the end: the writer was stopped mid-write,
        // unless a valid chunk follows (then this one is corrupt).
        Resync r = resync_from(off + 1);
        if (r.next == size_ && !r.gave_up) {
          report(off,
                 "truncated tail: chunk of " + std::to_string(h.payload_size) + " bytes has only " +
                     std::to_string(remaining - kChunkHeaderSize),
                 true);
          return;
        }
        report_skip(off, "corrupt chunk (length past end of file)", r);
        off = r.next;
        continue;
      }
      if (!plausible || !header_crc_ok(h, data_ + off + kChunkHeaderSize)) {
        Resync r = resync_from(off + 1);
        report_skip(off, plausible ? "corrupt chunk (checksum mismatch)" : "corrupt chunk header", r);
        off = r.next;
        continue;
      }
      const uint8_t* payload = data_ + off + kChunkHeaderSize;
      c.body = payload;
      c.end = payload + h.payload_size;
      if (sequenced_) {
        std::memcpy(&c.sequence, payload, kChunkSequenceSize);
        c.body += kChunkSequenceSize;
      }
      fn(c);
      off += kChunkHeaderSize + h.payload_size;
    }
  }

 private:
  // A version 2 payload holds at least its sequence number.
  uint32_t min_payload() const { return sequenced_ ? kChunkSequenceSize : 0; }

  Resync resync_from(size_t from) { return resync(data_, size_, from, min_payload(), &budget_, &spent_); }

  void report(size_t off, std::string message, bool truncated) {
    if (issues_ != nullptr) issues_->push_back({path_, off, std::move(message), truncated});
  }

  void report_skip(size_t off, const std::string& what, const Resync& r) {
    if (r.gave_up) {
      report(off,
             what + "; resynchronisation stopped (checksum budget spent on false chunk headers): the last " +
                 std::to_string(size_ - off) + " bytes are not read",
             false);
    } else {
      report(off, what + "; skipped " + std::to_string(r.next - off) + " bytes", false);
    }
  }

  const uint8_t* data_;
  size_t size_;
  const std::string& path_;
  bool sequenced_;
  std::vector<RawIssue>* issues_;
  uint64_t budget_;
  uint64_t spent_ = 0;
};

// Version 2 chunk sequence numbers: a chunk seen before is a duplicate
// (dropped), one numbered below the highest seen so far was moved
// (reordered, kept), and numbers never seen are missing chunks.
class SequenceCheck {
 public:
  explicit SequenceCheck(RawFile* file) : file_(file) {}

  // False when the chunk is a duplicate and must be dropped.
  bool admit(const Chunk& c) {
    auto [it, inserted] = offset_by_sequence_.emplace(c.sequence, c.offset);
    if (!inserted) {
      ++file_->chunks_duplicated;
      issue(c.offset, "duplicate chunk (sequence " + std::to_string(c.sequence) + ", first at offset " +
                          std::to_string(it->second) + "); dropped");
      return false;
    }
    if (highest_ >= 0 && c.sequence < highest_) {
      ++file_->chunks_reordered;
      issue(c.offset, "chunk out of order (sequence " + std::to_string(c.sequence) + " after " +
                          std::to_string(highest_) + ")");
    }
    highest_ = std::max<int64_t>(highest_, c.sequence);
    return true;
  }

  // Reports the numbers never seen, one issue per gap (a truncated tail
  // leaves no gap: the chunks after it are simply not there).
  void finish() {
    std::vector<std::pair<uint32_t, uint64_t>> seen(offset_by_sequence_.begin(), offset_by_sequence_.end());
    std::sort(seen.begin(), seen.end());
    int64_t expected = 0;
    for (const auto& [sequence, offset] : seen) {
      if (sequence > expected) {
        uint64_t missing = sequence - static_cast<uint64_t>(expected);
        file_->chunks_missing += missing;
        issue(offset, std::to_string(missing) + " chunk(s) missing (sequence " + std::to_string(expected) +
                          (missing > 1 ? ".." + std::to_string(sequence - 1) : "") +
                          ", before the chunk read at this offset)");
      }
      expected = int64_t{sequence} + 1;
    }
  }

 private:
  void issue(uint64_t offset, std::string message) {
    file_->issues.push_back({file_->path, offset, std::move(message), false});
  }

  RawFile* file_;
  std::unordered_map<uint32_t, uint64_t> offset_by_sequence_;
  int64_t highest_ = -1;
};

// Checks the file header; "" or why the file cannot be read.
std::string check_file_header(const uint8_t* data, size_t size, const std::string& path, FileHeader* h) {
  if (size < kFileHeaderSize) {
    return "'" + path + "' is too short for a trainprof raw file (" + std::to_string(size) +
           " bytes, header is " + std::to_string(kFileHeaderSize) + ")";
  }
  std::memcpy(h, data, sizeof(FileHeader));
  if (std::memcmp(h->magic, kFileMagic, sizeof(kFileMagic)) != 0) {
    return "'" + path + "' is not a trainprof raw file (bad magic)";
  }
  if (h->version < kOldestReadableVersion || h->version > kFormatVersion) {
    return "'" + path + "' has raw format version " + std::to_string(h->version) +
           "; this trainprof reads versions " + std::to_string(kOldestReadableVersion) + " to " +
           std::to_string(kFormatVersion);
  }
  if (crc32c(0, data, offsetof(FileHeader, crc)) != h->crc || h->header_size != kFileHeaderSize ||
      (h->clock_source != 1 && h->clock_source != 2)) {
    return "'" + path + "' has a corrupt file header (checksum mismatch)";
  }
  return "";
}

}  // namespace

const std::string& RawFile::name(uint32_t id) const {
  static const std::string kEmpty;
  return id < strings.size() ? strings[id] : kEmpty;
}

int64_t RawFile::realtime_offset_ns() const {
  const ClockPoint& a = anchors.front();
  return static_cast<int64_t>(a.realtime_ns - a.monotonic_ns);  // unsigned: no overflow on odd anchors
}

namespace {

// Reads a whole file held in memory; `release(from, to)` may drop the pages
// of bytes already read.
template <typename Release>
std::optional<RawFile> read_bytes(const uint8_t* data, size_t size, const std::string& path,
                                  std::string* error, const EventSink* sink, const BatchSink* batch,
                                  Release release) {
  RawFile file;
  file.path = path;
  *error = check_file_header(data, size, path, &file.header);
  if (!error->empty()) return std::nullopt;
  const FileHeader& h = file.header;
  file.host.assign(h.host, strnlen(h.host, sizeof(h.host)));
  file.anchors.push_back(ClockPoint{h.anchor_ticks, h.anchor_monotonic_ns, h.anchor_realtime_ns});
  bool sequenced = h.version >= kFirstSequencedVersion;

  // Pass 1: the clock anchors (a CLOCK chunk is written at every flush, the
  // last one is needed to convert the first event), in sequence order with
  // duplicates dropped, and the string table. Pass 2: everything else.
  std::map<uint64_t, ClockPoint> anchors;  // by sequence number (version 1: by position)
  // Pages already checked need not stay resident (in either pass): the
  // file is never whole in memory.
  constexpr size_t kReleaseEvery = 8u << 20;
  size_t released = 0;
  auto release_before = [&](size_t offset) {
    if (offset - released < kReleaseEvery) return;
    release(released, offset);
    released = offset;
  };
  // Ids are dense from 1 and a string record takes at least 2 bytes: an id
  // past size / 2 is not one the writer gave.
  StringTable strings(&file, size / 2);
  ChunkWalker(data, size, path, h.version, nullptr).run([&](const Chunk& c) {
    release_before(c.offset);
    if (c.h.type == static_cast<uint16_t>(ChunkType::kStrings)) return strings.read(c);
    if (c.h.type != static_cast<uint16_t>(ChunkType::kClock) || c.end - c.body != 24) return;
    ClockPoint p;
    std::memcpy(&p.ticks, c.body, 8);
    std::memcpy(&p.monotonic_ns, c.body + 8, 8);
    std::memcpy(&p.realtime_ns, c.body + 16, 8);
    anchors.emplace(sequenced ? c.sequence : anchors.size(), p);
  });
  for (const auto& [sequence, p] : anchors) file.anchors.push_back(p);
  release(0, size);  // pass 2 maps pages back one at a time
  if (sink == nullptr && batch == nullptr) file.events.reserve(size / 8);  // events take >= 3 bytes on disk
  ChunkDecoder decoder(&file, TickConverter(file.header, file.anchors), sink, batch, &strings);
  SequenceCheck sequence(&file);
  released = 0;
  ChunkWalker walker(data, size, path, h.version, &file.issues);
  walker.run([&](const Chunk& c) {
    release_before(c.offset);
    if (sequenced && !sequence.admit(c)) return;
    std::string problem = decoder.decode(c);
    if (!problem.empty()) file.issues.push_back({path, c.offset, problem, false});
  });
  if (sequenced) sequence.finish();
  decoder.finish();
  file.resync_checksum_bytes = walker.resync_checksum_bytes();
  return file;
}

}  // namespace

std::optional<RawFile> read_raw_file(const std::string& path, std::string* error, const EventSink* sink) {
  MappedFile map;
  if (!map.open(path, error)) return std::nullopt;
  return read_bytes(map.data(), map.size(), path, error, sink, nullptr,
                    [&map](size_t from, size_t to) { map.release(from, to); });
}

std::optional<RawFile> read_raw_bytes(const uint8_t* data, size_t size, const std::string& name,
                                      std::string* error, const EventSink* sink) {
  return read_bytes(data, size, name, error, sink, nullptr, [](size_t, size_t) {});
}

namespace {

// Decoded chunks between the decoding thread and the calling one: at most
// kDepth wait, so memory stays a few chunks whatever the file's size; their
// vectors go back and forth, so no event is copied.
class BatchQueue {
 public:
  static constexpr size_t kDepth = 4;

  // Decoding thread: hands `events` over (waiting while kDepth wait) and
  // leaves an emptied vector in its place.
  void put(std::vector<RawEvent>& events) {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [this] { return full_.size() < kDepth || cancelled_; });
    if (cancelled_) return;  // the reader stopped: nobody takes it
    full_.push_back(std::move(events));
    events = std::vector<RawEvent>();
    if (!spare_.empty()) {
      events = std::move(spare_.back());
      spare_.pop_back();
    }
    ready_.notify_one();
  }
  // Decoding thread: no more batches.
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    ready_.notify_one();
  }
  // Calling thread: the next batch, false when there is none left.
  bool take(std::vector<RawEvent>* events) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return !full_.empty() || closed_; });
    if (full_.empty()) return false;
    *events = std::move(full_.front());
    full_.pop_front();
    room_.notify_one();
    return true;
  }
  // Calling thread: a batch's vector, emptied, for reuse.
  void give_back(std::vector<RawEvent>&& events) {
    events.clear();
    std::lock_guard<std::mutex> lock(mu_);
    if (spare_.size() < kDepth) spare_.push_back(std::move(events));
  }
  // Calling thread: the decoding thread drops what it decodes from now on.
  void cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    room_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_, room_;
  std::deque<std::vector<RawEvent>> full_;
  std::vector<std::vector<RawEvent>> spare_;
  bool closed_ = false;
  bool cancelled_ = false;
};

}  // namespace

std::optional<RawFile> read_raw_file_decoding_ahead(const std::string& path, std::string* error,
                                                    const EventSink& sink) {
  MappedFile map;
  if (!map.open(path, error)) return std::nullopt;
  BatchQueue queue;
  std::optional<RawFile> file;
  std::string decode_error;
  std::exception_ptr decode_failure;
  BatchSink put = [&queue](std::vector<RawEvent>& events) { queue.put(events); };
  auto decode = [&] {
    try {
      file = read_bytes(map.data(), map.size(), path, &decode_error, nullptr, &put,
                        [&map](size_t from, size_t to) { map.release(from, to); });
    } catch (...) {
      decode_failure = std::current_exception();
    }
    queue.close();
  };
  std::thread decoder;
  try {
    decoder = std::thread(decode);
  } catch (const std::system_error&) {  // no thread to be had: decode here
    return read_raw_file(path, error, &sink);
  }
  std::vector<RawEvent> events;
  try {
    while (queue.take(&events)) {
      sink(events.data(), events.size());
      queue.give_back(std::move(events));
    }
  } catch (...) {
    queue.cancel();
    while (queue.take(&events)) {
    }
    decoder.join();
    throw;
  }
  decoder.join();
  if (decode_failure) std::rethrow_exception(decode_failure);
  *error = decode_error;
  return file;
}

std::map<uint32_t, uint64_t> event_records_by_thread(const std::string& path) {
  std::map<uint32_t, uint64_t> records;
  MappedFile map;
  std::string ignored;
  FileHeader h;
  if (!map.open(path, &ignored) || !check_file_header(map.data(), map.size(), path, &h).empty())
    return records;
  // Only chunks whose checksum holds, and no more records than their bytes
  // can hold: the counts size memory.
  ChunkWalker(map.data(), map.size(), path, h.version, nullptr).run([&](const Chunk& c) {
    if (c.h.type != static_cast<uint16_t>(ChunkType::kEvents)) return;
    records[c.h.thread_id] += std::min<uint64_t>(c.h.record_count, static_cast<uint64_t>(c.end - c.body) / 3);
  });
  return records;
}

std::vector<std::string> raw_files_of_run(const std::string& run_dir, std::string* error) {
  namespace fs = std::filesystem;
  fs::path raw_dir = fs::path(run_dir) / kRawDirName;
  std::error_code ec;
  std::vector<std::string> paths;
  if (!fs::is_directory(raw_dir, ec)) {
    *error = "'" + run_dir + "' has no raw/ directory (not a trainprof run, or its raw data was removed)";
    return paths;
  }
  for (const auto& entry : fs::directory_iterator(raw_dir, ec)) {
    if (entry.path().extension() == ".tpraw") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) *error = "'" + raw_dir.string() + "' holds no .tpraw file";
  return paths;
}

std::optional<std::vector<RawFile>> read_run_directory(const std::string& run_dir, std::string* error) {
  std::vector<std::string> paths = raw_files_of_run(run_dir, error);
  if (paths.empty()) return std::nullopt;
  std::vector<RawFile> files;
  for (const std::string& p : paths) {
    std::optional<RawFile> f = read_raw_file(p, error);
    if (!f) return std::nullopt;
    files.push_back(std::move(*f));
  }
  return files;
}

}  // namespace trainprof::raw
