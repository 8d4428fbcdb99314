// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The raw reader against truncated, corrupt and foreign files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "analysis/run_loader.h"
#include "raw/crc32c.h"
#include "raw/format.h"
#include "raw/varint.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;
using test::write_bytes;

// Records `threads` x `per_thread` ranges and returns the raw file's path.
std::string record_run(const TempDir& dir, int threads, int per_thread) {
  ProfilerOptions o;
  o.output_path = dir.sub("runs");
  Profiler prof(o);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([per_thread, t] {
      for (int i = 0; i < per_thread; ++i) trainprof::Range r("r" + std::to_string((t * 7 + i) % 50));
    });
  }
  for (auto& th : ts) th.join();
  prof.stop();
  return prof.last_run().run_dir + "/raw/host.tpraw";
}

std::string bytes_of(const std::string& path) {
  return test::read_text(path);
}

raw::RawFile must_read(const std::string& path) {
  std::string error;
  auto f = raw::read_raw_file(path, &error);
  EXPECT_TRUE(f.has_value()) << error;
  return f ? std::move(*f) : raw::RawFile{};
}

std::string read_error(const std::string& path) {
  std::string error;
  auto f = raw::read_raw_file(path, &error);
  EXPECT_FALSE(f.has_value());
  return error;
}

bool same_event(const raw::RawEvent& a, const raw::RawEvent& b) {
  return a.kind == b.kind && a.tid == b.tid && a.name_id == b.name_id && a.a == b.a && a.b == b.b;
}

TEST(RawReader, TruncationAnywhereYieldsAPrefixAndAReport) {
  TempDir dir;
  std::string path = record_run(dir, 3, 5000);
  std::string full = bytes_of(path);
  raw::RawFile whole = must_read(path);
  ASSERT_TRUE(whole.issues.empty());
  ASSERT_TRUE(whole.closed_cleanly);
  ASSERT_EQ(whole.events.size(), 15001u);

  std::string cut_path = dir.sub("cut.tpraw");
  size_t checked = 0;
  for (size_t cut = raw::kFileHeaderSize; cut < full.size(); cut += 1 + full.size() / 300) {
    write_bytes(cut_path, full.substr(0, cut));
    raw::RawFile part = must_read(cut_path);
    ASSERT_LE(part.events.size(), whole.events.size());
    for (size_t i = 0; i < part.events.size(); ++i) {
      ASSERT_TRUE(same_event(part.events[i], whole.events[i])) << "cut " << cut << " event " << i;
      ASSERT_EQ(part.name(part.events[i].name_id), whole.name(whole.events[i].name_id));
    }
    for (const raw::RawIssue& issue : part.issues) {
      EXPECT_TRUE(issue.truncated_tail) << issue.message;
      EXPECT_LT(issue.offset, cut);
      EXPECT_EQ(issue.file, cut_path);
    }
    EXPECT_FALSE(part.closed_cleanly);
    ++checked;
  }
  EXPECT_GT(checked, 250u);
}

TEST(RawReader, CorruptChunkIsSkippedAndReported) {
  TempDir dir;
  std::string path = record_run(dir, 1, 20000);  // ~10 event chunks
  std::string bytes = bytes_of(path);
  raw::RawFile whole = must_read(path);

  // Find the third events chunk and flip a byte in its payload.
  size_t off = raw::kFileHeaderSize;
  int events_chunks = 0;
  size_t victim = 0;
  uint32_t victim_count = 0;
  while (off + raw::kChunkHeaderSize <= bytes.size()) {
    raw::ChunkHeader h;
    std::memcpy(&h, bytes.data() + off, sizeof(h));
    if (h.type == static_cast<uint16_t>(raw::ChunkType::kEvents) && ++events_chunks == 3) {
      victim = off;
      victim_count = h.record_count;
      break;
    }
    off += raw::kChunkHeaderSize + h.payload_size;
  }
  ASSERT_NE(victim, 0u);
  bytes[victim + raw::kChunkHeaderSize + 17] ^= 0x5a;
  std::string bad_path = dir.sub("bad.tpraw");
  write_bytes(bad_path, bytes);
  raw::RawFile part = must_read(bad_path);
  // The corrupt chunk, then the gap it leaves in the chunk sequence.
  ASSERT_EQ(part.issues.size(), 2u);
  EXPECT_EQ(part.issues[0].offset, victim);
  EXPECT_FALSE(part.issues[0].truncated_tail);
  EXPECT_NE(part.issues[0].message.find("checksum"), std::string::npos);
  EXPECT_NE(part.issues[1].message.find("1 chunk(s) missing"), std::string::npos) << part.issues[1].message;
  EXPECT_EQ(part.chunks_missing, 1u);
  EXPECT_EQ(part.events.size(), whole.events.size() - victim_count);
  EXPECT_TRUE(part.closed_cleanly);

  // A smashed chunk header (length field) is skipped too.
  bytes = bytes_of(path);
  uint32_t huge = 0xfffffff0u;
  std::memcpy(&bytes[victim + 12], &huge, 4);
  write_bytes(bad_path, bytes);
  part = must_read(bad_path);
  ASSERT_EQ(part.issues.size(), 2u);
  EXPECT_EQ(part.issues[0].offset, victim);
  EXPECT_EQ(part.chunks_missing, 1u);
  EXPECT_EQ(part.events.size(), whole.events.size() - victim_count);
}

