// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the out-of-memory watch in front of c10's CPU allocator costs an
// allocation, against what profile_memory costs it.
//
//   ./build/bin/trainprof_cpu_allocator_watch [rounds] [allocations]
//
// A session installs the watch (for the process' lifetime) in front of
// c10's default CPU allocator. Each round then times, interleaved, an
// allocation and free of 64 bytes through the default allocator directly
// ("bare") and through the watch ("watched"), with no profiler; and the
// watched one inside a profile_memory session ("profile_memory": c10 tracks
// the block and reports it, trainprof records both). Cost is the thread's
// CPU time per allocation + free; the figures are medians over rounds.
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "trainprof/trainprof.h"

namespace {

double thread_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

double per_allocation(c10::Allocator* a, int n) {
  double t = thread_ns();
  for (int i = 0; i < n; ++i) {
    c10::DataPtr p = a->allocate(64);
    if (p.get() == nullptr) std::abort();
  }
  return (thread_ns() - t) / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

trainprof::ProfilerOptions options(const std::string& dir, bool memory) {
  trainprof::ProfilerOptions o;
  o.output_path = dir;
  o.profile_memory = memory;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  int n = argc > 2 ? std::atoi(argv[2]) : 200000;
  std::string dir = (std::filesystem::temp_directory_path() / "trainprof_watch_bench").string();
  c10::Allocator* bare = c10::GetDefaultCPUAllocator();
  {
    trainprof::Profiler installs(options(dir, false));  // the watch goes in front, for good
  }
  c10::Allocator* watched = c10::GetCPUAllocator();
  if (watched == bare) {
    std::fprintf(stderr, "the watch was not installed\n");
    return 1;
  }
  std::vector<double> b, w, m;
  for (int r = 0; r < rounds; ++r) {
    b.push_back(per_allocation(bare, n));
    w.push_back(per_allocation(watched, n));
    trainprof::Profiler memory(options(dir, true));
    m.push_back(per_allocation(watched, n));
    memory.stop();
  }
  double bare_ns = median(b), watch_ns = median(w) - bare_ns, memory_ns = median(m) - median(w);
  std::printf("per allocation + free of 64 bytes, median of %d rounds of %d:\n", rounds, n);
  std::printf("  bare (c10's default CPU allocator):   %7.1f ns\n", bare_ns);
  std::printf("  through the watch:                    %7.1f ns (+%.1f ns)\n", median(w), watch_ns);
  std::printf("  profile_memory recording (watched):   %7.1f ns (+%.1f ns over the watch)\n", median(m),
              memory_ns);
  std::printf("  watch / profile_memory's added cost:  %7.3f (target <= 0.10)\n", watch_ns / memory_ns);
  std::filesystem::remove_all(dir);
  return 0;
}
