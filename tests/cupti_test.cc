// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The GPU collector without a GPU: CUPTI's own activity records (CUDA's real
// headers) walked by the real libcupti and recorded, the clock mapping, and a
// session asking for GPU activity on a machine that has none.
#include <cupti_activity.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "collectors/cupti/activity_records.h"
#include "collectors/cupti/cupti_collector.h"
#include "collectors/cupti/cupti_library.h"
#include "collectors/cupti/gpu_clock.h"
#include "collectors/cupti/graph_nodes.h"
#include "core/clock.h"
#include "core/collector.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "exporter/csv_reader.h"
#include "perfetto_reader.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using cupti::GpuClock;
using cupti::SyncPoint;
using test::TempDir;

// A drifting GPU clock is followed segment by segment, and extended past
// the last point with the last segment's slope.
TEST(GpuClock, FollowsDriftBetweenPointsAndExtendsTheLastSegment) {
  GpuClock clock(2.0);
  EXPECT_EQ(clock.to_ticks(123), 0u);  // no point: nothing to map with
  clock.add({1'000, 10'000});
  EXPECT_EQ(clock.to_ticks(1'500), 11'000u);  // one point: the nominal 2 ticks a ns
  clock.add({2'000, 12'000});                 // 2.0 ticks a ns
  clock.add({3'000, 14'100});                 // 2.1: the GPU clock runs slow here
  EXPECT_EQ(clock.to_ticks(1'500), 11'000u);
  EXPECT_EQ(clock.to_ticks(2'500), 13'050u);
  EXPECT_EQ(clock.to_ticks(4'000), 16'200u);  // past the end: 2.1
  EXPECT_EQ(clock.to_ticks(500), 9'000u);     // before the start: the first segment
  EXPECT_EQ(clock.to_ticks(0), 8'000u);
  // Points that do not go forward on both clocks are ignored.
  clock.add({2'500, 20'000});
  clock.add({4'000, 14'000});
  EXPECT_EQ(clock.points(), 3u);
  EXPECT_EQ(clock.to_ticks(2'500), 13'050u);
}

TEST(GpuClock, KeepsTheRecentPointsWhenFull) {
  GpuClock clock(1.0);
  for (uint64_t i = 1; i <= GpuClock::kMaxPoints + 10; ++i) clock.add({i * 100, i * 1000});
  EXPECT_LE(clock.points(), GpuClock::kMaxPoints);
  // Exact on every kept point's line: the mapping is 10 ticks a ns throughout.
  for (uint64_t i = 1; i <= GpuClock::kMaxPoints + 10; i += 97) EXPECT_EQ(clock.to_ticks(i * 100), i * 1000);
}

// The names of copies and API calls as the trace shows them.
TEST(ActivityNames, CopiesSyncsAndVersionSuffixes) {
  EXPECT_STREQ(cupti::copy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD), "HtoD");
  EXPECT_STREQ(cupti::copy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP), "PtoP");
  EXPECT_STREQ(cupti::copy_kind_name(200), "Unknown");
  EXPECT_STREQ(cupti::memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_PINNED), "Pinned");
  EXPECT_STREQ(cupti::memory_kind_name(99), "Unknown");
  EXPECT_STREQ(cupti::sync_type_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE),
               "Stream Synchronize");
  EXPECT_EQ(cupti::without_version_suffix("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(cupti::without_version_suffix("cuMemcpy_v2"), "cuMemcpy");
  EXPECT_EQ(cupti::without_version_suffix("cudaMalloc"), "cudaMalloc");
  EXPECT_EQ(cupti::without_version_suffix("my_value_"), "my_value_");
}

// A buffer laid out as CUPTI lays out its own: records of their structure's
// size, each at an 8-byte boundary.
class ActivityBuffer {
 public:
  template <typename Record>
  Record& add(CUpti_ActivityKind kind) {
    size_t at =
        (size_ + ACTIVITY_RECORD_ALIGNMENT - 1) / ACTIVITY_RECORD_ALIGNMENT * ACTIVITY_RECORD_ALIGNMENT;
    size_ = at + sizeof(Record);
    EXPECT_LE(size_, sizeof(bytes_));
    auto* r = reinterpret_cast<Record*>(bytes_ + at);
    std::memset(static_cast<void*>(r), 0, sizeof(Record));
    r->kind = kind;
    return *r;
  }
  uint8_t* data() { return bytes_; }
  size_t size() const { return size_; }

 private:
  alignas(ACTIVITY_RECORD_ALIGNMENT) uint8_t bytes_[16384] = {};
  size_t size_ = 0;
};

// The tests that walk records with the real libcupti: skipped, with the
// reason, where it cannot be loaded.
class WithCupti : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    lib = cupti::load_cupti(&why);
    if (lib == nullptr) GTEST_SKIP() << why;
  }
  const cupti::CuptiLibrary* lib = nullptr;
};
using CuptiRecords = WithCupti;
using CuptiAnalysis = WithCupti;

const raw::RawEvent* find_kind(const raw::RawFile& f, raw::EventKind kind) {
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == kind) return &e;
  }
  return nullptr;
}

// A record of what ran on a stream from `start` to `end` (CUPTI's clock).
template <typename Record>
Record& add_on_stream(ActivityBuffer& buffer, CUpti_ActivityKind kind, uint32_t correlation, uint32_t stream,
                      uint64_t start, uint64_t end) {
  Record& r = buffer.add<Record>(kind);
  r.correlationId = correlation;
  r.streamId = stream;
  r.start = start;
  r.end = end;
  return r;
}

// A set of `bytes` of device memory.
void add_memset(ActivityBuffer& buffer, uint32_t correlation, uint32_t device, uint32_t stream,
                uint64_t bytes, uint64_t start, uint64_t end) {
  auto& set = add_on_stream<CUpti_ActivityMemset4>(buffer, CUPTI_ACTIVITY_KIND_MEMSET, correlation, stream,
                                                   start, end);
  set.bytes = bytes;
  set.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  set.deviceId = device;
}

// A stream synchronization.
void add_stream_sync(ActivityBuffer& buffer, uint32_t correlation, uint32_t context, uint32_t stream,
                     uint64_t start, uint64_t end) {
  auto& sync = add_on_stream<CUpti_ActivitySynchronization2>(buffer, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                                             correlation, stream, start, end);
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.contextId = context;
}

// Every kind trainprof keeps, through the real cuptiActivityGetNextRecord,
// the recorder, the flusher and the raw reader: names, geometry, bytes,
// correlation, device, context, stream, thread, and times on the host clock.
TEST_F(CuptiRecords, RealRecordsWalkedByLibcuptiReachTheRawFile) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);

  // The GPU clock runs 1e-4 fast against the host's and starts at 5 s.
  const double ticks_per_ns = core::ticks_per_ns();
  GpuClock clock(ticks_per_ns);
  const uint64_t host0 = detail::now_ticks();
  const uint64_t gpu0 = 5'000'000'000;
  clock.add({gpu0, host0});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t host1 = detail::now_ticks();
  const uint64_t elapsed_ns = static_cast<uint64_t>(static_cast<double>(host1 - host0) / ticks_per_ns);
  clock.add({gpu0 + elapsed_ns + elapsed_ns / 10'000, host1});

  ActivityBuffer buffer;
  auto& api = buffer.add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  api.start = gpu0 + 1'000'000;
  api.end = gpu0 + 1'004'000;
  pthread_t self = pthread_self();  // CUPTI names a thread by its pthread_t's first 4 bytes
  std::memcpy(&api.threadId, &self, sizeof(api.threadId));
  api.correlationId = 77;
  auto& stranger =
      buffer.add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_DRIVER);  // from a thread that never recorded
  stranger.cbid = 1;
  stranger.start = gpu0 + 1'500'000;
  stranger.end = gpu0 + 1'600'000;
  stranger.threadId = 0x5eed;
  stranger.correlationId = 90;
  auto& kernel = buffer.add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  kernel.name = "_Z10add_kernelPfS_i";
  kernel.start = gpu0 + 2'000'000;
  kernel.end = gpu0 + 2'500'000;
  kernel.deviceId = 1;
  kernel.contextId = 3;
  kernel.streamId = 7;
  kernel.gridX = 128, kernel.gridY = 2, kernel.gridZ = 1;
  kernel.blockX = 256, kernel.blockY = 1, kernel.blockZ = 1;
  kernel.registersPerThread = 32;
  kernel.staticSharedMemory = 1024;
  kernel.dynamicSharedMemory = 4096;
  kernel.correlationId = 77;
  auto& copy = buffer.add<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  copy.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  copy.bytes = 1 << 20;
  copy.start = gpu0 + 3'000'000;
  copy.end = gpu0 + 3'100'000;
  copy.deviceId = 1;
  copy.streamId = 7;
  copy.correlationId = 78;
  add_memset(buffer, 79, 1, 0, 4096, gpu0 + 4'000'000, gpu0 + 4'010'000);
  add_stream_sync(buffer, 80, 3, 7, gpu0 + 5'000'000, gpu0 + 6'000'000);
  buffer.add<CUpti_ActivityName>(CUPTI_ACTIVITY_KIND_NAME);  // a kind trainprof does not keep

  { TRAINPROF_RANGE("launch"); }  // this thread records, as a thread launching kernels does (its operators)
  cupti::ActivityTranslator translator(&clock, lib->get_callback_name);
  cupti::BufferStats stats =
      cupti::record_buffer(buffer.data(), buffer.size(), lib->get_next_record, translator);
  EXPECT_EQ(stats.records, 7u);
  EXPECT_EQ(stats.recorded, 6u);
  EXPECT_FALSE(stats.malformed);
  prof.stop();

  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  ASSERT_TRUE(f.issues.empty());
  auto text = [&f](uint32_t id) { return id < f.strings.size() ? f.strings[id] : std::string(); };

  const raw::RawEvent* k = find_kind(f, raw::EventKind::kGpuKernel);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(text(k->name_id), "add_kernel(float*, float*, int)");
  EXPECT_EQ(text(k->gpu_detail),
            "128,2,1\x1f"
            "256,1,1\x1f"
            "32\x1f"
            "1024\x1f"
            "4096");
  EXPECT_EQ(k->a, 77u);  // correlation
  EXPECT_EQ(k->b, 2u);   // device 1, + 1
  EXPECT_EQ(k->gpu_context, 3u);
  EXPECT_EQ(k->gpu_stream, 7u);
  // 500 us on the GPU clock, which runs 1e-4 fast: 499.95 us on the host's.
  EXPECT_NEAR(static_cast<double>(k->t1_ns - k->t0_ns), 499'950.0, 50.0);

  const raw::RawEvent* a = find_kind(f, raw::EventKind::kGpuApi);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(text(a->name_id), "cudaLaunchKernel");
  EXPECT_EQ(a->a, 77u);
  EXPECT_EQ(a->b, 0u);  // no device
  EXPECT_EQ(a->gpu_subkind, static_cast<uint32_t>(raw::GpuApiKind::kRuntime));
  EXPECT_EQ(a->gpu_thread, static_cast<uint32_t>(gettid()));  // this thread recorded: its OS id
  // The launch 1 ms after the first sync point, the kernel 1 ms later.
  EXPECT_NEAR(static_cast<double>(k->t0_ns - a->t0_ns), 999'900.0, 100.0);

  size_t driver_calls = 0;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind != raw::EventKind::kGpuApi || e.a != 90) continue;
    ++driver_calls;
    EXPECT_EQ(e.gpu_subkind, static_cast<uint32_t>(raw::GpuApiKind::kDriver));
    EXPECT_EQ(e.gpu_thread, 0u);  // unknown, not a wrong thread
    EXPECT_FALSE(text(e.name_id).empty());
  }
  EXPECT_EQ(driver_calls, 1u);

  const raw::RawEvent* c = find_kind(f, raw::EventKind::kGpuMemcpy);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(text(c->name_id), "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(c->gpu_bytes, 1u << 20);
  EXPECT_EQ(c->gpu_subkind, static_cast<uint32_t>(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD));
  EXPECT_EQ(c->a, 78u);

  const raw::RawEvent* s = find_kind(f, raw::EventKind::kGpuMemset);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(text(s->name_id), "Memset (Device)");
  EXPECT_EQ(s->gpu_bytes, 4096u);

  const raw::RawEvent* y = find_kind(f, raw::EventKind::kGpuSync);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(text(y->name_id), "Stream Synchronize");
  EXPECT_EQ(y->gpu_stream, 7u);
  EXPECT_NEAR(static_cast<double>(y->t1_ns - y->t0_ns), 999'900.0, 100.0);
}

// A buffer whose valid size ends inside a record: the records before it are
// kept and nothing is read past the size CUPTI gave.
TEST_F(CuptiRecords, CutBufferKeepsWhatPrecedesTheCut) {
  GpuClock clock(core::ticks_per_ns());
  clock.add({1'000, detail::now_ticks()});
  ActivityBuffer buffer;
  for (int i = 0; i < 3; ++i) {
    auto& api = buffer.add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
    api.start = 2'000 + i;
    api.end = 3'000 + i;
  }
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  cupti::ActivityTranslator translator(&clock, nullptr);
  cupti::BufferStats stats =
      cupti::record_buffer(buffer.data(), buffer.size() - 8, lib->get_next_record, translator);
  prof.stop();
  EXPECT_EQ(stats.recorded, 2u);
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  size_t calls = 0;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == raw::EventKind::kGpuApi) {
      ++calls;
      EXPECT_EQ(f.strings[e.name_id], "cuda runtime call #0");  // no name function given
    }
  }
  EXPECT_EQ(calls, 2u);
}

// CUPTI's results are named from our table (never by calling into a CUPTI
// that failed to start).
TEST(CuptiLibrary, NamesResultsWithoutCallingCupti) {
  EXPECT_EQ(cupti::CuptiLibrary::error_text(CUPTI_ERROR_UNKNOWN), "CUPTI_ERROR_UNKNOWN");
  EXPECT_EQ(cupti::CuptiLibrary::error_text(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES),
            "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");
  EXPECT_EQ(cupti::CuptiLibrary::error_text(static_cast<CUptiResult>(12345)), "CUPTI error 12345");
}

// Asking for GPU activity where there is no GPU: the session records the
// host as always, and the reason GPU activity is missing is kept.
TEST(CuptiCollector, SessionWithoutAGpuRecordsTheHostAndSaysWhy) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.activities = {Activity::CPU, Activity::GPU};
  Profiler prof(o);
  { TRAINPROF_RANGE("host work"); }
  prof.stop();
  cupti::CuptiStats stats = cupti::last_cupti_stats();
  if (stats.active) GTEST_SKIP() << "this machine has a GPU: scripts/gpu_check.sh covers it";
  EXPECT_FALSE(stats.why_not.empty());
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  bool range = false;
  for (const raw::RawEvent& e : f.events)
    range |= e.kind == raw::EventKind::kRange && f.strings[e.name_id] == "host work";
  EXPECT_TRUE(range);
  // profiler_info.json keeps the reason, and the analysis repeats it.
  nlohmann::json info =
      nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/profiler_info.json"));
  const nlohmann::json& gpu = info.at("collectors").at("cupti");
  EXPECT_EQ(gpu.at("recorded"), false);
  EXPECT_EQ(gpu.at("why_not"), stats.why_not);
  EXPECT_EQ(gpu.at("records_dropped"), 0);
  AnalyseReport report = analyse(prof.last_run().run_dir);
  ASSERT_EQ(report.runs.size(), 1u);
  const std::vector<std::string>& warnings = report.runs[0].warnings;
  EXPECT_NE(std::find(warnings.begin(), warnings.end(),
                      "GPU activity was asked for but not recorded: " + stats.why_not),
            warnings.end());
  // Again: the reason is kept, the session still works.
  Profiler again(o);
  again.stop();
  EXPECT_EQ(cupti::last_cupti_stats().why_not, stats.why_not);
}

// A runtime or driver call (`kind`) from this thread.
CUpti_ActivityAPI& add_call(ActivityBuffer& buffer, CUpti_ActivityKind kind, uint32_t cbid,
                            uint32_t correlation, uint64_t start, uint64_t duration = 5'000) {
  auto& a = buffer.add<CUpti_ActivityAPI>(kind);
  a.cbid = cbid;
  a.start = start;
  a.end = start + duration;
  a.correlationId = correlation;
  const pthread_t self = pthread_self();
  std::memcpy(&a.threadId, &self, sizeof(a.threadId));  // CUPTI's name for this thread
  return a;
}
void add_launch(ActivityBuffer& buffer, uint32_t correlation, uint64_t start) {
  add_call(buffer, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, correlation,
           start);
}

// A kernel of grid (4, 3, 2), blocks of (128, 1, 1), 40 registers a thread
// and 512 bytes of dynamic shared memory.
void add_kernel(ActivityBuffer& buffer, const char* name, uint32_t correlation, uint32_t stream,
                uint64_t start, uint64_t end) {
  auto& k = add_on_stream<CUpti_ActivityKernel10>(buffer, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, correlation,
                                                  stream, start, end);
  k.name = name;
  k.gridX = 4, k.gridY = 3, k.gridZ = 2;
  k.blockX = 128, k.blockY = 1, k.blockZ = 1;
  k.registersPerThread = 40;
  k.dynamicSharedMemory = 512;
}

// CUPTI's clock when a run records a buffer's activities.
constexpr uint64_t kGpu0 = 1'000'000'000;

// CUPTI's clock at kGpu0 is host tick t0, taken at construction; host times
// t0 + ms are reached by spinning (a range recorded then ends at that time or
// later: tests leave room).
struct GpuClockFromNow {
  double ticks_per_ns = core::ticks_per_ns();
  GpuClock clock{ticks_per_ns};
  uint64_t t0 = detail::now_ticks();
  GpuClockFromNow() { clock.add({kGpu0, t0}); }
  uint64_t at_ms(uint64_t ms) const {
    return t0 + static_cast<uint64_t>(static_cast<double>(ms) * 1e6 * ticks_per_ns);
  }
  void spin_until_ms(uint64_t ms) const {
    for (uint64_t until = at_ms(ms); detail::now_ticks() < until;) {
    }
  }
};

// A run that records `buffer`'s activities (CUPTI's clock at kGpu0 is the
// time they are recorded) on this thread, which recorded a range before as a
// thread launching kernels does, then a step that ends after them all;
// analysed with `options`. Its PROFILER_OUTPUT/, "" after a failure.
std::string record_and_analyse(const std::string& dir, const cupti::CuptiLibrary& lib, ActivityBuffer& buffer,
                               size_t records, const AnalyseOptions& options = {}) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  { TRAINPROF_RANGE("launch"); }
  GpuClock clock(core::ticks_per_ns());
  clock.add({kGpu0, detail::now_ticks()});
  cupti::ActivityTranslator translator(&clock, lib.get_callback_name);
  EXPECT_EQ(cupti::record_buffer(buffer.data(), buffer.size(), lib.get_next_record, translator).recorded,
            records);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the step ends after every activity
  prof.step();
  prof.stop();
  AnalyseReport report = analyse(prof.last_run().run_dir, options);
  EXPECT_TRUE(report.error.empty()) << report.error;
  if (report.runs.size() != 1 || !report.runs[0].ok) {
    ADD_FAILURE() << (report.runs.empty() ? "no run analysed" : report.runs[0].error);
    return "";
  }
  return prof.last_run().run_dir + "/PROFILER_OUTPUT/";
}