TEST(RawReader, GarbageAppendedIsReportedNotDecoded) {
  TempDir dir;
  std::string path = record_run(dir, 1, 100);
  raw::RawFile whole = must_read(path);
  std::string bytes = bytes_of(path) + std::string(1000, '\x42');
  std::string bad_path = dir.sub("garbage.tpraw");
  write_bytes(bad_path, bytes);
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.events.size(), whole.events.size());
  ASSERT_FALSE(part.issues.empty());
  EXPECT_EQ(part.issues[0].offset, bytes.size() - 1000);
}

TEST(RawReader, ForeignAndEmptyFilesAreRejectedClearly) {
  TempDir dir;
  std::string p = dir.sub("x.tpraw");
  write_bytes(p, "");
  EXPECT_NE(read_error(p).find("too short"), std::string::npos);
  write_bytes(p, std::string(200, 'a'));
  EXPECT_NE(read_error(p).find("not a trainprof raw file"), std::string::npos);
  EXPECT_NE(read_error(dir.sub("missing.tpraw")).find("cannot open"), std::string::npos);
  // A FIFO planted as a raw file neither blocks the reader nor is read.
  ASSERT_EQ(mkfifo(dir.sub("fifo.tpraw").c_str(), 0600), 0);
  EXPECT_NE(read_error(dir.sub("fifo.tpraw")).find("not a regular file"), std::string::npos);

  std::string real = bytes_of(record_run(dir, 1, 10));
  std::string future = real;
  uint32_t v = 99;
  std::memcpy(&future[8], &v, 4);
  write_bytes(p, future);
  std::string err = read_error(p);
  EXPECT_NE(err.find("version 99"), std::string::npos) << err;
  EXPECT_NE(err.find("reads versions 1 to 6"), std::string::npos) << err;

  std::string bad_header = real;
  bad_header[40] ^= 1;  // inside the clock anchor
  write_bytes(p, bad_header);
  EXPECT_NE(read_error(p).find("corrupt file header"), std::string::npos);

  std::string error;
  EXPECT_FALSE(raw::read_run_directory(dir.sub("nothing-here"), &error));
  EXPECT_NE(error.find("no raw/ directory"), std::string::npos);
}

TEST(RawReader, RunWithZeroEvents) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.activities = {Activity::GPU};
  Profiler prof(o);
  prof.stop();
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  EXPECT_TRUE(f.issues.empty());
  EXPECT_TRUE(f.closed_cleanly);
  EXPECT_EQ(f.events.size(), 1u);  // the ProfilerStep#0 of start..stop
}

// ---------------------------------------------------------------------------
// Whole chunks deleted, duplicated, moved (format version 2 sequence numbers).

std::string chunk_of(const std::string& bytes, const test::RawChunk& c) {
  return bytes.substr(c.offset, c.size);
}

std::vector<test::RawChunk> chunks_of_type(const std::string& bytes, raw::ChunkType type) {
  std::vector<test::RawChunk> out;
  for (const test::RawChunk& c : test::raw_chunks(bytes)) {
    if (c.header.type == static_cast<uint16_t>(type)) out.push_back(c);
  }
  return out;
}

