// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A program under a flight recorder that ends badly after 30 steps. argv:
// output_dir mode
//   segv       a null write (SIGSEGV)
//   terminate  an exception thrown through a noexcept function (std::terminate)
//   sigterm    SIGTERM to itself, left at its default action (a job scheduler's kill)
//   env_MODE   as MODE, with the recorder TRAINPROF_OPTIONS started (output_dir unused)
// Prints "READY <pid>" once the steps are done, just before it ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "trainprof/trainprof.h"

namespace {

// On purpose: an exception that reaches a noexcept boundary calls std::terminate.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wterminate"
void fail_inside_noexcept() noexcept {
  throw std::runtime_error("the loss became NaN");
}
#pragma GCC diagnostic pop

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  std::string mode = argv[2];
  std::unique_ptr<trainprof::FlightRecorder> own;
  trainprof::FlightRecorder* recorder_from_env = trainprof::env_flight_recorder();
  if (mode.rfind("env_", 0) == 0) {
    mode = mode.substr(4);
    if (recorder_from_env == nullptr) return 5;
  } else {
    trainprof::FlightRecorderOptions o;
    o.profiler.output_path = argv[1];
    o.ring_mb = 8;
    o.hang_timeout_s = 0;
    o.slow_step_factor = 0;  // 2 ms steps on a loaded machine vary by more than 3x
    own = std::make_unique<trainprof::FlightRecorder>(o);
  }
  trainprof::FlightRecorder& recorder = own ? *own : *recorder_from_env;
  if (!recorder.recording()) return 3;
  for (int step = 0; step < 30; ++step) {
    for (int i = 0; i < 100; ++i) {
      TRAINPROF_RANGE("work");
      trainprof::counter("seq", step * 100 + i);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    recorder.step();
  }
  { TRAINPROF_RANGE("last_work"); }  // the step under way when the process ends
  std::printf("READY %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  if (mode == "segv") {
    volatile int* null = nullptr;
    *null = 1;
  } else if (mode == "terminate") {
    fail_inside_noexcept();
  } else if (mode == "sigterm") {
    raise(SIGTERM);
  }
  return 4;
}