// kernel_details.csv from recorded kernels: one row each in start order,
// with the launch that started it (by correlation id), the step of that
// launch, the wait since the previous task on the same stream, and the
// launch geometry.
TEST_F(CuptiAnalysis, KernelDetailsJoinLaunchesStepsAndStreams) {
  const uint64_t gpu0 = kGpu0;
  ActivityBuffer buffer;
  // Launch 1 (correlation 1) and its kernel on stream 7; a copy on stream 7;
  // launch 2 (correlation 2) and its kernel on stream 7, 100 us after the copy
  // ended; a kernel of an unrecorded launch on stream 9.
  add_launch(buffer, 1, gpu0 + 1'000'000);
  add_kernel(buffer, "_Z5firstv", 1, 7, gpu0 + 1'010'000, gpu0 + 1'110'000);
  auto& copy = buffer.add<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  copy.streamId = 7;
  copy.bytes = 64;
  copy.start = gpu0 + 1'200'000;
  copy.end = gpu0 + 1'300'000;
  copy.correlationId = 3;
  add_kernel(buffer, "_Z5thirdv", 0, 9, gpu0 + 1'350'000, gpu0 + 1'360'000);
  add_launch(buffer, 2, gpu0 + 1'380'000);
  add_kernel(buffer, "_Z6secondv", 2, 7, gpu0 + 1'400'000, gpu0 + 1'450'000);
  TempDir dir;
  const std::string out = record_and_analyse(dir.path(), *lib, buffer, 6);
  ASSERT_FALSE(out.empty());
  bool well_formed = false;
  exporter::CsvRows rows = exporter::read_csv_file(out + "kernel_details.csv", &well_formed);
  ASSERT_TRUE(well_formed);
  ASSERT_EQ(rows.size(), 4u);  // header + 3 kernels
  const std::vector<std::string>& h = rows[0];
  auto col = [&h](const std::string& name) {
    size_t i = static_cast<size_t>(std::find(h.begin(), h.end(), name) - h.begin());
    EXPECT_LT(i, h.size()) << name;
    return i;
  };
  exporter::CsvRows steps = exporter::read_csv_file(out + "step_trace_time.csv", &well_formed);
  ASSERT_GE(steps.size(), 2u);
  const std::string step = steps[1][0];
  EXPECT_EQ(rows[1][col("Name")], "first()");
  EXPECT_EQ(rows[2][col("Name")], "third()");
  EXPECT_EQ(rows[3][col("Name")], "second()");
  EXPECT_EQ(rows[1][col("Step Id")], step);
  EXPECT_EQ(rows[1][col("Stream Id")], "7");
  EXPECT_EQ(rows[1][col("Launch API")], "cudaLaunchKernel");
  EXPECT_EQ(rows[2][col("Launch API")], "");  // its launch was not recorded
  EXPECT_EQ(rows[1][col("Correlation Id")], "1");
  EXPECT_EQ(rows[1][col("Block Num")], "24");
  EXPECT_EQ(rows[1][col("Grid")], "4,3,2");
  EXPECT_EQ(rows[1][col("Block")], "128,1,1");
  EXPECT_EQ(rows[1][col("Registers Per Thread")], "40");
  EXPECT_EQ(rows[1][col("Dynamic Shared Memory(B)")], "512");
  EXPECT_EQ(rows[1][col("Wait Time(us)")], "0.000");  // the stream's first task
  // After the copy on stream 7 (ended at 1.300 ms): 100 us; stream 9 had nothing before.
  EXPECT_NEAR(std::stod(rows[3][col("Wait Time(us)")]), 100.0, 0.5);
  EXPECT_EQ(rows[2][col("Wait Time(us)")], "0.000");
  EXPECT_NEAR(std::stod(rows[1][col("Duration(us)")]), 100.0, 0.5);
  EXPECT_NEAR(std::stod(rows[1][col("Start Time(us)")]) - std::stod(rows[1][col("Launch Time(us)")]), 10.0,
              0.5);
  EXPECT_EQ(rows[1][col("Launch Thread")], std::to_string(gettid()));

  // The timeline, in Kineto's layout: kernels and copies in a process per
  // GPU on a track per stream, launches on the launching thread, an ac2g
  // flow from each launch to its kernel.
  nlohmann::json trace = nlohmann::json::parse(test::read_text(out + "trace_view.json"));
  std::map<std::string, nlohmann::json> by_name;
  std::vector<nlohmann::json> starts, finishes;
  bool gpu_process = false, stream_track = false;
  const int64_t host_pid = getpid();
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    std::string ph = e.at("ph");
    if (ph == "X") by_name[e.at("name")] = e;
    if (ph == "s" && e.at("cat") == "ac2g") starts.push_back(e);
    if (ph == "f" && e.at("cat") == "ac2g") finishes.push_back(e);
    if (ph == "M" && e.at("name") == "process_name" && e.at("pid") == 0)
      gpu_process = e["args"]["name"] == "GPU 0";
    if (ph == "M" && e.at("name") == "thread_name" && e.at("pid") == 0 && e.at("tid") == 7) {
      stream_track = e["args"]["name"] == "stream 7";
    }
  }
  EXPECT_TRUE(gpu_process);
  EXPECT_TRUE(stream_track);
  const nlohmann::json& first = by_name["first()"];
  EXPECT_EQ(first["cat"], "kernel");
  EXPECT_EQ(first["pid"], 0);
  EXPECT_EQ(first["tid"], 7);
  EXPECT_EQ(first["args"]["stream"], 7);
  EXPECT_EQ(first["args"]["correlation"], 1);
  EXPECT_EQ(first["args"]["grid"], nlohmann::json::array({4, 3, 2}));
  EXPECT_EQ(first["args"]["block"], nlohmann::json::array({128, 1, 1}));
  EXPECT_EQ(first["args"]["shared memory"], 512);
  const nlohmann::json& copy_event = by_name["Memcpy DtoH (Unknown -> Unknown)"];
  EXPECT_EQ(copy_event["cat"], "gpu_memcpy");
  EXPECT_EQ(copy_event["args"]["bytes"], 64);
  const nlohmann::json& call = by_name["cudaLaunchKernel"];
  EXPECT_EQ(call["cat"], "cuda_runtime");
  EXPECT_EQ(call["pid"], host_pid);
  EXPECT_EQ(call["tid"], gettid());
  // The two recorded launches; the third kernel's launch was not recorded.
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(finishes.size(), 2u);
  EXPECT_EQ(starts[0]["id"], 1);
  EXPECT_EQ(starts[0]["pid"], host_pid);
  EXPECT_EQ(starts[0]["tid"], gettid());
  EXPECT_EQ(finishes[0]["id"], 1);
  EXPECT_EQ(finishes[0]["pid"], 0);
  EXPECT_EQ(finishes[0]["tid"], 7);
  EXPECT_EQ(finishes[0]["ts"], first["ts"]);
  EXPECT_EQ(finishes[0]["bp"], "e");
  EXPECT_EQ(finishes[1]["id"], 2);
}

