// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A training job under a DynamicProfilerMonitor whose config another process
// edits: it trains `pause_step` steps, prints "READY", waits (at most 60 s)
// until the monitor has read a config beyond the first (the test's edit), then
// trains up to `steps` and exits 0. argv: rank cfg_dir output_dir pause_step
// steps
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainprof/trainprof.h"

int main(int argc, char** argv) {
  if (argc < 6) return 2;
  setenv("RANK", argv[1], 1);  // the monitor names its runs by rank
  int pause_step = std::atoi(argv[4]), steps = std::atoi(argv[5]);
  trainprof::DynamicProfilerMonitor monitor(argv[2], argv[3], 0.01);
  uint64_t first_configs = monitor.configs_read();
  for (int step = 1; step <= steps; ++step) {
    {
      TRAINPROF_RANGE("train_step");
      usleep(1000);
    }
    monitor.step();
    if (step == pause_step) {
      std::printf("READY\n");
      std::fflush(stdout);
      for (int waited_ms = 0; waited_ms < 60'000 && monitor.configs_read() == first_configs; waited_ms += 5)
        usleep(5000);
      if (monitor.configs_read() == first_configs) return 3;  // the edit never came
    }
  }
  return monitor.runs().size() == 1 ? 0 : 4;
}
