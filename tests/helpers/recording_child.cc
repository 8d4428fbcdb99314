// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A training process that is still recording: it records ranges, lets the
// flusher write them, prints "RUN {run_dir}" and goes on recording until the
// file {output_dir}/stop appears (at most 60 s), then stops and exits 0. argv:
// output_dir
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "trainprof/trainprof.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  o.flush_interval_ms = 10;
  o.buffer_mb = 64;
  trainprof::Profiler prof(o);
  for (int i = 0; i < 100'000; ++i) {
    TRAINPROF_RANGE("live_work");
  }
  usleep(100'000);  // a few flush intervals: the ranges are on disk
  std::printf("RUN %s\n", prof.current_run_dir().c_str());
  std::fflush(stdout);
  std::string stop = std::string(argv[1]) + "/stop";
  struct stat st {};
  for (int waited_ms = 0; waited_ms < 60'000 && stat(stop.c_str(), &st) != 0; waited_ms += 10) {
    TRAINPROF_RANGE("live_work");
    usleep(10'000);
  }
  prof.stop();
  return 0;
}