// Each kernel belongs to the innermost range around its launch on the
// launching thread: kernel_details.csv names it (Type), operator_details.csv
// sums what each range launched (Device Self / Total), op_statistic.csv
// lists the kernels as GPU rows, and the step's breakdown is the device's
// time (NCCL kernels are communication).
TEST_F(CuptiAnalysis, KernelsBelongToTheRangesThatLaunchedThem) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  // Host ranges "outer" over [0, 60 ms] and "aten::mm" over [5, 20 ms]
  // after the GPU clock's origin.
  GpuClockFromNow time;
  GpuClock& clock = time.clock;
  const uint64_t gpu0 = kGpu0, t0 = time.t0;
  time.spin_until_ms(20);
  detail::record_range("aten::mm", time.at_ms(5));
  time.spin_until_ms(60);
  detail::record_range("outer", t0);
  constexpr uint64_t kMs = 1'000'000;
  ActivityBuffer buffer;
  add_launch(buffer, 1, gpu0 + 10 * kMs);  // inside aten::mm
  add_kernel(buffer, "_Z2k1v", 1, 7, gpu0 + 12 * kMs, gpu0 + 13 * kMs);
  add_launch(buffer, 2, gpu0 + 40 * kMs);  // inside outer only
  add_kernel(buffer, "_Z2k2v", 2, 7, gpu0 + 45 * kMs, gpu0 + 47 * kMs);
  add_kernel(buffer, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 9, gpu0 + 46 * kMs, gpu0 + 48 * kMs);
  add_launch(buffer, 3, gpu0 + 160 * kMs);  // outside every range
  add_kernel(buffer, "_Z2k3v", 3, 7, gpu0 + 165 * kMs, gpu0 + 169 * kMs);
  cupti::ActivityTranslator translator(&clock, lib->get_callback_name);
  EXPECT_EQ(cupti::record_buffer(buffer.data(), buffer.size(), lib->get_next_record, translator).recorded,
            7u);
  time.spin_until_ms(200);  // the step ends after every kernel
  prof.step();
  prof.stop();

  AnalyseReport report = analyse(prof.last_run().run_dir);
  ASSERT_TRUE(report.error.empty()) << report.error;
  ASSERT_TRUE(report.runs.at(0).ok) << report.runs[0].error;
  std::string out = prof.last_run().run_dir + "/PROFILER_OUTPUT/";
  auto table = [&out](const std::string& file) {
    bool well_formed = false;
    exporter::CsvRows rows = exporter::read_csv_file(out + file, &well_formed);
    EXPECT_TRUE(well_formed) << file;
    return rows;
  };
  auto column = [](const exporter::CsvRows& rows, const std::string& name) {
    size_t i =
        static_cast<size_t>(std::find(rows.at(0).begin(), rows.at(0).end(), name) - rows.at(0).begin());
    EXPECT_LT(i, rows.at(0).size()) << name;
    return i;
  };

  exporter::CsvRows kernels = table("kernel_details.csv");
  ASSERT_EQ(kernels.size(), 5u);  // header + 4 kernels, in start order
  const size_t name = column(kernels, "Name"), type = column(kernels, "Type");
  EXPECT_EQ(kernels[1][name], "k1()");
  EXPECT_EQ(kernels[1][type], "aten::mm");
  EXPECT_EQ(kernels[2][name], "k2()");
  EXPECT_EQ(kernels[2][type], "outer");
  EXPECT_EQ(kernels[3][type], "");  // the NCCL kernel's launch was not recorded
  EXPECT_EQ(kernels[4][name], "k3()");
  EXPECT_EQ(kernels[4][type], "");
  EXPECT_EQ(kernels[1][column(kernels, "Accelerator Core")], "GPU");

  exporter::CsvRows details = table("operator_details.csv");
  std::map<std::string, std::vector<std::string>> detail_by_name;
  for (size_t i = 1; i < details.size(); ++i) detail_by_name[details[i][0]] = details[i];
  ASSERT_TRUE(detail_by_name.count("aten::mm") && detail_by_name.count("outer"));
  const size_t self = column(details, "Device Self Duration(us)"),
               total = column(details, "Device Total Duration(us)");
  EXPECT_NEAR(std::stod(detail_by_name["aten::mm"][self]), 1000.0, 1.0);
  EXPECT_NEAR(std::stod(detail_by_name["aten::mm"][total]), 1000.0, 1.0);
  EXPECT_NEAR(std::stod(detail_by_name["outer"][self]), 2000.0, 1.0);
  EXPECT_NEAR(std::stod(detail_by_name["outer"][total]), 3000.0, 1.0);  // with aten::mm's kernel

  // torch.profiler's per-key and per-call device times say the same: the
  // launcher's own kernels (self), and with the calls inside it.
  std::map<std::string, KeyAverage> averages;
  for (const KeyAverage& row : key_averages(prof.last_run().run_dir).rows) averages[row.name] = row;
  EXPECT_NEAR(averages["aten::mm"].device_self_ns, 1e6, 1e3);
  EXPECT_NEAR(averages["outer"].device_self_ns, 2e6, 1e3);
  EXPECT_NEAR(averages["outer"].device_total_ns, 3e6, 1e3);
  EXPECT_NEAR(averages["ProfilerStep*"].device_total_ns, 3e6, 1e3);  // k3 ran outside every range
  CallEvents calls = call_events(prof.last_run().run_dir);
  ASSERT_TRUE(calls.error.empty()) << calls.error;
  int launchers = 0;
  for (const CallEvent& c : calls.calls) {
    const std::string& call = calls.keys[c.key].name;
    if (c.kernel_count == 0) continue;
    ++launchers;
    ASSERT_EQ(c.kernel_count, 1u) << call;
    const CallKernel& k = calls.kernels[c.first_kernel];
    EXPECT_EQ(calls.kernel_names[k.name], call == "aten::mm" ? "k1()" : "k2()") << call;
    EXPECT_EQ(k.end_ns - k.start_ns, c.self_device_ns) << call;
  }
  EXPECT_EQ(launchers, 2);

  exporter::CsvRows ops = table("op_statistic.csv");
  std::map<std::string, std::vector<std::string>> op_by_name;
  for (size_t i = 1; i < ops.size(); ++i) op_by_name[ops[i][0]] = ops[i];
  ASSERT_TRUE(op_by_name.count("k3()") && op_by_name.count("outer"));
  EXPECT_EQ(op_by_name["k3()"][column(ops, "Core Type")], "GPU");
  EXPECT_EQ(op_by_name["outer"][column(ops, "Core Type")], "HOST");
  EXPECT_NEAR(std::stod(op_by_name["k3()"][column(ops, "Total Time(us)")]), 4000.0, 1.0);
  // 4 of the GPU's 9 ms: the ratio is within the core type.
  EXPECT_NEAR(std::stod(op_by_name["k3()"][column(ops, "Ratio(%)")]), 100.0 * 4 / 9, 0.1);

  exporter::CsvRows steps = table("step_trace_time.csv");
  ASSERT_GE(steps.size(), 2u);
  auto ms = [&steps, &column](const std::string& name) {
    return std::stod(steps[1][column(steps, name)]) / 1000.0;
  };
  EXPECT_NEAR(ms("Computing"), 7.0, 0.01);      // k1 + k2 + k3, not the host's 60 ms of ranges
  EXPECT_NEAR(ms("Communication"), 2.0, 0.01);  // the NCCL kernel
  EXPECT_NEAR(ms("Overlapped"), 1.0, 0.01);     // with k2
  EXPECT_GE(ms("Preparing"), 12.0 - 0.01);      // until k1
  const double step_ms = ms("Computing") + ms("Communication(Not Overlapped)") + ms("Free");
  EXPECT_GE(step_ms, 200.0 - 0.01);  // Free is the device's idle time

  // python/tests/test_gpu_trace.py runs HTA on this timeline.
  if (const char* keep = std::getenv("TRAINPROF_TEST_GPU_TRACE_DIR"); keep != nullptr) {
    std::filesystem::copy_file(out + "trace_view.json", std::string(keep) + "/rank0.pt.trace.json",
                               std::filesystem::copy_options::overwrite_existing);
  }
  // --steps 1 (the step after the kernels): no GPU activity in any output.
  AnalyseOptions later;
  later.step_list = {1};
  AnalyseReport second = analyse(prof.last_run().run_dir, later);
  ASSERT_TRUE(second.runs.at(0).ok) << second.runs[0].error;
  EXPECT_FALSE(std::filesystem::exists(out + "kernel_details.csv"));
  EXPECT_EQ(test::read_text(out + "op_statistic.csv").find(",GPU,"), std::string::npos);
  EXPECT_EQ(test::read_text(out + "trace_view.json").find("\"kernel\""), std::string::npos);
  analyse(prof.last_run().run_dir);  // back to every step, for the summary

  // The summary lists the GPU's work, longest first.
  std::string summary = summarize_run(prof.last_run().run_dir);
  size_t gpu_top = summary.find("top on the GPU");
  ASSERT_NE(gpu_top, std::string::npos) << summary;
  EXPECT_LT(summary.find("k3()", gpu_top), summary.find("k2()", gpu_top)) << summary;
  EXPECT_NE(summary.find("the GPU's busy and idle time"), std::string::npos) << summary;
}