// A recorded run's raw file: its path, bytes, what it reads as, and its
// events chunks (the material the damage tests cut and paste).
struct RecordedFile {
  std::string path;
  std::string bytes;
  raw::RawFile read;
  std::vector<test::RawChunk> events;
};

RecordedFile record_file(const TempDir& dir, int threads, int ranges_per_thread) {
  RecordedFile r;
  r.path = record_run(dir, threads, ranges_per_thread);
  r.bytes = bytes_of(r.path);
  r.read = must_read(r.path);
  r.events = chunks_of_type(r.bytes, raw::ChunkType::kEvents);
  return r;
}

TEST(RawReader, DuplicatedChunksAreDroppedAndCounted) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 20000);
  const std::string& full = rec.bytes;
  const raw::RawFile& whole = rec.read;
  const std::vector<test::RawChunk>& events = rec.events;
  std::vector<test::RawChunk> strings = chunks_of_type(full, raw::ChunkType::kStrings);
  ASSERT_GE(events.size(), 4u);
  ASSERT_FALSE(strings.empty());
  // An events chunk copied right after itself, the string table at the end.
  const test::RawChunk& e = events[2];
  size_t after = e.offset + e.size;
  std::string bytes =
      full.substr(0, after) + chunk_of(full, e) + full.substr(after) + chunk_of(full, strings[0]);
  std::string bad_path = dir.sub("dup.tpraw");
  write_bytes(bad_path, bytes);
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.events.size(), whole.events.size());
  EXPECT_EQ(test::count_by_name(part), test::count_by_name(whole));
  EXPECT_EQ(part.chunks_duplicated, 2u);
  EXPECT_EQ(part.chunks_missing, 0u);
  EXPECT_EQ(part.chunks_reordered, 0u);
  ASSERT_EQ(part.issues.size(), 2u);
  EXPECT_EQ(part.issues[0].offset, after);
  EXPECT_EQ(part.issues[0].file, bad_path);
  EXPECT_NE(part.issues[0].message.find("duplicate chunk"), std::string::npos) << part.issues[0].message;
  EXPECT_NE(part.issues[0].message.find("first at offset " + std::to_string(e.offset)), std::string::npos);
  EXPECT_EQ(part.issues[1].offset, full.size() + e.size);
}

TEST(RawReader, DeletedChunkIsReportedMissing) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 20000);
  const std::string& full = rec.bytes;
  const raw::RawFile& whole = rec.read;
  const std::vector<test::RawChunk>& events = rec.events;
  ASSERT_GE(events.size(), 4u);
  const test::RawChunk& e = events[2];
  std::string bad_path = dir.sub("cut.tpraw");
  write_bytes(bad_path, full.substr(0, e.offset) + full.substr(e.offset + e.size));
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.events.size(), whole.events.size() - e.header.record_count);
  EXPECT_EQ(part.chunks_missing, 1u);
  EXPECT_EQ(part.chunks_duplicated, 0u);
  EXPECT_EQ(part.chunks_reordered, 0u);
  ASSERT_EQ(part.issues.size(), 1u);
  EXPECT_EQ(part.issues[0].offset, e.offset);  // the chunk after the gap now starts there
  EXPECT_NE(part.issues[0].message.find("1 chunk(s) missing"), std::string::npos) << part.issues[0].message;
}

TEST(RawReader, SwappedChunksAreReportedAndKept) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 20000);
  const std::string& full = rec.bytes;
  const raw::RawFile& whole = rec.read;
  const std::vector<test::RawChunk>& events = rec.events;
  ASSERT_GE(events.size(), 4u);
  const test::RawChunk& a = events[1];
  const test::RawChunk& b = events[2];
  // b, then what lay between them, then a.
  std::string between = full.substr(a.offset + a.size, b.offset - a.offset - a.size);
  std::string bytes = full.substr(0, a.offset) + chunk_of(full, b) + between + chunk_of(full, a) +
                      full.substr(b.offset + b.size);
  std::string bad_path = dir.sub("swap.tpraw");
  write_bytes(bad_path, bytes);
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.events.size(), whole.events.size());
  EXPECT_EQ(test::count_by_name(part), test::count_by_name(whole));
  EXPECT_EQ(part.chunks_missing, 0u);
  EXPECT_EQ(part.chunks_duplicated, 0u);
  EXPECT_GE(part.chunks_reordered, 1u);
  ASSERT_FALSE(part.issues.empty());
  EXPECT_NE(part.issues[0].message.find("out of order"), std::string::npos) << part.issues[0].message;
  EXPECT_GT(part.issues[0].offset, a.offset);
}

