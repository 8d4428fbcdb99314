// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Exhausts buffer_mb and reports the counts. argv: output_dir paused|threads
//   paused:  the flusher is held, one thread records 100000 ranges into 1 MiB
//            (16 blocks): exactly 16 blocks' worth survive, the rest are dropped.
//   threads: 8 threads x 1M ranges into 1 MiB with the flusher running.
//   threads N MB [RANGES]: N threads x RANGES (default 1M) ranges into MB MiB
//            (the overload measurement of docs/RELIABILITY.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/event.h"
#include "core/flusher.h"
#include "trainprof/trainprof.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  bool paused = std::strcmp(argv[2], "paused") == 0;
  int threads = paused ? 1 : argc > 3 ? std::atoi(argv[3]) : 8;
  o.buffer_mb = argc > 4 ? static_cast<uint32_t>(std::atoi(argv[4])) : 1;
  int per_thread = paused ? 100000 : argc > 5 ? std::atoi(argv[5]) : 1000000;
  trainprof::Profiler prof(o);
  auto& flusher = trainprof::core::Flusher::instance();
  if (paused) flusher.set_paused_for_testing(true);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([per_thread] {
      for (int i = 0; i < per_thread; ++i) {
        TRAINPROF_RANGE("r");
      }
    });
  }
  for (auto& t : ts) t.join();
  if (paused) {
    flusher.set_paused_for_testing(false);
    flusher.flush();  // frees the blocks so that the final step event has room
  }
  prof.stop();
  std::printf("ATTEMPTED %d RECORDED %llu DROPPED %llu BLOCK %u\n", threads * per_thread + 1,
              static_cast<unsigned long long>(prof.last_run().events_recorded),
              static_cast<unsigned long long>(prof.last_run().events_dropped),
              trainprof::core::kEventsPerBlock);
  std::printf("RUN %s\n", prof.last_run().run_dir.c_str());
  return 0;
}