std::string sql(const std::string& db, const std::string& query);

// CUDA graphs, as CUPTI reports them: a graph's nodes are made while its
// stream is captured (a node per kernel launch, on the launching thread),
// cloned into the executable graph when it is instantiated, and PyTorch then
// destroys the captured graph; every replay (cudaGraphLaunch) runs the
// executable nodes, each kernel record naming its graph and node.

// cuptiGetGraphNodeId for the tests: a node's id is its handle's value.
CUptiResult node_id_of(CUgraphNode node, uint64_t* id) {
  *id = reinterpret_cast<uintptr_t>(node);
  return CUPTI_SUCCESS;
}
CUgraphNode node_handle(uint64_t id) {
  return reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(id));
}

// The operator open on this thread, for the tests: set by the test.
const char* g_open = nullptr;
const char* open_for_test() noexcept {
  return g_open;
}

// One resource callback about `node` (and its `original`, when cloned).
void graph_callback(cupti::GraphNodeTable& table, CUpti_CallbackId cbid, uint64_t node,
                    uint64_t original = 0) {
  CUpti_GraphData graph{};
  graph.node = node_handle(node);
  graph.originalNode = original != 0 ? node_handle(original) : nullptr;
  CUpti_ResourceData data{};
  data.resourceDescriptor = &graph;
  cupti::on_graph_resource(cbid, &data, node_id_of, open_for_test, detail::now_ticks(), table);
}