// ---------------------------------------------------------------------------
// String ids that no string table defines (checksums hold: a bug or a hand).

// The ids a STRINGS chunk defines, in its order.
std::vector<uint64_t> string_ids_in(const std::string& bytes, const test::RawChunk& c) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + c.offset + raw::kChunkHeaderSize +
                                                   raw::kChunkSequenceSize);
  const auto* end = reinterpret_cast<const uint8_t*>(bytes.data() + c.offset + c.size);
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < c.header.record_count; ++i) {
    uint64_t id = 0, len = 0;
    p = raw::get_varint(raw::get_varint(p, end, &id), end, &len) + len;
    ids.push_back(id);
  }
  return ids;
}

size_t events_named(const raw::RawFile& f, uint32_t id) {
  return static_cast<size_t>(std::count_if(f.events.begin(), f.events.end(),
                                           [id](const raw::RawEvent& e) { return e.name_id == id; }));
}

TEST(RawReader, EventsNamingAnUndefinedStringAreReportedAndCounted) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 20000);
  ASSERT_GE(rec.events.size(), 3u);
  const test::RawChunk& e = rec.events[2];
  std::string bad_path = dir.sub("undefined.tpraw");
  // Past half the file size (no table may define it), and the first id
  // after the defined ones.
  for (uint64_t id : {(uint64_t{1} << 24) + 7, uint64_t{rec.read.strings.size()}}) {
    write_bytes(bad_path, test::with_first_event_named(rec.bytes, e, id));
    raw::RawFile part = must_read(bad_path);
    EXPECT_EQ(part.events.size(), rec.read.events.size());  // kept, unnamed
    EXPECT_EQ(events_named(part, static_cast<uint32_t>(id)), 1u);
    EXPECT_EQ(part.events_with_undefined_ids, 1u);
    ASSERT_EQ(part.issues.size(), 1u) << id;
    EXPECT_EQ(part.issues[0].file, bad_path);
    EXPECT_EQ(part.issues[0].offset, e.offset);
    EXPECT_NE(part.issues[0].message.find("1 event(s) name string ids that no string table defines"),
              std::string::npos)
        << part.issues[0].message;
    EXPECT_NE(part.issues[0].message.find("names id " + std::to_string(id) + ")"), std::string::npos)
        << part.issues[0].message;
  }
}

TEST(RawReader, AStringTableShortOfItsRecordsIsReportedWithTheEventsItLeavesUnnamed) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 20000);
  std::vector<test::RawChunk> strings = chunks_of_type(rec.bytes, raw::ChunkType::kStrings);
  ASSERT_FALSE(strings.empty());
  const test::RawChunk& table = strings[0];
  std::vector<uint64_t> ids = string_ids_in(rec.bytes, table);
  ASSERT_GE(ids.size(), 2u);
  uint32_t last = static_cast<uint32_t>(ids.back());
  size_t unnamed = events_named(rec.read, last);
  ASSERT_GT(unnamed, 0u);
  std::string bytes = rec.bytes;
  test::set_record_count(bytes, table, table.header.record_count - 1);
  std::string bad_path = dir.sub("short.tpraw");
  write_bytes(bad_path, bytes);
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.name(last), "");
  EXPECT_EQ(part.events.size(), rec.read.events.size());
  EXPECT_EQ(part.string_chunks_with_unread_bytes, 1u);
  EXPECT_EQ(part.events_with_undefined_ids, unnamed);
  ASSERT_EQ(part.issues.size(), 2u);
  EXPECT_EQ(part.issues[0].offset, table.offset);
  EXPECT_NE(part.issues[0].message.find("bytes after the " + std::to_string(ids.size() - 1) + " strings"),
            std::string::npos)
      << part.issues[0].message;
  EXPECT_NE(part.issues[1].message.find(std::to_string(unnamed) + " event(s) name string ids"),
            std::string::npos)
      << part.issues[1].message;

  // The streamed read (the analysis's) reports the same.
  std::string error;
  raw::EventSink sink = [](const raw::RawEvent*, size_t) {};
  std::optional<raw::RawFile> streamed = raw::read_raw_file(bad_path, &error, &sink);
  ASSERT_TRUE(streamed) << error;
  EXPECT_EQ(streamed->events_with_undefined_ids, unnamed);
  EXPECT_EQ(streamed->string_chunks_with_unread_bytes, 1u);
}

