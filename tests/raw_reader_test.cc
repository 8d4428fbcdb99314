// Copyright trainprof authors. The raw reader against truncated, corrupt and
// foreign files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "raw/format.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;

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

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
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
  ASSERT_EQ(part.issues.size(), 1u);
  EXPECT_EQ(part.issues[0].offset, victim);
  EXPECT_FALSE(part.issues[0].truncated_tail);
  EXPECT_NE(part.issues[0].message.find("checksum"), std::string::npos);
  EXPECT_EQ(part.events.size(), whole.events.size() - victim_count);
  EXPECT_TRUE(part.closed_cleanly);

  // A smashed chunk header (length field) is skipped too.
  bytes = bytes_of(path);
  uint32_t huge = 0xfffffff0u;
  std::memcpy(&bytes[victim + 12], &huge, 4);
  write_bytes(bad_path, bytes);
  part = must_read(bad_path);
  ASSERT_EQ(part.issues.size(), 1u);
  EXPECT_EQ(part.issues[0].offset, victim);
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

  std::string real = bytes_of(record_run(dir, 1, 10));
  std::string future = real;
  uint32_t v = 99;
  std::memcpy(&future[8], &v, 4);
  write_bytes(p, future);
  std::string err = read_error(p);
  EXPECT_NE(err.find("version 99"), std::string::npos) << err;
  EXPECT_NE(err.find("reads version 1"), std::string::npos) << err;

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

}  // namespace
}  // namespace trainprof