// A node made outside any operator is known, unnamed; a clone inherits its
// original's entry; destroying a node that was never cloned forgets it, and
// one that was cloned is kept (a record may name either); the table is bounded.
TEST(GraphNodes, MadeClonedAndDestroyedNodesKeepTheirMaker) {
  cupti::GraphNodeTable table;
  g_open = detail::intern("aten::mm");
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 1);
  g_open = nullptr;
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 2);
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 3);
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, 11, 1);
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, 12, 99);  // an original never seen
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, 1);
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, 3);
  graph_callback(table, CUPTI_CBID_RESOURCE_GRAPH_CREATED, 4);  // not about a node
  ASSERT_TRUE(table.find(1).has_value());
  EXPECT_STREQ(table.find(1)->operator_name, "aten::mm");
  ASSERT_TRUE(table.find(11).has_value());
  EXPECT_STREQ(table.find(11)->operator_name, "aten::mm");
  EXPECT_EQ(table.find(11)->ticks, table.find(1)->ticks);
  ASSERT_TRUE(table.find(2).has_value());
  EXPECT_EQ(table.find(2)->operator_name, nullptr);
  EXPECT_FALSE(table.find(3).has_value());
  EXPECT_FALSE(table.find(4).has_value());
  EXPECT_FALSE(table.find(12).has_value());
  cupti::on_graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, nullptr, node_id_of, open_for_test, 0,
                           table);
  EXPECT_EQ(table.size(), 3u);
  for (uint64_t n = 100;
       table.size() < cupti::GraphNodeTable::kMaxNodes + 5 && n < 2 * cupti::GraphNodeTable::kMaxNodes; ++n)
    table.made(n, {nullptr, 0});
  EXPECT_EQ(table.size(), cupti::GraphNodeTable::kMaxNodes);
}

