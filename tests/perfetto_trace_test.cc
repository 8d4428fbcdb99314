// Copyright trainprof authors. trace_view.pftrace (export/perfetto_trace.h)
// read back with a minimal protobuf walker: every slice begins and ends,
// in timeline order per thread, a range that crosses its parent's end is
// ended there, windows do not change the packets' meaning, and compressed
// batches inflate to the same packets. (python/tests/test_perfetto.py
// decodes a real run with Perfetto's own protos.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "analysis/trace_model.h"
#include "core/safe_file.h"
#include "export/perfetto_trace.h"
#include "test_util.h"

namespace trainprof::exporter {
namespace {

using analysis::Slice;
using analysis::TraceModel;

// A protobuf message's fields: (number, varint or the bytes of a
// length-delimited field); fixed64 fields as varints of their value.
struct Field {
  uint32_t number;
  uint64_t value = 0;
  std::string bytes;
};

uint64_t varint(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; *at < s.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(s[(*at)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  return v;
}

std::vector<Field> fields(const std::string& s) {
  std::vector<Field> out;
  for (size_t at = 0; at < s.size();) {
    uint64_t tag = varint(s, &at);
    Field f{static_cast<uint32_t>(tag >> 3), 0, {}};
    switch (tag & 7) {
      case 0: f.value = varint(s, &at); break;
      case 1:
        for (int i = 0; i < 8; ++i)
          f.value |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
        at += 8;
        break;
      case 2: {
        size_t n = varint(s, &at);
        f.bytes = s.substr(at, n);
        at += n;
        break;
      }
      default: ADD_FAILURE() << "wire type " << (tag & 7); return out;
    }
    out.push_back(f);
  }
  return out;
}

const Field* find(const std::vector<Field>& fs, uint32_t number) {
  for (const Field& f : fs)
    if (f.number == number) return &f;
  return nullptr;
}

// The trace's packets, compressed batches inflated.
std::vector<std::string> packets(const std::string& trace, int* batches) {
  std::vector<std::string> out;
  for (const Field& p : fields(trace)) {
    EXPECT_EQ(p.number, 1u);  // Trace.packet
    std::vector<Field> packet = fields(p.bytes);
    if (const Field* c = find(packet, 50)) {
      ++*batches;
      std::string inflated(64 << 20, '\0');
      uLongf size = inflated.size();
      EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(inflated.data()), &size,
                           reinterpret_cast<const Bytef*>(c->bytes.data()), c->bytes.size()),
                Z_OK);
      inflated.resize(size);
      for (const Field& inner : fields(inflated)) out.push_back(inner.bytes);
    } else {
      out.push_back(p.bytes);
    }
  }
  return out;
}

struct ReadSlice {
  uint64_t sequence, start, end;
  std::string name;
  size_t depth;
  auto tie() const { return std::tie(sequence, start, end, name, depth); }
  bool operator<(const ReadSlice& o) const { return tie() < o.tie(); }
  bool operator==(const ReadSlice& o) const { return tie() == o.tie(); }
};

// Slices per sequence, timestamps summed as deltas on each thread sequence.
std::vector<ReadSlice> read_slices(const std::vector<std::string>& ps) {
  std::map<uint64_t, uint64_t> clock;
  std::map<std::pair<uint64_t, uint64_t>, std::string> names;
  std::map<uint64_t, std::vector<ReadSlice>> open;
  std::vector<ReadSlice> out;
  for (const std::string& p : ps) {
    std::vector<Field> f = fields(p);
    uint64_t seq = find(f, 10) != nullptr ? find(f, 10)->value : 0;
    if (const Field* interned = find(f, 12)) {
      for (const Field& n : fields(interned->bytes)) {
        std::vector<Field> en = fields(n.bytes);
        names[{seq, find(en, 1)->value}] = find(en, 2)->bytes;
      }
    }
    const Field* te = find(f, 11);
    if (te == nullptr || seq == 1) continue;
    clock[seq] += find(f, 8) != nullptr ? find(f, 8)->value : 0;
    std::vector<Field> e = fields(te->bytes);
    uint64_t type = find(e, 9)->value;
    if (type == 1) {
      open[seq].push_back({seq, clock[seq], 0, names.at({seq, find(e, 10)->value}), open[seq].size()});
    } else {
      EXPECT_EQ(type, 2u);
      EXPECT_FALSE(open[seq].empty()) << "an end without a begin";
      if (open[seq].empty()) continue;
      ReadSlice s = open[seq].back();
      open[seq].pop_back();
      s.end = clock[seq];
      out.push_back(s);
    }
  }
  for (const auto& [seq, stack] : open) EXPECT_TRUE(stack.empty()) << "sequence " << seq << " left open";
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Thread 7: step [0, 1000) with op a [100, 400) holding b [150, 200), and
// a range c [900, 1300) that crosses the step's end; thread 8: d [50, 60).
TraceModel model() {
  TraceModel m;
  m.strings = {"", "ProfilerStep#1", "a", "b", "c", "d"};
  m.pid = 42;
  uint32_t step = m.key_of({.tid = 7, .name = 1, .is_step = true});
  uint32_t a = m.key_of({.tid = 7, .name = 2, .is_op = true});
  uint32_t b = m.key_of({.tid = 7, .name = 3, .is_op = true});
  uint32_t c = m.key_of({.tid = 7, .name = 4});
  uint32_t d = m.key_of({.tid = 8, .name = 5});
  for (Slice s : {analysis::make_slice(1000, 1000, step), analysis::make_slice(1100, 300, a),
                  analysis::make_slice(1150, 50, b), analysis::make_slice(1900, 400, c),
                  analysis::make_slice(1050, 10, d)}) {
    m.add_slice(s);
  }
  for (analysis::ThreadSlices& t : m.threads) {
    std::sort(t.slices.begin(), t.slices.end(), [](const Slice& x, const Slice& y) {
      return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.dur32 > y.dur32;
    });
  }
  m.session_start_ns = 1000;
  return m;
}

std::vector<ReadSlice> write_and_read(const TraceModel& m, bool compress, PerfettoTraceResult* result,
                                      int* batches) {
  test::TempDir dir;
  detail::UniqueFd fd(detail::open_directory_at(AT_FDCWD, dir.path()));
  PerfettoTraceWriter writer(m, OutputPath{fd.get(), dir.path(), "trace_view.pftrace"}, 1000, compress);
  writer.add_window(m, UINT64_MAX);
  *result = writer.finish(m);
  EXPECT_EQ(result->error, "");
  return read_slices(packets(read_file(dir.sub("trace_view.pftrace")), batches));
}

TEST(PerfettoTrace, SlicesNestPerThreadAndACrossingRangeEndsWithItsParent) {
  PerfettoTraceResult result;
  int batches = 0;
  std::vector<ReadSlice> slices = write_and_read(model(), false, &result, &batches);
  EXPECT_EQ(batches, 0);
  EXPECT_EQ(result.slices, 5u);
  EXPECT_EQ(result.clamped_slices, 1u);
  ASSERT_EQ(slices.size(), 5u);
  // Times in ns from the earliest event (1000); sequence 2 is thread 7's.
  std::vector<ReadSlice> expected = {{2, 0, 1000, "ProfilerStep#1", 0},
                                     {2, 100, 400, "a", 1},
                                     {2, 150, 200, "b", 2},
                                     {2, 900, 1000, "c", 1},  // clamped to the step's end
                                     {3, 50, 60, "d", 0}};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(slices, expected);
}

TEST(PerfettoTrace, CompressedBatchesHoldTheSamePackets) {
  PerfettoTraceResult plain, compressed;
  int plain_batches = 0, batches = 0;
  std::vector<ReadSlice> a = write_and_read(model(), false, &plain, &plain_batches);
  std::vector<ReadSlice> b = write_and_read(model(), true, &compressed, &batches);
  EXPECT_EQ(batches, 1);
  EXPECT_EQ(a, b);
}

TEST(PerfettoTrace, WindowsLeaveTheSlicesAsOneWindowWrites) {
  // The loader's windows: thread 7's step is carried into the second window
  // as context (first_own), and must not begin twice.
  TraceModel whole = model();
  PerfettoTraceResult one;
  int batches = 0;
  std::vector<ReadSlice> expected = write_and_read(whole, false, &one, &batches);

  TraceModel m = model();
  test::TempDir dir;
  detail::UniqueFd fd(detail::open_directory_at(AT_FDCWD, dir.path()));
  PerfettoTraceWriter writer(m, OutputPath{fd.get(), dir.path(), "t.pftrace"}, 1000, false);
  std::vector<analysis::ThreadSlices> all = m.threads;
  for (analysis::ThreadSlices& t : m.threads) {  // window 1: slices starting before 1500
    std::erase_if(t.slices, [](const Slice& s) { return s.start_ns >= 1500; });
  }
  writer.add_window(m, 1500);
  m.threads = all;
  for (analysis::ThreadSlices& t : m.threads) {  // window 2: the step carried, then the rest
    std::vector<Slice> carried, own;
    for (const Slice& s : t.slices) {
      if (s.start_ns >= 1500)
        own.push_back(s);
      else if (m.end(s) > 1500)
        carried.push_back(s);
    }
    t.first_own = carried.size();
    t.slices = carried;
    t.slices.insert(t.slices.end(), own.begin(), own.end());
  }
  writer.add_window(m, UINT64_MAX);
  PerfettoTraceResult result = writer.finish(m);
  EXPECT_EQ(result.slices, 5u);
  EXPECT_EQ(read_slices(packets(read_file(dir.sub("t.pftrace")), &batches)), expected);
}

}  // namespace
}  // namespace trainprof::exporter
