// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A busy loop for the test helpers: a rank that computes loads the host as
// training does (a sleeping one would not).
#ifndef TRAINPROF_TESTS_HELPERS_BUSY_H_
#define TRAINPROF_TESTS_HELPERS_BUSY_H_

#include <time.h>

namespace trainprof::test {

// Busy for `ms` of this thread's CPU time.
inline void compute(double ms) {
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  volatile double x = 1;
  do {
    for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1e3 + (now.tv_nsec - start.tv_nsec) / 1e6 < ms);
}

}  // namespace trainprof::test

#endif  // TRAINPROF_TESTS_HELPERS_BUSY_H_