// Two replays of a graph of two kernels and a set, captured under aten::mm
// and aten::relu (the set outside any operator): every kernel is a row of
// its own (kernel_details.csv, op_statistic.csv), launched by the replay's
// cudaGraphLaunch inside the "replay" range, and carries its graph, its node
// and the operator that captured it, in the CSV, both timelines and the
// database. Each node is described once in the raw file.
TEST_F(CuptiAnalysis, GraphKernelsAreListedOneByOneWithTheOperatorThatCapturedThem) {
  cupti::GraphNodeTable nodes;
  g_open = detail::intern("aten::mm");
  graph_callback(nodes, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 1);
  g_open = detail::intern("aten::relu");
  graph_callback(nodes, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 2);
  g_open = nullptr;
  graph_callback(nodes, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, 3);
  for (uint64_t n : {1, 2, 3}) graph_callback(nodes, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, 20 + n, n);
  for (uint64_t n : {1, 2, 3}) graph_callback(nodes, CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, n);

  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  GpuClockFromNow time;
  constexpr uint64_t kMs = 1'000'000;
  time.spin_until_ms(30);
  detail::record_range("replay", time.at_ms(1));
  ActivityBuffer buffer;
  for (uint32_t replay = 0; replay < 2; ++replay) {
    const uint32_t correlation = 5 + replay;
    const uint64_t at = kGpu0 + (2 + 10 * replay) * kMs;
    add_call(buffer, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
             correlation, at);
    auto& mm = buffer.add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    mm.name = "_Z4gemmv";
    mm.correlationId = correlation, mm.streamId = 7, mm.start = at + kMs, mm.end = at + 2 * kMs;
    mm.graphId = 4, mm.graphNodeId = 21;
    auto& relu = buffer.add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    relu.name = "_Z4reluv";
    relu.correlationId = correlation, relu.streamId = 7, relu.start = at + 2 * kMs, relu.end = at + 3 * kMs;
    relu.graphId = 4, relu.graphNodeId = 22;
    auto& set = add_on_stream<CUpti_ActivityMemset4>(buffer, CUPTI_ACTIVITY_KIND_MEMSET, correlation, 7,
                                                     at + 3 * kMs, at + 4 * kMs);
    set.bytes = 256, set.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, set.graphId = 4,
    set.graphNodeId = 23;
  }
  cupti::ActivityTranslator translator(&time.clock, lib->get_callback_name, &nodes);
  EXPECT_EQ(cupti::record_buffer(buffer.data(), buffer.size(), lib->get_next_record, translator).recorded,
            8u);
  time.spin_until_ms(40);
  prof.step();
  prof.stop();
  const std::string run = prof.last_run().run_dir;

  raw::RawFile f = test::read_run(run);
  std::map<uint64_t, std::string> described;  // node -> maker
  int graph_activities = 0;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == raw::EventKind::kGpuGraphNode) {
      EXPECT_EQ(described.count(e.a), 0u) << "node " << e.a << " described twice";
      described[e.a] = f.name(e.name_id);
      EXPECT_EQ(e.b, 4u);
    }
    if (raw::is_gpu_event_kind(e.kind) && e.gpu_graph_node != 0) {
      ++graph_activities;
      EXPECT_EQ(e.gpu_graph, 4u);
    }
  }
  EXPECT_EQ(described, (std::map<uint64_t, std::string>{{21, "aten::mm"}, {22, "aten::relu"}, {23, ""}}));
  EXPECT_EQ(graph_activities, 6);

  AnalyseOptions with_db;
  with_db.export_db = true;
  AnalyseReport report = analyse(run, with_db);
  ASSERT_TRUE(report.error.empty()) << report.error;
  ASSERT_TRUE(report.runs.at(0).ok) << report.runs[0].error;
  const std::string out = run + "/PROFILER_OUTPUT/";
  bool well_formed = false;
  exporter::CsvRows kernels = exporter::read_csv_file(out + "kernel_details.csv", &well_formed);
  ASSERT_TRUE(well_formed);
  ASSERT_EQ(kernels.size(), 5u);  // header + both replays' two kernels
  auto col = [&kernels](const std::string& name) {
    size_t i =
        static_cast<size_t>(std::find(kernels[0].begin(), kernels[0].end(), name) - kernels[0].begin());
    EXPECT_LT(i, kernels[0].size()) << name;
    return i;
  };
  for (size_t r = 1; r < kernels.size(); ++r) {
    bool gemm = r % 2 == 1;
    EXPECT_EQ(kernels[r][col("Name")], gemm ? "gemm()" : "relu()");
    EXPECT_EQ(kernels[r][col("Launch API")], "cudaGraphLaunch");
    EXPECT_EQ(kernels[r][col("Type")], "replay");
    EXPECT_EQ(kernels[r][col("Graph Id")], "4");
    EXPECT_EQ(kernels[r][col("Graph Node Id")], gemm ? "21" : "22");
    EXPECT_EQ(kernels[r][col("Capture Operator")], gemm ? "aten::mm" : "aten::relu");
  }
  exporter::CsvRows ops = exporter::read_csv_file(out + "op_statistic.csv", &well_formed);
  std::map<std::string, std::string> count_by_name;
  for (size_t i = 1; i < ops.size(); ++i) count_by_name[ops[i][0]] = ops[i][2];
  EXPECT_EQ(ops[0][2], "Count");
  EXPECT_EQ(count_by_name["gemm()"], "2");
  EXPECT_EQ(count_by_name["relu()"], "2");
  EXPECT_EQ(count_by_name.count("cudaGraphLaunch"), 0u) << "no row per graph launch";

  nlohmann::json trace = nlohmann::json::parse(test::read_text(out + "trace_view.json"));
  int gemms = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("name", "") == "gemm()" && e.at("ph") == "X") {
      ++gemms;
      EXPECT_EQ(e["args"]["graph id"], 4);
      EXPECT_EQ(e["args"]["graph node id"], 21);
      EXPECT_EQ(e["args"]["capture operator"], "aten::mm");
    }
    if (e.value("cat", "") == "gpu_memset") {
      EXPECT_EQ(e["args"]["graph node id"], 23);
      EXPECT_FALSE(e["args"].contains("capture operator")) << "made outside any operator";
    }
  }
  EXPECT_EQ(gemms, 2);
  int batches = 0;
  test::GlobalEvents pf =
      test::read_global_events(test::packets(test::read_text(out + "trace_view.pftrace"), &batches));
  std::vector<const test::GlobalSlice*> relus = pf.named("relu()");
  ASSERT_EQ(relus.size(), 2u);
  for (const test::GlobalSlice* relu : relus) {
    EXPECT_EQ(relu->args.at("capture operator"), "aten::relu");
    EXPECT_EQ(relu->args.at("graph node id"), "22");
  }
  EXPECT_EQ(sql(out + "trainprof.db",
                "SELECT a.graph_node_id, s.value FROM gpu_activity a JOIN strings s ON s.id = "
                "a.capture_operator_id "
                "WHERE a.kind = 0 ORDER BY a.start_ns LIMIT 2"),
            "21,aten::mm\n22,aten::relu\n");
}

std::string sql(const std::string& db, const std::string& query) {
  return test::sqlite3_query(TRAINPROF_TEST_SQLITE3, db, query);
}