// The analysis decodes each file on a thread of its own: its sink gets what
// a plain read gives, in the same order, and the same report of damage.
TEST(RawReader, DecodingAheadGivesTheSameEventsInTheSameOrder) {
  TempDir dir;
  std::string path = record_run(dir, 3, 30000);
  std::string bytes = bytes_of(path);
  std::vector<test::RawChunk> events = chunks_of_type(bytes, raw::ChunkType::kEvents);
  ASSERT_GT(events.size(), 2 * 4u);  // more chunks than wait between the threads
  bytes[events[2].offset + raw::kChunkHeaderSize + 17] ^= 0x5a;
  std::string bad_path = dir.sub("bad.tpraw");
  write_bytes(bad_path, bytes);
  for (const std::string& p : {path, bad_path}) {
    raw::RawFile plain = must_read(p);
    std::vector<raw::RawEvent> got;
    size_t calls = 0;
    raw::EventSink sink = [&](const raw::RawEvent* e, size_t n) {
      got.insert(got.end(), e, e + n);
      ++calls;
    };
    std::string error;
    std::optional<raw::RawFile> ahead = raw::read_raw_file_decoding_ahead(p, &error, sink);
    ASSERT_TRUE(ahead) << error;
    EXPECT_TRUE(ahead->events.empty());  // streamed, not kept
    EXPECT_GE(calls, events.size() - 1);
    ASSERT_EQ(got.size(), plain.events.size()) << p;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(same_event(got[i], plain.events[i]) && got[i].t0_ns == plain.events[i].t0_ns &&
                  got[i].t1_ns == plain.events[i].t1_ns)
          << p << ": event " << i;
    }
    ASSERT_EQ(ahead->issues.size(), plain.issues.size()) << p;
    for (size_t i = 0; i < plain.issues.size(); ++i) {
      EXPECT_EQ(ahead->issues[i].offset, plain.issues[i].offset);
      EXPECT_EQ(ahead->issues[i].message, plain.issues[i].message);
    }
    EXPECT_EQ(ahead->chunks_missing, plain.chunks_missing);
    EXPECT_EQ(ahead->closed_cleanly, plain.closed_cleanly);
    EXPECT_EQ(ahead->strings, plain.strings);
  }
  // A file that cannot be read fails the same way.
  std::string error;
  raw::EventSink none = [](const raw::RawEvent*, size_t) {};
  EXPECT_FALSE(raw::read_raw_file_decoding_ahead(dir.sub("absent.tpraw"), &error, none));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

// A sink that throws stops the decoding: the exception comes back, nothing hangs.
TEST(RawReader, ASinkThatThrowsStopsTheDecodingAhead) {
  TempDir dir;
  std::string path = record_run(dir, 2, 30000);
  size_t calls = 0;
  raw::EventSink sink = [&](const raw::RawEvent*, size_t) {
    if (++calls == 2) throw std::runtime_error("the consumer gave up");
  };
  std::string error;
  try {
    raw::read_raw_file_decoding_ahead(path, &error, sink);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the consumer gave up");
  }
  EXPECT_EQ(calls, 2u);
}

