// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// base::run_in_parallel: every task once, failures brought back, any count.
#include "base/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace trainprof::base {
namespace {

TEST(Parallel, EveryTaskRunsOnceWhateverTheThreads) {
  for (int threads : {0, 1, 2, 3, 16}) {
    std::vector<std::atomic<int>> runs(10);
    std::vector<std::function<void()>> tasks;
    for (size_t i = 0; i < runs.size(); ++i) tasks.emplace_back([&runs, i] { ++runs[i]; });
    run_in_parallel(tasks, threads);
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i], 1) << threads << " threads, task " << i;
  }
  run_in_parallel({}, 4);  // nothing to do is no error
}

TEST(Parallel, OneThreadRunsTheTasksInOrderHere) {
  std::vector<int> order;
  std::set<std::thread::id> where;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.emplace_back([&order, &where, i] {
      order.push_back(i);
      where.insert(std::this_thread::get_id());
    });
  }
  run_in_parallel(tasks, 1);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(where, (std::set<std::thread::id>{std::this_thread::get_id()}));
}

// Two tasks that each wait for the other end only if they run at once.
TEST(Parallel, TwoThreadsRunTwoTasksAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  auto meet = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait(lock, [&] { return arrived == 2; });
  };
  run_in_parallel({meet, meet}, 2);
  EXPECT_EQ(arrived, 2);
}

TEST(Parallel, AFailureComesBackAfterEveryTaskEnded) {
  std::atomic<int> ended{0};
  std::vector<std::function<void()>> tasks;
  tasks.emplace_back([] { throw std::runtime_error("the first task failed"); });
  for (int i = 0; i < 6; ++i) tasks.emplace_back([&ended] { ++ended; });
  for (int threads : {1, 3}) {
    ended = 0;
    try {
      run_in_parallel(tasks, threads);
      ADD_FAILURE() << "no exception on " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "the first task failed");
    }
    EXPECT_EQ(ended, 6) << threads << " threads";
  }
}

TEST(Parallel, UsableCoresIsAtLeastOne) {
  EXPECT_GE(usable_cores(), 1);
  EXPECT_LE(usable_cores(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace trainprof::base
