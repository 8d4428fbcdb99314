// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

namespace trainprof::base {

void run_in_parallel(const std::vector<std::function<void()>>& tasks, int threads) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr first_failure;
  // Each thread takes the next task not yet taken until none is left.
  auto work = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      try {
        tasks[i]();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_failure) first_failure = std::current_exception();
      }
    }
  };
  size_t helpers = threads > 1 ? std::min(static_cast<size_t>(threads), tasks.size()) : 1;
  std::vector<std::thread> started;
  for (size_t i = 1; i < helpers; ++i) {
    try {
      started.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the threads started, and this one, do the rest
    }
  }
  work();
  for (std::thread& t : started) t.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace trainprof::base
