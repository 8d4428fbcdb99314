// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Records N counters, then waits for a signal. argv: output_dir N [chain]: with
// "chain" a user SIGTERM/SIGINT handler is installed before the profiler; it
// must still run (exit code 7).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "trainprof/trainprof.h"

namespace {
void user_handler(int) {
  const char msg[] = "USER HANDLER\n";
  ssize_t ignored = write(1, msg, sizeof(msg) - 1);
  (void)ignored;
  _exit(7);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  if (argc > 3 && std::strcmp(argv[3], "chain") == 0) {
    signal(SIGTERM, user_handler);
    signal(SIGINT, user_handler);
  }
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  o.flush_interval_ms = 60000;  // only the signal can have flushed the data
  trainprof::Profiler prof(o);
  long n = std::atol(argv[2]);
  for (long i = 0; i < n; ++i) trainprof::counter("seq", static_cast<double>(i));
  std::printf("READY %s\n", prof.current_run_dir().c_str());
  std::fflush(stdout);
  for (;;) pause();
}
