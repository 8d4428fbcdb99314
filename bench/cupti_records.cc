// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The GPU collector's host cost per CUPTI record, without a GPU: buffers of
// CUPTI's own record structs (a cudaLaunchKernel call and its kernel per
// launch, as a training step produces them) walked by the real libcupti.
// BM_CuptiWalk is the floor (the walk alone, cuptiActivityGetNextRecord);
// BM_CuptiRecord adds what trainprof does per record (clock conversion, names,
// the two-slot GPU event) while a session records. Counters: ns per record.
//
//   trainprof_cupti_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>
#include <pthread.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "collectors/cupti/activity_records.h"
#include "collectors/cupti/cupti_library.h"
#include "collectors/cupti/gpu_clock.h"
#include "core/clock.h"
#include "trainprof/trainprof.h"

namespace {

namespace cupti = trainprof::cupti;

constexpr size_t kLaunches = 4096;

// kLaunches (call, kernel) pairs in CUPTI's layout: records 8-aligned.
struct Buffer {
  std::vector<uint8_t> bytes;
  size_t size = 0;

  template <typename Record>
  Record& add(CUpti_ActivityKind kind) {
    size_t at =
        (size + ACTIVITY_RECORD_ALIGNMENT - 1) / ACTIVITY_RECORD_ALIGNMENT * ACTIVITY_RECORD_ALIGNMENT;
    size = at + sizeof(Record);
    auto* r = reinterpret_cast<Record*>(bytes.data() + at);
    std::memset(static_cast<void*>(r), 0, sizeof(Record));
    r->kind = kind;
    return *r;
  }
};

Buffer* launches() {
  static Buffer* b = [] {
    auto* buffer = new Buffer;
    buffer->bytes.resize(kLaunches * (sizeof(CUpti_ActivityAPI) + sizeof(CUpti_ActivityKernel10) + 16) + 64);
    const pthread_t self = pthread_self();
    static const char* kNames[] = {"_Z4gemmPfS_S_i", "_Z7softmaxPKfPfi", "_Z4reluPf", "_Z9layernormPfPKfi"};
    for (uint32_t i = 0; i < kLaunches; ++i) {
      uint64_t t = 1'000'000'000 + uint64_t{i} * 10'000;
      auto& call = buffer->add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
      call.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
      call.start = t;
      call.end = t + 3'000;
      call.correlationId = i + 1;
      std::memcpy(&call.threadId, &self, sizeof(call.threadId));
      auto& k = buffer->add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      k.name = kNames[i % 4];
      k.correlationId = i + 1;
      k.streamId = 7;
      k.start = t + 5'000;
      k.end = t + 9'000;
      k.gridX = 128, k.gridY = 1, k.gridZ = 1;
      k.blockX = 256, k.blockY = 1, k.blockZ = 1;
      k.registersPerThread = 32;
    }
    return buffer;
  }();
  return b;
}

const cupti::CuptiLibrary* library(benchmark::State& state) {
  std::string why;
  const cupti::CuptiLibrary* lib = cupti::load_cupti(&why);
  if (lib == nullptr) state.SkipWithError(why.c_str());
  return lib;
}

void BM_CuptiWalk(benchmark::State& state) {
  const cupti::CuptiLibrary* lib = library(state);
  if (lib == nullptr) return;
  Buffer* b = launches();
  uint64_t records = 0;
  for (auto _ : state) {
    CUpti_Activity* record = nullptr;
    while (lib->get_next_record(b->bytes.data(), b->size, &record) == CUPTI_SUCCESS) {
      CUpti_ActivityKind kind = record->kind;
      benchmark::DoNotOptimize(kind);
      ++records;
    }
  }
  state.counters["ns_per_record"] = benchmark::Counter(
      static_cast<double>(records), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CuptiWalk)->Unit(benchmark::kMicrosecond);

void BM_CuptiRecord(benchmark::State& state) {
  const cupti::CuptiLibrary* lib = library(state);
  if (lib == nullptr) return;
  Buffer* b = launches();
  std::string dir = (std::filesystem::temp_directory_path() / "trainprof_cupti_bench").string();
  trainprof::ProfilerOptions o;
  o.output_path = dir;
  o.buffer_mb = 256;  // the benchmark's records fit: nothing is dropped
  trainprof::Profiler prof(o);
  cupti::GpuClock clock(trainprof::core::ticks_per_ns());
  clock.add({1'000'000'000, trainprof::detail::now_ticks()});
  cupti::ActivityTranslator translator(&clock, lib->get_callback_name);
  uint64_t records = 0;
  for (auto _ : state)
    records += cupti::record_buffer(b->bytes.data(), b->size, lib->get_next_record, translator).records;
  state.counters["ns_per_record"] = benchmark::Counter(
      static_cast<double>(records), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  prof.stop();
  state.counters["dropped"] = static_cast<double>(prof.last_run().events_dropped);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_CuptiRecord)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
