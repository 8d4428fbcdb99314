// Copyright trainprof authors.
#include "raw/raw_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "raw/crc32c.h"
#include "raw/varint.h"

namespace trainprof::raw {
namespace {

// Read-only mapping of a whole file.
class MappedFile {
 public:
  bool open(const std::string& path, std::string* error) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
  uint32_t crc = crc32c(0, &h, offsetof(ChunkHeader, crc));
  return crc32c(crc, payload, h.payload_size) == h.crc;
}

struct Pending {                 // events before tick -> ns conversion
  std::vector<RawEvent> events;  // t0_ns/t1_ns hold ticks here
};

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
    return first_ns + static_cast<uint64_t>(static_cast<double>(d) * ns_per_tick);
  }
};

class ChunkDecoder {
 public:
  ChunkDecoder(RawFile* file, TickConverter clock, const EventSink* sink)
      : file_(file), clock_(clock), sink_(sink) {}

  // Returns "" or why the (checksum-valid) payload is malformed.
  std::string decode(const ChunkHeader& h, const uint8_t* p) {
    const uint8_t* end = p + h.payload_size;
    switch (static_cast<ChunkType>(h.type)) {
      case ChunkType::kStrings: return strings(p, end, h.record_count);
      case ChunkType::kEvents: return events(p, end, h.thread_id, h.record_count);
      case ChunkType::kClock: return clock(p, end);
      case ChunkType::kThread: return thread(p, end);
      case ChunkType::kStats: return stats(p, end);
    }
    return "unknown chunk type " + std::to_string(h.type) + " (skipped)";
  }

 private:
  std::string strings(const uint8_t* p, const uint8_t* end, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t id = 0, len = 0;
      if ((p = get_varint(p, end, &id)) == nullptr || (p = get_varint(p, end, &len)) == nullptr ||
          len > static_cast<uint64_t>(end - p) || id > (1u << 30)) {
        return "malformed string table";
      }
      if (file_->strings.size() <= id) file_->strings.resize(id + 1);
      file_->strings[id].assign(reinterpret_cast<const char*>(p), len);
      p += len;
    }
    return "";
  }

  std::string events(const uint8_t* p, const uint8_t* end, uint32_t tid, uint32_t count) {
    // Decode the whole chunk before emitting anything: a malformed chunk
    // contributes no event at all.
    scratch_.clear();
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
      uint64_t t0 = prev_t0 + static_cast<uint64_t>(unzigzag(delta));
      prev_t0 = t0;
      RawEvent& e = scratch_.emplace_back();
      e = RawEvent{
          static_cast<EventKind>(kind), tid, static_cast<uint32_t>(name), t0, t0 + dur, a, b, 0, 0, 0};
      if (e.kind == EventKind::kMemory && ((p = get_varint(p, end, &e.total_allocated)) == nullptr ||
                                           (p = get_varint(p, end, &e.total_reserved)) == nullptr ||
                                           (p = get_varint(p, end, &e.device)) == nullptr)) {
        return "malformed memory event " + std::to_string(i);
      }
    }
    if (scratch_.size() != count || p != end) return "event count does not match the chunk header";
    for (RawEvent& e : scratch_) {
      bool instant = e.t1_ns == e.t0_ns;
      e.t0_ns = clock_.to_ns(e.t0_ns);
      e.t1_ns = instant ? e.t0_ns : clock_.to_ns(e.t1_ns);
    }
    if (sink_ != nullptr) {
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

  RawFile* file_;
  TickConverter clock_;
  const EventSink* sink_;
  std::vector<RawEvent> scratch_;
};

// Where the next plausible chunk starts at or after `from`, or `size`.
size_t resync(const uint8_t* data, size_t size, size_t from) {
  for (size_t off = from; off + kChunkHeaderSize <= size; ++off) {
    uint32_t magic;
    std::memcpy(&magic, data + off, 4);
    if (magic != kChunkMagic) continue;
    ChunkHeader h;
    std::memcpy(&h, data + off, sizeof(h));
    if (h.payload_size > kMaxChunkPayload || h.payload_size > size - off - kChunkHeaderSize) continue;
    if (header_crc_ok(h, data + off + kChunkHeaderSize)) return off;
  }
  return size;
}

