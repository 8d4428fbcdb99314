// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trace_view.pftrace (export/perfetto_trace.h) read back with a minimal
// protobuf walker: every slice begins and ends, in timeline order per thread, a
// range that crosses its parent's end is ended there, windows do not change the
// packets' meaning, and compressed batches inflate to the same packets.
// (python/tests/test_perfetto.py decodes a real run with Perfetto's own
// protos.)
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "analysis/trace_model.h"
#include "base/safe_file.h"
#include "exporter/perfetto_trace.h"
#include "perfetto_reader.h"
#include "raw/format.h"
#include "test_util.h"

namespace trainprof::exporter {
namespace {

using analysis::Slice;
using analysis::TraceModel;

using test::Field;
using test::fields;
using test::find;
using test::packets;

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
  base::UniqueFd fd(base::open_directory_at(AT_FDCWD, dir.path()));
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
  base::UniqueFd fd(base::open_directory_at(AT_FDCWD, dir.path()));
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

// GPU activities (CUPTI) on sequence 1: thread 7 launches two kernels with
// one call (a graph launch: cudaLaunchKernel, with the driver call inside it)
// onto stream 7 of GPU 0, where they overlap; a copy on GPU 1 whose launch
// was not recorded; a synchronization, and a call from a thread that never
// recorded, on the process's host track.
TraceModel gpu_model() {
  TraceModel m = model();
  m.thread_names[7] = "main";
  auto name = [&m](const char* text) {
    m.strings.push_back(text);
    return static_cast<uint32_t>(m.strings.size() - 1);
  };
  using raw::EventKind;
  const uint32_t runtime = static_cast<uint32_t>(raw::GpuApiKind::kRuntime);
  const uint32_t driver = static_cast<uint32_t>(raw::GpuApiKind::kDriver);
  const uint32_t geometry = name(
      "4,3,2\x1f"
      "128,1,1\x1f"
      "40\x1f"
      "16\x1f"
      "512");
  m.gpu = {
      {1100, 1110, EventKind::kGpuApi, name("cudaLaunchKernel"), 5, -1, 0, 0, runtime, 0, 0, 7},
      {1102, 1108, EventKind::kGpuApi, name("cuLaunchKernel"), 5, -1, 0, 0, driver, 0, 0, 7},
      {1200, 1300, EventKind::kGpuKernel, name("k1"), 5, 0, 3, 7, 0, 0, geometry, 0},
      {1250, 1400, EventKind::kGpuKernel, name("k2"), 5, 0, 3, 7, 0, 0, geometry, 0},
      {1300, 1400, EventKind::kGpuMemcpy, name("Memcpy HtoD"), 6, 1, 4, 3, 1, 1000, 0, 0},
      {1450, 1460, EventKind::kGpuApi, name("cudaStreamSynchronize"), 8, -1, 0, 0, runtime, 0, 0, 0},
      {1500, 1600, EventKind::kGpuSync, name("Stream Synchronize"), 8, -1, 3, 7, 3, 0, 0, 0},
  };
  return m;
}

TEST(PerfettoTrace, GpuActivitiesOnStreamAndThreadTracksWithArgsAndLaunchFlows) {
  TraceModel m = gpu_model();
  test::TempDir dir;
  base::UniqueFd fd(base::open_directory_at(AT_FDCWD, dir.path()));
  PerfettoTraceWriter writer(m, OutputPath{fd.get(), dir.path(), "t.pftrace"}, 1000, true);
  writer.add_window(m, UINT64_MAX);
  PerfettoTraceResult result = writer.finish(m);
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.slices, 5u);
  EXPECT_EQ(result.gpu_slices, 7u);
  int batches = 0;
  std::vector<std::string> ps = packets(read_file(dir.sub("t.pftrace")), &batches);
  EXPECT_EQ(read_slices(ps).size(), 5u);  // the threads' slices as before
  test::GlobalEvents g = test::read_global_events(ps);
  ASSERT_EQ(g.slices.size(), 7u);
  auto one = [&g](const std::string& name) {
    std::vector<const test::GlobalSlice*> found = g.named(name);
    EXPECT_EQ(found.size(), 1u) << name;
    return found.empty() ? test::GlobalSlice{} : *found[0];
  };
  // Kernels on their stream of their GPU, in ns from the earliest event;
  // the second overlaps the first: a second lane.
  test::GlobalSlice k1 = one("k1"), k2 = one("k2");
  EXPECT_EQ(g.path(k1.track), "GPU 0/stream 7");
  EXPECT_EQ(g.path(k2.track), "GPU 0/stream 7 #2");
  EXPECT_EQ(k1.start, 200u);
  EXPECT_EQ(k1.end, 300u);
  EXPECT_EQ(k1.category, "kernel");
  std::map<std::string, std::string> kernel_args = {{"correlation", "5"},
                                                    {"device", "0"},
                                                    {"stream", "7"},
                                                    {"context", "3"},
                                                    {"grid", "4,3,2"},
                                                    {"block", "128,1,1"},
                                                    {"registers per thread", "40"},
                                                    {"shared memory", "528"}};
  EXPECT_EQ(k1.args, kernel_args);
  const test::TrackInfo& gpu0 = g.tracks[g.tracks[k1.track].parent];
  EXPECT_EQ(gpu0.parent, 0u);          // a top-level track
  EXPECT_EQ(gpu0.child_ordering, 3u);  // explicit: streams by number
  EXPECT_EQ(g.tracks[k1.track].sibling_order_rank, 7u);
  // The copy: its own GPU and stream, bytes and bandwidth, no flow (no launch).
  test::GlobalSlice copy = one("Memcpy HtoD");
  EXPECT_EQ(g.path(copy.track), "GPU 1/stream 3");
  EXPECT_EQ(copy.category, "gpu_memcpy");
  EXPECT_EQ(copy.args["bytes"], "1000");
  EXPECT_EQ(copy.args["memory bandwidth (GB/s)"], "10.000000");
  EXPECT_TRUE(copy.flows_in.empty());
  // Calls on their thread's CUDA API track (the driver call inside the
  // runtime one on a second lane); the runtime call starts both flows.
  test::GlobalSlice launch = one("cudaLaunchKernel"), inner = one("cuLaunchKernel");
  EXPECT_EQ(g.path(launch.track), "rank 0/main/CUDA API");
  EXPECT_EQ(g.tracks[g.tracks[launch.track].parent].tid, 7u);
  EXPECT_EQ(g.path(inner.track), "rank 0/main/CUDA API #2");
  EXPECT_EQ(launch.category, "cuda_runtime");
  EXPECT_EQ(inner.category, "cuda_driver");
  EXPECT_EQ(launch.args, (std::map<std::string, std::string>{{"correlation", "5"}}));
  ASSERT_EQ(k1.flows_in.size(), 1u);
  ASSERT_EQ(k2.flows_in.size(), 1u);
  EXPECT_NE(k1.flows_in[0], k2.flows_in[0]);
  std::vector<uint64_t> into_kernels = {k1.flows_in[0], k2.flows_in[0]};
  std::sort(launch.flows_out.begin(), launch.flows_out.end());
  std::sort(into_kernels.begin(), into_kernels.end());
  EXPECT_EQ(launch.flows_out, into_kernels);
  EXPECT_TRUE(inner.flows_out.empty());
  // The synchronization, and the call of a thread that never recorded, on
  // the process's host track (one after the other: one lane).
  test::GlobalSlice sync = one("Stream Synchronize"), call = one("cudaStreamSynchronize");
  EXPECT_EQ(g.path(sync.track), "rank 0/CUDA API and synchronization");
  EXPECT_EQ(call.track, sync.track);
  EXPECT_EQ(sync.category, "cuda_sync");
  EXPECT_EQ(sync.start, 500u);
  EXPECT_EQ(sync.end, 600u);
  EXPECT_EQ(sync.args["stream"], "7");
}

}  // namespace
}  // namespace trainprof::exporter
