// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Records a counter sequence forever; the test SIGKILLs it and checks that what
// was flushed reads back as a prefix.
#include <cstdio>
#include <string>
#include <thread>

#include "trainprof/trainprof.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  o.flush_interval_ms = 50;
  trainprof::Profiler prof(o);
  std::printf("RUN %s\n", prof.current_run_dir().c_str());
  std::fflush(stdout);
  for (uint64_t i = 0;; ++i) {
    TRAINPROF_RANGE("iteration");
    trainprof::counter("seq", static_cast<double>(i));
    if (i % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
