// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// One rank of an NCCL job, as NCCL's profiler plugin sees it: a communicator of
// the world (hash 0x5eed) and three all-reduces whose kernels ran on the GPU at
// given times. argv: output_dir rank world_size base_realtime_ns late_ms
//   Each all-reduce k (sequence k) ends at base + 30k + 20 ms on every
//   rank; its kernel starts at base + 30k ms, or late_ms later on this rank.
//   The program waits until base + 100 ms, ends its one step, stops and
//   analyses its run, and prints "RUN <dir>".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "collectors/nccl/nccl_profiler.h"
#include "trainprof/trainprof.h"

namespace {
constexpr uint64_t kMs = 1'000'000;
}

int main(int argc, char** argv) {
  using namespace trainprof;
  if (argc < 6) return 2;
  setenv("RANK", argv[2], 1);
  setenv("WORLD_SIZE", argv[3], 1);
  const int rank = std::atoi(argv[2]), world = std::atoi(argv[3]);
  const uint64_t base = std::strtoull(argv[4], nullptr, 10);
  const uint64_t late = std::strtoull(argv[5], nullptr, 10) * kMs;
  ProfilerOptions o;
  o.output_path = argv[1];
  Profiler prof(o);
  void* context = nullptr;
  int mask = 0;
  if (ncclProfiler_v4.init(&context, &mask, "world", 0x5eed, 1, world, rank, nullptr) != nccl::kSuccess)
    return 3;
  for (uint64_t k = 0; k < 3; ++k) {
    nccl::EventDescrV4 d{};
    d.type = nccl::kProfileColl;
    d.rank = rank;
    d.coll.seq_number = k;
    d.coll.func = "AllReduce";
    d.coll.count = 1 << 20;
    d.coll.datatype = "ncclFloat32";
    d.coll.channels = 1;
    void* op = nullptr;
    ncclProfiler_v4.start_event(context, &op, &d);
    ncclProfiler_v4.stop_event(op);
    nccl::EventDescrV4 ch{};
    ch.type = nccl::kProfileKernelCh;
    ch.parent = op;
    ch.kernel_ch.ptimer = base + 30 * k * kMs + late;
    void* channel = nullptr;
    ncclProfiler_v4.start_event(context, &channel, &ch);
    nccl::EventStateArgsV4 end{};
    end.kernel_ch.ptimer = base + (30 * k + 20) * kMs;
    ncclProfiler_v4.record_event_state(channel, nccl::kKernelChStop, &end);
    ncclProfiler_v4.stop_event(channel);
  }
  while (detail::realtime_now_ns() < base + 100 * kMs)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  prof.step();
  prof.stop();
  ncclProfiler_v4.finalize(context);
  AnalyseReport report = analyse(prof.last_run().run_dir);
  if (!report.error.empty()) return 4;
  std::printf("RUN %s\n", prof.last_run().run_dir.c_str());
  return 0;
}
