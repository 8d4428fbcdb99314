// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Micro benchmarks of the collection core.
//
//   build/bin/trainprof_bench [--benchmark_filter=...]
//
// Results and the command line that produced them go into docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "collectors/system/host_sampler.h"
#include "core/clock.h"
#include "core/flusher.h"
#include "floor_parts.h"
#include "trainprof/trainprof.h"

namespace {

namespace fs = std::filesystem;

std::string bench_dir() {
  static std::string dir = [] {
    std::string d = fs::temp_directory_path().string() + "/trainprof_bench_" + std::to_string(getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

double thread_cpu_seconds(pid_t tid) {
  // Linux per-thread CPU clock of another thread: MAKE_THREAD_CPUCLOCK(tid, SCHED).
  clockid_t cid = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec ts{};
  if (clock_gettime(cid, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::unique_ptr<trainprof::Profiler> g_profiler;

// Big enough that a whole benchmark run never drops: the figure is the cost
// of recording, not of dropping.
void start_recording(const benchmark::State&) {
  trainprof::ProfilerOptions o;
  o.output_path = bench_dir();
  o.buffer_mb = 3072;
  g_profiler = std::make_unique<trainprof::Profiler>(o);
}

void stop_recording(const benchmark::State&) {
  g_profiler->stop();
  // A figure measured while events were dropped is not the recording cost.
  if (uint64_t dropped = g_profiler->last_run().events_dropped; dropped != 0)
    fprintf(stderr, "note: %llu events dropped (buffer full) during this benchmark\n",
            static_cast<unsigned long long>(dropped));
  fs::remove_all(g_profiler->last_run().run_dir);
  g_profiler.reset();
}

// One scoped range (begin + end) with a static name, while recording.
void BM_ScopedRangeRecording(benchmark::State& state) {
  // The flusher's CPU time over the same iterations, per range: on a
  // machine with no core to spare it is taken from the recording threads.
  const pid_t flusher = trainprof::core::Flusher::instance().thread_id();
  const double flusher_cpu0 = state.thread_index() == 0 ? thread_cpu_seconds(flusher) : 0;
  for (auto _ : state) {
    TRAINPROF_RANGE("bench");
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const double ranges = static_cast<double>(state.iterations()) * state.threads();
    state.counters["flusher_ns_per_range"] = 1e9 * (thread_cpu_seconds(flusher) - flusher_cpu0) / ranges;
  }
}
BENCHMARK(BM_ScopedRangeRecording)
    ->Setup(start_recording)
    ->Teardown(stop_recording)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// The same with no profiler recording: the cost of instrumentation left in.
void BM_ScopedRangeOff(benchmark::State& state) {
  for (auto _ : state) {
    TRAINPROF_RANGE("bench");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ScopedRangeOff)->Threads(1)->Threads(2)->UseRealTime();

// A range with a runtime name (interned on every call).
void BM_RuntimeNameRangeRecording(benchmark::State& state) {
  std::string name = "layer." + std::to_string(state.thread_index());
  for (auto _ : state) {
    trainprof::Range r(name);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RuntimeNameRangeRecording)
    ->Setup(start_recording)
    ->Teardown(stop_recording)
    ->Threads(1)
    ->UseRealTime();

// The floor: two timestamp reads.
void BM_TwoTimestamps(benchmark::State& state) {
  trainprof::core::init_clock();
  for (auto _ : state) {
    uint64_t a = trainprof::detail::now_ticks();
    uint64_t b = trainprof::detail::now_ticks();
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_TwoTimestamps);
BENCHMARK(BM_TwoTimestamps)->Threads(1)->Threads(2)->UseRealTime();

// The parts of a recorded range, each added to the last (floor_parts.h):
// what the range above costs beyond its two timestamps, part by part, with
// a profiler recording (so that the flusher runs, as for the range).
template <void (*End)(const char*, uint64_t) noexcept>
void BM_RangeFloorParts(benchmark::State& state) {
  for (auto _ : state) {
    uint64_t start = trainprof::detail::host_recording() ? trainprof::detail::now_ticks() : 0;
    if (start != 0) End("bench", start);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_RangeFloorParts, trainprof_floor_end_call)
    ->Name("BM_RangeFloor_Call")
    ->Setup(start_recording)
    ->Teardown(stop_recording)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_RangeFloorParts, trainprof_floor_end_tls)
    ->Name("BM_RangeFloor_CallTls")
    ->Setup(start_recording)
    ->Teardown(stop_recording)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_RangeFloorParts, trainprof_floor_end_tls_store)
    ->Name("BM_RangeFloor_CallTlsStore")
    ->Setup(start_recording)
    ->Teardown(stop_recording)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Bytes per range on disk for a training-like pattern (nested ranges with a
// handful of names on 2 threads). Reported as a counter.
void BM_BytesPerRangeOnDisk(benchmark::State& state) {
  const int64_t per_thread = 2'000'000;
  double bytes_per_range = 0;
  for (auto _ : state) {
    trainprof::ProfilerOptions o;
    o.output_path = bench_dir();
    o.buffer_mb = 256;
    trainprof::Profiler prof(o);
    auto work = [&] {
      static const char* const kNames[] = {"forward", "conv", "relu", "linear", "backward", "optimizer"};
      for (int64_t i = 0; i < per_thread; i += 4) {
        trainprof::ScopedRange outer(kNames[i % 6]);
        { TRAINPROF_RANGE("inner.a"); }
        { TRAINPROF_RANGE("inner.b"); }
        { TRAINPROF_RANGE("inner.c"); }
      }
    };
    std::thread t1(work), t2(work);
    t1.join();
    t2.join();
    prof.stop();
    std::string raw = prof.last_run().run_dir + "/raw/host.tpraw";
    bytes_per_range =
        static_cast<double>(fs::file_size(raw)) / static_cast<double>(prof.last_run().events_recorded);
    state.counters["events"] = static_cast<double>(prof.last_run().events_recorded);
    state.counters["dropped"] = static_cast<double>(prof.last_run().events_dropped);
    fs::remove_all(prof.last_run().run_dir);
  }
  state.counters["bytes_per_range"] = bytes_per_range;
}
BENCHMARK(BM_BytesPerRangeOnDisk)->Iterations(1)->Unit(benchmark::kMillisecond);

// Flusher CPU time while one thread records at a sustained rate
// (state.range(0) events per second, for 2 seconds).
void BM_FlusherCpuAtSustainedRate(benchmark::State& state) {
  const double rate = static_cast<double>(state.range(0));
  for (auto _ : state) {
    trainprof::ProfilerOptions o;
    o.output_path = bench_dir();
    o.buffer_mb = 64;
    trainprof::Profiler prof(o);
    pid_t flusher = trainprof::core::Flusher::instance().thread_id();
    double cpu0 = thread_cpu_seconds(flusher);
    auto t0 = std::chrono::steady_clock::now();
    const double seconds = 2.0;
    int64_t recorded = 0;
    for (;;) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (elapsed >= seconds) break;
      int64_t due = static_cast<int64_t>(elapsed * rate);
      while (recorded < due) {
        TRAINPROF_RANGE("sustained");
        ++recorded;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    prof.stop();
    double cpu = thread_cpu_seconds(flusher) - cpu0;
    state.counters["flusher_cpu_pct"] = 100.0 * cpu / seconds;
    state.counters["flusher_ns_per_event"] = 1e9 * cpu / static_cast<double>(recorded);
    state.counters["dropped"] = static_cast<double>(prof.last_run().events_dropped);
    fs::remove_all(prof.last_run().run_dir);
  }
}
BENCHMARK(BM_FlusherCpuAtSustainedRate)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// DynamicProfilerMonitor::step() while profiler_config.json does not ask
// for a collection: what every training step pays for dynamic profiling.
// Arg: the watcher's poll interval in ms (its thread stats the file that
// often, on another core; 3'600'000: it never does during the benchmark).
void BM_DynamicMonitorStepIdle(benchmark::State& state) {
  std::string cfg = bench_dir() + "/dyn_cfg_" + std::to_string(state.range(0));
  trainprof::DynamicProfilerMonitor monitor(cfg, bench_dir() + "/dyn_out",
                                            static_cast<double>(state.range(0)) / 1000.0);
  for (auto _ : state) monitor.step();
  state.counters["steps"] = static_cast<double>(monitor.step_num());
}
BENCHMARK(BM_DynamicMonitorStepIdle)->Arg(3'600'000)->Arg(50)->Arg(1);

// The host sampler's cost (issue 15 asks under 0.5 % of one core at the
// default 50 ms): a profiler samples every host_sys part for 3 s while this
// thread sleeps; the sampler thread's CPU time over its wall time, and per
// sample. Arg: the interval in ms.
void BM_HostSamplerCpu(benchmark::State& state) {
  for (auto _ : state) {
    trainprof::ProfilerOptions o;
    o.output_path = bench_dir();
    o.host_sys = {trainprof::HostSystem::Cpu, trainprof::HostSystem::Mem, trainprof::HostSystem::Disk,
                  trainprof::HostSystem::Network};
    o.host_sys_interval_ms = static_cast<uint32_t>(state.range(0));
    trainprof::Profiler prof(o);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    prof.stop();
    trainprof::system::HostSamplerStats st = trainprof::system::last_host_sampler_stats();
    state.counters["cpu_percent_of_one_core"] =
        100.0 * static_cast<double>(st.thread_cpu_ns) / static_cast<double>(st.wall_ns);
    state.counters["us_per_sample"] =
        static_cast<double>(st.thread_cpu_ns) / 1e3 / static_cast<double>(st.samples);
    state.counters["samples"] = static_cast<double>(st.samples);
    fs::remove_all(prof.last_run().run_dir);
  }
}
BENCHMARK(BM_HostSamplerCpu)->Arg(50)->Arg(10)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