// Version 1: no sequence number in the payloads.
std::string to_version_1(const std::string& v2) {
  std::string out = v2.substr(0, raw::kFileHeaderSize);
  uint32_t version = 1;
  std::memcpy(&out[8], &version, 4);
  uint32_t crc = raw::crc32c(0, out.data(), offsetof(raw::FileHeader, crc));
  std::memcpy(&out[offsetof(raw::FileHeader, crc)], &crc, 4);
  for (const test::RawChunk& c : test::raw_chunks(v2)) {
    raw::ChunkHeader h = c.header;
    h.payload_size -= raw::kChunkSequenceSize;
    size_t at = out.size();
    out.append(reinterpret_cast<const char*>(&h), sizeof(h));
    out += v2.substr(c.offset + raw::kChunkHeaderSize + raw::kChunkSequenceSize, h.payload_size);
    test::reseal_chunk(out, at);
  }
  return out;
}

TEST(RawReader, Version1FilesAreStillRead) {
  TempDir dir;
  std::string path = record_run(dir, 2, 3000);
  raw::RawFile whole = must_read(path);
  std::string v1_path = dir.sub("v1.tpraw");
  write_bytes(v1_path, to_version_1(bytes_of(path)));
  raw::RawFile v1 = must_read(v1_path);
  EXPECT_EQ(v1.header.version, 1u);
  EXPECT_TRUE(v1.issues.empty());
  EXPECT_TRUE(v1.closed_cleanly);
  EXPECT_EQ(test::count_by_name(v1), test::count_by_name(whole));
}

// ---------------------------------------------------------------------------
// Counts, lengths and ids from the file size nothing before they are checked.

std::string run_dir_of(const std::string& raw_path) {
  return raw_path.substr(0, raw_path.size() - std::string("/raw/host.tpraw").size());
}

uint64_t records_in_headers(const std::string& path) {
  uint64_t n = 0;
  for (const auto& [tid, records] : raw::event_records_by_thread(path)) n += records;
  return n;
}

bool model_builds(const std::string& run_dir, analysis::TraceModel* model) {
  std::string error;
  bool ok = analysis::build_model(run_dir, model, &error);
  EXPECT_TRUE(ok) << error;
  return ok;
}

TEST(RawReader, RecordCountIsCheckedBeforeAnythingIsReserved) {
  TempDir dir;
  RecordedFile rec = record_file(dir, 1, 3000);
  const std::string& path = rec.path;
  const std::string& full = rec.bytes;
  const raw::RawFile& whole = rec.read;
  const std::vector<test::RawChunk>& events = rec.events;
  ASSERT_FALSE(events.empty());
  const test::RawChunk& e = events[0];
  ASSERT_EQ(records_in_headers(path), whole.events.size());

  // One flipped bit: record_count + 2^30. The checksum fails: the chunk is
  // skipped, and its count reserves nothing.
  std::string bytes = full;
  bytes[e.offset + offsetof(raw::ChunkHeader, record_count) + 3] ^= 0x40;
  write_bytes(path, bytes);
  EXPECT_EQ(records_in_headers(path), whole.events.size() - e.header.record_count);
  raw::RawFile part = must_read(path);
  EXPECT_EQ(part.events.size(), whole.events.size() - e.header.record_count);
  analysis::TraceModel model;
  ASSERT_TRUE(model_builds(run_dir_of(path), &model));
  EXPECT_EQ(model.event_count, part.events.size());

  // The same count under a valid checksum: capped by the chunk's bytes,
  // and the chunk is malformed.
  test::reseal_chunk(bytes, e.offset);
  write_bytes(path, bytes);
  EXPECT_LE(records_in_headers(path), bytes.size() / 3);
  part = must_read(path);
  EXPECT_EQ(part.events.size(), whole.events.size() - e.header.record_count);
  ASSERT_EQ(part.issues.size(), 1u);
  EXPECT_NE(part.issues[0].message.find("event count"), std::string::npos) << part.issues[0].message;
  analysis::TraceModel model2;
  ASSERT_TRUE(model_builds(run_dir_of(path), &model2));
}