// Calls fn(header, payload, offset) for every chunk whose checksum holds, in
// file order; reports a truncated tail or corrupt chunks into `issues` (when
// given) and resynchronises on the next valid chunk.
template <typename Fn>
void for_each_valid_chunk(const uint8_t* data, size_t size, const std::string& path,
                          std::vector<RawIssue>* issues, Fn fn) {
  auto report = [&](size_t off, std::string message, bool truncated) {
    if (issues != nullptr) issues->push_back({path, off, std::move(message), truncated});
  };
  size_t off = kFileHeaderSize;
  while (off < size) {
    size_t remaining = size - off;
    ChunkHeader ch;
    if (remaining < kChunkHeaderSize) {
      report(off, "truncated tail: " + std::to_string(remaining) + " bytes of an incomplete chunk header",
             true);
      return;
    }
    std::memcpy(&ch, data + off, sizeof(ch));
    bool plausible = ch.magic == kChunkMagic && ch.payload_size <= kMaxChunkPayload;
    if (plausible && ch.payload_size > remaining - kChunkHeaderSize) {
      // A chunk that runs past the end: the writer was stopped mid-write,
      // unless a valid chunk follows (then this one is corrupt).
      size_t next = resync(data, size, off + 1);
      if (next == size) {
        report(off,
               "truncated tail: chunk of " + std::to_string(ch.payload_size) + " bytes has only " +
                   std::to_string(remaining - kChunkHeaderSize),
               true);
        return;
      }
      report(off, "corrupt chunk (length past end of file); skipped " + std::to_string(next - off) + " bytes",
             false);
      off = next;
      continue;
    }
    if (!plausible || !header_crc_ok(ch, data + off + kChunkHeaderSize)) {
      size_t next = resync(data, size, off + 1);
      report(off,
             std::string(plausible ? "corrupt chunk (checksum mismatch)" : "corrupt chunk header") +
                 "; skipped " + std::to_string(next - off) + " bytes",
             false);
      off = next;
      continue;
    }
    fn(ch, data + off + kChunkHeaderSize, off);
    off += kChunkHeaderSize + ch.payload_size;
  }
}

}  // namespace

const std::string& RawFile::name(uint32_t id) const {
  static const std::string kEmpty;
  return id < strings.size() ? strings[id] : kEmpty;
}

int64_t RawFile::realtime_offset_ns() const {
  const ClockPoint& a = anchors.front();
  return static_cast<int64_t>(a.realtime_ns) - static_cast<int64_t>(a.monotonic_ns);
}

std::optional<RawFile> read_raw_file(const std::string& path, std::string* error, const EventSink* sink) {
  MappedFile map;
  if (!map.open(path, error)) return std::nullopt;
  const uint8_t* data = map.data();
  size_t size = map.size();
  RawFile file;
  file.path = path;
  if (size < kFileHeaderSize) {
    *error = "'" + path + "' is too short for a trainprof raw file (" + std::to_string(size) +
             " bytes, header is " + std::to_string(kFileHeaderSize) + ")";
    return std::nullopt;
  }
  std::memcpy(&file.header, data, sizeof(FileHeader));
  const FileHeader& h = file.header;
  if (std::memcmp(h.magic, kFileMagic, sizeof(kFileMagic)) != 0) {
    *error = "'" + path + "' is not a trainprof raw file (bad magic)";
    return std::nullopt;
  }
  if (h.version != kFormatVersion) {
    *error = "'" + path + "' has raw format version " + std::to_string(h.version) +
             "; this trainprof reads version " + std::to_string(kFormatVersion);
    return std::nullopt;
  }
  if (crc32c(0, data, offsetof(FileHeader, crc)) != h.crc || h.header_size != kFileHeaderSize ||
      (h.clock_source != 1 && h.clock_source != 2)) {
    *error = "'" + path + "' has a corrupt file header (checksum mismatch)";
    return std::nullopt;
  }
  file.host.assign(h.host, strnlen(h.host, sizeof(h.host)));
  file.anchors.push_back(ClockPoint{h.anchor_ticks, h.anchor_monotonic_ns, h.anchor_realtime_ns});

  // Pass 1: the clock anchors (a CLOCK chunk is written at every flush, the
  // last one is needed to convert the first event). Pass 2: everything else.
  for_each_valid_chunk(data, size, path, nullptr, [&](const ChunkHeader& ch, const uint8_t* payload, size_t) {
    if (ch.type != static_cast<uint16_t>(ChunkType::kClock) || ch.payload_size != 24) return;
    ClockPoint c;
    std::memcpy(&c.ticks, payload, 8);
    std::memcpy(&c.monotonic_ns, payload + 8, 8);
    std::memcpy(&c.realtime_ns, payload + 16, 8);
    file.anchors.push_back(c);
  });
  map.release(0, size);                                // pass 2 maps pages back one at a time
  if (sink == nullptr) file.events.reserve(size / 8);  // events take >= 3 bytes on disk
  ChunkDecoder decoder(&file, TickConverter(file.header, file.anchors), sink);
  size_t released = 0;
  for_each_valid_chunk(data, size, path, &file.issues,
                       [&](const ChunkHeader& ch, const uint8_t* payload, size_t off) {
                         std::string problem = decoder.decode(ch, payload);
                         if (!problem.empty()) file.issues.push_back({path, off, problem, false});
                         // Pages already decoded need not stay resident.
                         if (off - released >= (8u << 20)) {
                           map.release(released, off);
                           released = off;
                         }
                       });
  return file;
}

std::map<uint32_t, uint64_t> event_records_by_thread(const std::string& path) {
  std::map<uint32_t, uint64_t> records;
  MappedFile map;
  std::string ignored;
  if (!map.open(path, &ignored)) return records;
  size_t size = map.size();
  for (size_t off = kFileHeaderSize; size >= kChunkHeaderSize && off <= size - kChunkHeaderSize;) {
    ChunkHeader ch;
    std::memcpy(&ch, map.data() + off, sizeof(ch));
    if (ch.magic != kChunkMagic || ch.payload_size > kMaxChunkPayload) break;
    if (ch.type == static_cast<uint16_t>(ChunkType::kEvents)) records[ch.thread_id] += ch.record_count;
    off += kChunkHeaderSize + ch.payload_size;
  }
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