// The same activities in trace_view.pftrace and trainprof.db: a kernel
// launched by a runtime call with the driver call inside it, a copy and its
// call, a set whose launch was not recorded, a synchronization, and a driver
// call from a thread that never recorded.
TEST_F(CuptiAnalysis, PerfettoTraceAndDatabaseHoldTheGpuActivities) {
  ActivityBuffer buffer;  // CUPTI times from kGpu0, the time of recording
  add_launch(buffer, 1, kGpu0 + 1'000'000);
  add_call(buffer, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1, kGpu0 + 1'001'000,
           3'000);
  add_kernel(buffer, "_Z5firstv", 1, 7, kGpu0 + 1'010'000, kGpu0 + 1'110'000);
  add_call(buffer, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 2,
           kGpu0 + 1'200'000);
  auto& copy = buffer.add<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  copy.streamId = 7;
  copy.contextId = 1;
  copy.bytes = 64;
  copy.start = kGpu0 + 1'300'000;
  copy.end = kGpu0 + 1'400'000;
  copy.correlationId = 2;
  add_memset(buffer, 3, 0, 9, 4096, kGpu0 + 1'500'000, kGpu0 + 1'510'000);
  add_stream_sync(buffer, 4, 1, 7, kGpu0 + 1'600'000, kGpu0 + 1'700'000);
  // From a thread that never recorded.
  add_call(buffer, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 5, kGpu0 + 1'800'000)
      .threadId = 0x5eed;
  TempDir dir;
  AnalyseOptions options;
  options.export_db = true;
  const std::string out = record_and_analyse(dir.path(), *lib, buffer, 8, options);
  ASSERT_FALSE(out.empty());
  const std::string tid = std::to_string(gettid());

  // trace_view.pftrace: kernels, copies and sets on their GPU's stream
  // tracks, calls on the calling thread's CUDA API track, the rest on the
  // process's host track, flows from each launch to what it launched.
  int batches = 0;
  test::GlobalEvents g =
      test::read_global_events(test::packets(test::read_text(out + "trace_view.pftrace"), &batches));
  EXPECT_EQ(batches, 1);
  auto one = [&g](const std::string& name) {
    std::vector<const test::GlobalSlice*> found = g.named(name);
    EXPECT_EQ(found.size(), 1u) << name;
    return found.empty() ? test::GlobalSlice{} : *found[0];
  };
  const test::GlobalSlice kernel = one("first()");
  EXPECT_EQ(g.path(kernel.track), "GPU 0/stream 7");
  EXPECT_EQ(kernel.category, "kernel");
  EXPECT_NEAR(static_cast<double>(kernel.end - kernel.start), 100'000.0, 500.0);
  EXPECT_EQ(kernel.args.at("correlation"), "1");
  EXPECT_EQ(kernel.args.at("grid"), "4,3,2");
  EXPECT_EQ(kernel.args.at("block"), "128,1,1");
  EXPECT_EQ(kernel.args.at("registers per thread"), "40");
  EXPECT_EQ(kernel.args.at("shared memory"), "512");
  // Two driver calls: this thread's inside its runtime call, then the stranger's.
  std::vector<const test::GlobalSlice*> driver_calls = g.named("cuLaunchKernel");
  ASSERT_EQ(driver_calls.size(), 2u);
  const test::GlobalSlice launch = one("cudaLaunchKernel"), driver_call = *driver_calls[0];
  const test::TrackInfo& thread = g.tracks[g.tracks[launch.track].parent];
  EXPECT_EQ(std::to_string(thread.tid), tid);
  EXPECT_EQ(g.tracks[launch.track].name, "CUDA API");
  EXPECT_EQ(g.tracks[driver_call.track].name, "CUDA API #2");  // inside the runtime call
  EXPECT_EQ(launch.category, "cuda_runtime");
  EXPECT_EQ(driver_call.category, "cuda_driver");
  ASSERT_EQ(kernel.flows_in.size(), 1u);
  EXPECT_EQ(launch.flows_out, kernel.flows_in);  // the runtime call, not the driver's
  EXPECT_TRUE(driver_call.flows_out.empty());
  const test::GlobalSlice copy_slice = one("Memcpy DtoH (Unknown -> Unknown)"),
                          copy_call = one("cudaMemcpyAsync");
  EXPECT_EQ(g.path(copy_slice.track), "GPU 0/stream 7");
  EXPECT_EQ(copy_slice.args.at("bytes"), "64");
  EXPECT_EQ(copy_slice.args.at("context"), "1");
  ASSERT_EQ(copy_slice.flows_in.size(), 1u);
  EXPECT_EQ(copy_call.flows_out, copy_slice.flows_in);
  EXPECT_NE(copy_slice.flows_in, kernel.flows_in);
  const test::GlobalSlice set_slice = one("Memset (Device)");
  EXPECT_EQ(g.path(set_slice.track), "GPU 0/stream 9");
  EXPECT_TRUE(set_slice.flows_in.empty());  // its call was not recorded
  const test::GlobalSlice sync_slice = one("Stream Synchronize");
  const test::TrackInfo& host = g.tracks[sync_slice.track];
  EXPECT_EQ(host.name, "CUDA API and synchronization");
  EXPECT_EQ(g.tracks[host.parent].pid, static_cast<uint64_t>(getpid()));  // the process's
  EXPECT_EQ(sync_slice.category, "cuda_sync");
  EXPECT_EQ(driver_calls[1]->track, sync_slice.track);  // the stranger's: its thread is unknown

  // trainprof.db: one row each, the launch by id and by correlation.
  std::string db = out + "trainprof.db";
  EXPECT_EQ(sql(db, "PRAGMA foreign_key_check;"), "");  // launch_id, tid, step, name_id hold
  EXPECT_EQ(sql(db, "SELECT COUNT(*) FROM gpu_activity;"), "8\n");
  exporter::CsvRows steps = exporter::read_csv_file(out + "step_trace_time.csv", nullptr);
  ASSERT_GE(steps.size(), 2u);
  const std::string step = steps[1][0];
  const std::string columns =
      "SELECT n.value, k.name, a.device, a.stream, a.context, a.subkind, a.bytes, a.grid_x, a.grid_y, "
      "a.grid_z, "
      "a.block_x, a.block_y, a.block_z, a.registers, a.static_shared_bytes, a.dynamic_shared_bytes, a.tid, "
      "ln.value, a.step FROM gpu_activity a JOIN strings n ON n.id = a.name_id JOIN gpu_activity_kinds k ON "
      "k.id = a.kind LEFT JOIN gpu_activity l ON l.id = a.launch_id LEFT JOIN strings ln ON ln.id = "
      "l.name_id ";
  EXPECT_EQ(sql(db, columns + "WHERE a.kind = 0;"),
            "first(),kernel,0,7,0,0,,4,3,2,128,1,1,40,0,512," + tid + ",cudaLaunchKernel," + step + "\n");
  EXPECT_EQ(sql(db, columns + "WHERE a.kind = 1;"), "Memcpy DtoH (Unknown -> Unknown),gpu_memcpy,0,7,1," +
                                                        std::to_string(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH) +
                                                        ",64,,,,,,,,,," + tid + ",cudaMemcpyAsync," + step +
                                                        "\n");
  EXPECT_EQ(sql(db, columns + "WHERE a.kind = 2;"),
            "Memset (Device),gpu_memset,0,9,0,0,4096,,,,,,,,,,,," + step + "\n");
  EXPECT_EQ(sql(db, columns + "WHERE a.kind = 5;"),
            "Stream Synchronize,cuda_sync,,7,1," +
                std::to_string(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) + ",,,,,,,,,,,,," +
                step + "\n");
  // Calls: their own thread (none for the stranger), no device, stream or context.
  EXPECT_EQ(sql(db,
                "SELECT n.value, a.kind, a.correlation, a.device, a.stream, a.tid FROM gpu_activity a JOIN "
                "strings n ON n.id = a.name_id WHERE a.kind IN (3, 4) ORDER BY a.start_ns;"),
            "cudaLaunchKernel,3,1,,," + tid + "\ncuLaunchKernel,4,1,,," + tid + "\ncudaMemcpyAsync,3,2,,," +
                tid + "\ncuLaunchKernel,4,5,,,\n");
  // The documented join: each activity with its runtime call by correlation id.
  EXPECT_EQ(sql(db,
                "SELECT n.value, ln.value FROM gpu_activity a JOIN gpu_activity l ON l.correlation = "
                "a.correlation AND l.kind = 3 JOIN strings n ON n.id = a.name_id JOIN strings ln ON ln.id = "
                "l.name_id WHERE a.kind IN (0, 1, 2) ORDER BY a.start_ns;"),
            "first(),cudaLaunchKernel\nMemcpy DtoH (Unknown -> Unknown),cudaMemcpyAsync\n");
  // Times are the timeline's: the same duration in both.
  EXPECT_EQ(sql(db, "SELECT end_ns - start_ns FROM gpu_activity WHERE kind = 0;"),
            std::to_string(kernel.end - kernel.start) + "\n");
  EXPECT_EQ(sql(db, "SELECT COUNT(*) FROM threads WHERE tid = " + tid + ";"), "1\n");
}

// GPU memory from the driver (CUPTI's MEMORY2 records): device allocations
// and releases become memory reports of "CUDA:0 driver" with the total
// allocated so far; host memory (pinned) is not the GPU's and is left out.
TEST_F(CuptiAnalysis, DriverAllocationsAreGpuMemoryReports) {
  ActivityBuffer buffer;
  auto memory = [&buffer](CUpti_ActivityMemoryOperationType op, CUpti_ActivityMemoryKind kind,
                          uint64_t address, uint64_t bytes, uint64_t at) {
    auto& m = buffer.add<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
    m.memoryOperationType = op;
    m.memoryKind = kind;
    m.address = address;
    m.bytes = bytes;
    m.timestamp = at;
    m.deviceId = 0;
  };
  constexpr uint64_t kMiB = 1 << 20;
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x7000, kMiB,
         kGpu0 + 1'000'000);
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x9000, 8 * kMiB,
         kGpu0 + 1'500'000);
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x8000, 2 * kMiB,
         kGpu0 + 2'000'000);
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x7000, kMiB,
         kGpu0 + 3'000'000);
  TempDir dir;
  const std::string out = record_and_analyse(dir.path(), *lib, buffer, 3);
  ASSERT_FALSE(out.empty());
  bool well_formed = false;
  exporter::CsvRows rows = exporter::read_csv_file(out + "memory_record.csv", &well_formed);
  ASSERT_TRUE(well_formed);
  ASSERT_EQ(rows.size(), 4u);  // header + 3 reports
  std::vector<std::string> totals;
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], "CUDA driver");
    EXPECT_EQ(rows[i][5], "CUDA:0 driver");
    totals.push_back(rows[i][2]);
  }
  EXPECT_EQ(totals, (std::vector<std::string>{"1.000000", "3.000000", "2.000000"}));
  exporter::CsvRows blocks = exporter::read_csv_file(out + "operator_memory.csv", &well_formed);
  ASSERT_GE(blocks.size(), 2u);
  EXPECT_EQ(blocks[1][1], "1024.000");                // the first block, released
  EXPECT_NEAR(std::stod(blocks[1][5]), 2000.0, 1.0);  // Duration(us)
  EXPECT_NE(test::read_text(out + "trace_view.json").find("\"Memory (CUDA:0 driver)\""), std::string::npos);
}

