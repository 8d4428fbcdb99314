// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How long a flight recorder's dump of a full ring takes, and what step() costs
// the training thread.
//
//   trainprof_flight_dump [--ring-mb 64] [--dumps 5] [--steps 200000]
//
// Fills the ring (ranges of three names, as a training loop's operators)
// until it has given blocks back, then times dump() without analysis: the
// ring's blocks encoded into a fresh raw file and written (to $TMPDIR).
// Then times step() alone (no trigger fires), against the same loop without
// a recorder. Prints one line per figure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "trainprof/trainprof.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long ring_mb = arg(argc, argv, "--ring-mb", 64);
  const long dumps = arg(argc, argv, "--dumps", 5);
  const long steps = arg(argc, argv, "--steps", 200000);
  std::string dir = (std::filesystem::temp_directory_path() / "trainprof_flight_bench").string();
  std::filesystem::remove_all(dir);
  trainprof::FlightRecorderOptions o;
  o.profiler.output_path = dir;
  o.ring_mb = static_cast<uint32_t>(ring_mb);
  o.slow_step_factor = 0;
  o.analyse = false;
  o.dump_signal = 0;
  {
    trainprof::FlightRecorder recorder(o);
    // 1.5x the ring's events: the ring is full and has given blocks back.
    const long events = ring_mb * (1 << 20) / 32 * 3 / 2;
    for (long i = 0; i < events / 3; ++i) {
      { TRAINPROF_RANGE("aten::addmm"); }
      { TRAINPROF_RANGE("aten::relu"); }
      { TRAINPROF_RANGE("aten::add_"); }
      if (i % 100 == 0) recorder.step();
    }
    std::vector<double> times;
    for (long d = 0; d < dumps; ++d) {
      auto start = std::chrono::steady_clock::now();
      trainprof::FlightDump dump = recorder.dump("bench");
      times.push_back(seconds_since(start));
      if (!dump.error.empty()) {
        std::fprintf(stderr, "dump failed: %s\n", dump.error.c_str());
        return 1;
      }
    }
    std::sort(times.begin(), times.end());
    uintmax_t bytes = 0;
    for (const auto& run : std::filesystem::directory_iterator(dir)) {
      bytes = std::filesystem::file_size(run.path() / "raw" / "host.tpraw");
    }
    std::printf(
        "dump of a full %ld MiB ring: median %.3f s (min %.3f, max %.3f, %ld dumps), %.1f MiB raw file\n",
        ring_mb, times[times.size() / 2], times.front(), times.back(), dumps,
        static_cast<double>(bytes) / (1 << 20));

    auto start = std::chrono::steady_clock::now();
    for (long s = 0; s < steps; ++s) recorder.step();
    double with = seconds_since(start) / static_cast<double>(steps);
    std::printf("step(): %.0f ns a call (%ld steps, no trigger firing)\n", with * 1e9, steps);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
