// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Fork and join: a few independent tasks on the cores an analysis is given.
// Each task writes only what it owns, so what they make does not depend on
// how many threads ran them, or in which order.
#ifndef TRAINPROF_BASE_PARALLEL_H_
#define TRAINPROF_BASE_PARALLEL_H_

#include <functional>
#include <vector>

namespace trainprof::base {

// Runs every task on up to `threads` threads, the calling one among them,
// and returns when all have ended. The first exception a task throws is
// rethrown here once every task has ended. With `threads` <= 1, or when no
// thread can be started, the tasks run here one after the other, in order.
void run_in_parallel(const std::vector<std::function<void()>>& tasks, int threads);

// The cores this process may run on (its affinity mask), at least 1.
int usable_cores();

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_PARALLEL_H_
