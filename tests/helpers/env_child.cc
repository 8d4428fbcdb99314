// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// An unmodified program: it never creates a Profiler. TRAINPROF_OPTIONS alone
// decides whether it is profiled.
#include <cstdio>
#include <thread>
#include <vector>

#include "trainprof/range.h"

int main() {
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) {
        TRAINPROF_RANGE("env_work");
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("child done\n");
  return 0;
}