// A valid STRINGS chunk holding `id` -> "x", numbered `sequence`.
std::string strings_chunk(uint64_t id, uint32_t sequence) {
  std::string payload(reinterpret_cast<const char*>(&sequence), 4);
  uint8_t tmp[2 * raw::kMaxVarintBytes];
  uint8_t* p = raw::put_varint(tmp, id);
  p = raw::put_varint(p, 1);
  payload.append(reinterpret_cast<const char*>(tmp), static_cast<size_t>(p - tmp));
  payload += "x";
  raw::ChunkHeader h{};
  h.magic = raw::kChunkMagic;
  h.type = static_cast<uint16_t>(raw::ChunkType::kStrings);
  h.payload_size = static_cast<uint32_t>(payload.size());
  h.record_count = 1;
  std::string chunk = std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + payload;
  test::reseal_chunk(chunk, 0);
  return chunk;
}

TEST(RawReader, StringIdsBeyondWhatTheBytesHoldAreRefused) {
  TempDir dir;
  std::string path = record_run(dir, 1, 500);
  std::string full = bytes_of(path);
  raw::RawFile whole = must_read(path);
  uint32_t next = static_cast<uint32_t>(test::raw_chunks(full).size());
  write_bytes(path, full + strings_chunk(uint64_t{1} << 30, next));
  raw::RawFile part = must_read(path);
  EXPECT_EQ(part.strings.size(), whole.strings.size());
  ASSERT_EQ(part.issues.size(), 1u);
  EXPECT_NE(part.issues[0].message.find("malformed string table"), std::string::npos);
  EXPECT_EQ(part.name(1u << 30), "");
  analysis::TraceModel model;
  ASSERT_TRUE(model_builds(run_dir_of(path), &model));
  EXPECT_EQ(model.event_count, whole.events.size());

  // An id the bytes can justify is kept, past a gap.
  uint32_t id = static_cast<uint32_t>(whole.strings.size()) + 10;
  write_bytes(path, full + strings_chunk(id, next));
  part = must_read(path);
  EXPECT_TRUE(part.issues.empty());
  EXPECT_EQ(part.name(id), "x");
}

// ---------------------------------------------------------------------------
// Resynchronisation after damage is linear in the file size.

// `size` bytes of false chunk headers every `step` bytes, each claiming a
// payload of `claim` bytes (0: up to the end of the region).
std::string false_headers(size_t size, size_t step, uint32_t claim) {
  std::string out(size, '\0');
  for (size_t off = 0; off + step <= size; off += step) {
    raw::ChunkHeader h{};
    h.magic = raw::kChunkMagic;
    h.type = static_cast<uint16_t>(raw::ChunkType::kEvents);
    h.payload_size = claim != 0 ? claim : static_cast<uint32_t>(size - off - raw::kChunkHeaderSize);
    h.record_count = 1;
    std::memcpy(&out[off], &h, sizeof(h));
  }
  return out;
}

TEST(RawReader, FalseChunkHeadersCostLinearTime) {
  TempDir dir;
  std::string path = record_run(dir, 1, 2000);
  std::string full = bytes_of(path);
  raw::RawFile whole = must_read(path);
  std::string header = full.substr(0, raw::kFileHeaderSize);
  std::string chunks = full.substr(raw::kFileHeaderSize);
  std::string bad_path = dir.sub("false.tpraw");

  // A few thousand false headers with short claims: every real chunk after
  // them is found.
  write_bytes(bad_path, header + false_headers(64 << 10, 32, 1000) + chunks);
  raw::RawFile part = must_read(bad_path);
  EXPECT_EQ(part.events.size(), whole.events.size());
  EXPECT_EQ(part.chunks_missing, 0u);
  ASSERT_FALSE(part.issues.empty());
  EXPECT_EQ(part.issues[0].offset, raw::kFileHeaderSize);

  // 4 MiB of them, each claiming up to the end: before the budget, ~60 s
  // (quadratic); now the checksums computed stay within 2 x size + 64 MiB
  // per pass, and the reader says where it stopped.
  std::string crafted = header + false_headers(4 << 20, 32, 0) + chunks;
  write_bytes(bad_path, crafted);
  part = must_read(bad_path);
  EXPECT_LE(part.resync_checksum_bytes, 2 * crafted.size() + (64u << 20));
  ASSERT_FALSE(part.issues.empty());
  EXPECT_NE(part.issues.back().message.find("resynchronisation stopped"), std::string::npos)
      << part.issues.back().message;
  EXPECT_LE(records_in_headers(bad_path), crafted.size() / 3);
}

}  // namespace
}  // namespace trainprof