// Records CUPTI dropped (its buffers were full) are a warning of the
// analysis, so a user reading the GPU tables knows they are incomplete.
TEST(CuptiInfo, DroppedRecordsAreAWarningOfTheAnalysis) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  { TRAINPROF_RANGE("work"); }
  prof.stop();
  const std::string info_path = prof.last_run().run_dir + "/profiler_info.json";
  nlohmann::json info = nlohmann::json::parse(test::read_text(info_path));
  // As the GPU collector writes it after a session whose buffers overflowed.
  info["collectors"]["cupti"] = {{"recorded", true},
                                 {"buffers", 3},
                                 {"records", 900},
                                 {"activities_recorded", 900},
                                 {"records_dropped", 42}};
  std::ofstream(info_path, std::ios::trunc) << info.dump();
  AnalyseReport report = analyse(prof.last_run().run_dir);
  ASSERT_EQ(report.runs.size(), 1u);
  ASSERT_TRUE(report.runs[0].ok) << report.runs[0].error;
  const std::vector<std::string>& w = report.runs[0].warnings;
  EXPECT_NE(
      std::find(w.begin(), w.end(),
                "CUPTI dropped 42 GPU activity records (its buffers were full): the GPU tables and tracks "
                "miss them"),
      w.end());
  // GPU activity was recorded: no "not recorded" warning.
  for (const std::string& text : w) EXPECT_EQ(text.find("not recorded"), std::string::npos) << text;
}

// A driver allocation belongs to the operator that made it: its report is
// moved to the thread of the cudaMalloc call running at that time, and the
// innermost operator there names it in operator_memory.csv. A release while
// no call of a known thread runs stays on CUPTI's thread: no operator.
TEST_F(CuptiAnalysis, DriverAllocationsBelongToTheOperatorThatMadeThem) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  // The operator aten::empty runs on this thread over [5, 20 ms] after the
  // GPU clock's origin.
  GpuClockFromNow time;
  GpuClock& clock = time.clock;
  const uint64_t gpu0 = kGpu0;
  time.spin_until_ms(20);
  core::record_event_fields(time.at_ms(5), detail::now_ticks(), detail::intern("aten::empty"),
                            static_cast<uint8_t>(raw::EventKind::kOperator), 0, 0, 0);
  constexpr uint64_t kMs = 1'000'000, kMiB = 1 << 20;
  ActivityBuffer buffer;
  add_call(buffer, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1, gpu0 + 10 * kMs,
           kMs);
  auto memory = [&buffer](CUpti_ActivityMemoryOperationType op, uint64_t at) {
    auto& m = buffer.add<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
    m.memoryOperationType = op;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.address = 0x7000;
    m.bytes = kMiB;
    m.timestamp = at;
  };
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, gpu0 + 10 * kMs + 500'000);  // inside cudaMalloc
  memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, gpu0 + 30 * kMs);
  // Recorded on a thread of its own, as CUPTI's buffer thread does.
  std::thread cupti_thread([&buffer, &clock, lib = lib] {
    cupti::ActivityTranslator translator(&clock, lib->get_callback_name);
    EXPECT_EQ(cupti::record_buffer(buffer.data(), buffer.size(), lib->get_next_record, translator).recorded,
              3u);
  });
  cupti_thread.join();
  time.spin_until_ms(40);
  prof.step();
  prof.stop();
  AnalyseReport report = analyse(prof.last_run().run_dir);
  ASSERT_TRUE(report.runs.at(0).ok) << report.runs[0].error;
  bool well_formed = false;
  exporter::CsvRows blocks =
      exporter::read_csv_file(prof.last_run().run_dir + "/PROFILER_OUTPUT/operator_memory.csv", &well_formed);
  ASSERT_TRUE(well_formed);
  ASSERT_EQ(blocks.size(), 2u);  // header + the block
  EXPECT_EQ(blocks[1][0], "aten::empty");
  EXPECT_EQ(blocks[1][1], "1024.000");
  EXPECT_EQ(blocks[1][14], "CUDA:0 driver");
}

// ---------------------------------------------------------------------------
// The advisor's GPU rules (docs/ADVICE.md) on records made by hand.

// Three steps of 20 ms after the GPU clock's origin on this thread; `plant`
// adds each step's GPU activity (given the step's start on CUPTI's clock and
// a correlation id to use). The run is advised.
AdviceReport record_and_advise(const std::string& dir, const cupti::CuptiLibrary& lib,
                               const std::function<void(ActivityBuffer&, uint64_t, uint32_t)>& plant) {
  constexpr uint64_t kMs = 1'000'000;
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  GpuClockFromNow time;
  ActivityBuffer buffer;
  for (uint32_t s = 0; s < 3; ++s) {
    plant(buffer, kGpu0 + s * 20 * kMs, s + 1);
    time.spin_until_ms(20 * (s + 1));
    if (s < 2) prof.step();  // the last step ends at stop()
  }
  cupti::ActivityTranslator translator(&time.clock, lib.get_callback_name);
  cupti::record_buffer(buffer.data(), buffer.size(), lib.get_next_record, translator);
  prof.stop();
  return advise(prof.last_run().run_dir);
}

std::vector<std::string> rules_of(const AdviceReport& a) {
  std::vector<std::string> out;
  for (const Advice& f : a.findings) out.push_back(f.rule);
  return out;
}

// A kernel launched at `from` that runs until `to` (ms into the step).
void busy(ActivityBuffer& buffer, uint64_t step, uint32_t correlation, double from, double to) {
  auto ns = [step](double ms) { return step + static_cast<uint64_t>(ms * 1e6); };
  add_launch(buffer, correlation, ns(from - 0.05));
  add_kernel(buffer, "_Z4stepv", correlation, 7, ns(from), ns(to));
}

TEST_F(CuptiAnalysis, AdvisorNamesAGpuIdleWhileTheHostPrepares) {
  TempDir dir;
  AdviceReport a = record_and_advise(dir.path(), *lib, [](ActivityBuffer& b, uint64_t step, uint32_t c) {
    busy(b, step, c, 1, 3);  // 2 ms of 20
  });
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  EXPECT_EQ(a.findings[0].rule, "device_idle") << a.text;
  EXPECT_GT(a.findings[0].saving_ms, 10) << a.text;
}

TEST_F(CuptiAnalysis, AdvisorNamesSynchronizationsInsideTheStep) {
  TempDir dir;
  AdviceReport a = record_and_advise(dir.path(), *lib, [](ActivityBuffer& b, uint64_t step, uint32_t c) {
    busy(b, step, c, 0.2, 19.8);
    add_call(b, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 100 + c,
             step + 300'000, 19'400'000);
  });
  ASSERT_TRUE(a.ok()) << a.error;
  ASSERT_FALSE(a.findings.empty()) << a.text;
  EXPECT_EQ(a.findings[0].rule, "sync_in_step") << a.text;
  EXPECT_NE(a.findings[0].evidence.find("cudaStreamSynchronize: 3 calls"), std::string::npos) << a.text;
}

TEST_F(CuptiAnalysis, AdvisorIsSilentOnABusyGpu) {
  TempDir dir;
  AdviceReport a = record_and_advise(
      dir.path(), *lib, [](ActivityBuffer& b, uint64_t step, uint32_t c) { busy(b, step, c, 0.2, 19.8); });
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_EQ(rules_of(a), std::vector<std::string>{}) << a.text;
}

}  // namespace
}  // namespace trainprof
