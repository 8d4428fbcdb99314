// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The recording engine: threads, buffers, event kinds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <bit>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/block_pool.h"
#include "core/intern.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;

ProfilerOptions options_in(const TempDir& dir, uint32_t buffer_mb = 8) {
  ProfilerOptions o;
  o.output_path = dir.path();
  o.buffer_mb = buffer_mb;
  return o;
}

// intern() answers from a per-thread cache for names seen before: the same
// pointer for the same text on every thread, the right text for names that
// share a cache slot, and a fresh thread's first call fills its own cache.
TEST(Intern, SameTextSamePointerOnEveryThreadAndSlotSharersStayApart) {
  std::vector<std::string> names;
  for (int i = 0; i < 2000; ++i) names.push_back("layer." + std::to_string(i));  // 2000 > the 256 slots
  std::vector<const char*> first;
  for (const std::string& n : names) first.push_back(detail::intern(n));
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < names.size(); ++i) {
      const char* again = detail::intern(names[i]);
      ASSERT_EQ(again, first[i]) << names[i];
      ASSERT_STREQ(again, names[i].c_str());
    }
  }
  std::vector<const char*> other(names.size());
  std::thread t([&] {
    for (size_t i = 0; i < names.size(); ++i) other[i] = detail::intern(names[i]);
  });
  t.join();
  EXPECT_EQ(other, first);
  // A prefix and an equal-length name are other strings.
  EXPECT_STREQ(detail::intern("layer.1"), "layer.1");
  EXPECT_NE(detail::intern("layer.1"), detail::intern("layer.10"));
  EXPECT_NE(detail::intern("layer.1"), detail::intern("layer.2"));
}

TEST(Recording, EightThreadsMillionRangesEachNothingLost) {
  constexpr int kThreads = 8;
  constexpr int kRanges = 1'000'000;
  TempDir dir;
  // 8M events x 32 bytes = 256 MiB: enough even if the flusher never ran.
  Profiler prof(options_in(dir, 320));
  std::vector<std::thread> threads;
  std::vector<uint32_t> tids(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &tids] {
      tids[t] = static_cast<uint32_t>(gettid());
      set_thread_name("worker-" + std::to_string(t));
      for (int i = 0; i < kRanges; ++i) {
        TRAINPROF_RANGE("hot");
      }
    });
  }
  for (auto& th : threads) th.join();
  prof.stop();
  RunSummary run = prof.last_run();
  EXPECT_EQ(run.events_dropped, 0u);
  EXPECT_EQ(run.events_recorded, static_cast<uint64_t>(kThreads) * kRanges + 1);  // + ProfilerStep#0

  raw::RawFile f = test::read_run(run.run_dir);
  EXPECT_TRUE(f.issues.empty());
  std::map<uint32_t, size_t> per_thread;
  std::map<uint32_t, uint64_t> last_start;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind != raw::EventKind::kRange) continue;
    ASSERT_EQ(f.name(e.name_id), "hot");
    ASSERT_GE(e.t1_ns, e.t0_ns);
    // Within a thread, ranges come in the order they were recorded.
    ASSERT_GE(e.t0_ns, last_start[e.tid]);
    last_start[e.tid] = e.t0_ns;
    ++per_thread[e.tid];
  }
  ASSERT_EQ(per_thread.size(), static_cast<size_t>(kThreads));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(per_thread[tids[t]], static_cast<size_t>(kRanges)) << "thread " << t;
    EXPECT_EQ(f.thread_names[tids[t]], "worker-" + std::to_string(t));
  }
  auto info = nlohmann::json::parse(test::read_text(run.run_dir + "/profiler_info.json"));
  EXPECT_EQ(info["events_recorded"], run.events_recorded);
}

TEST(Recording, NestedRangesKeepTheirTimes) {
  TempDir dir;
  Profiler prof(options_in(dir));
  {
    TRAINPROF_RANGE("outer");
    {
      TRAINPROF_RANGE("inner");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  prof.stop();
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  const raw::RawEvent* outer = nullptr;
  const raw::RawEvent* inner = nullptr;
  for (const auto& e : f.events) {
    if (f.name(e.name_id) == "outer") outer = &e;
    if (f.name(e.name_id) == "inner") inner = &e;
  }
  ASSERT_TRUE(outer && inner);
  EXPECT_LE(outer->t0_ns, inner->t0_ns);
  EXPECT_GE(outer->t1_ns, inner->t1_ns);
  EXPECT_GE(inner->t1_ns - inner->t0_ns, 2'000'000u);      // slept 2 ms
  EXPECT_LT(inner->t1_ns - inner->t0_ns, 2'000'000'000u);  // ticks converted to ns
}

// A stack sample keeps its thread, stack and span, and its thread's wait
// for a CPU to the microsecond (past the most the record holds: that most).
TEST(Recording, StackSamplesKeepTheirThreadsWaitForACpu) {
  TempDir dir;
  Profiler prof(options_in(dir));
  uint64_t start = detail::now_ticks();
  detail::record_stack_sample(4242, start, start + 1000, "train.py(3): main", 2'500'777);
  detail::record_stack_sample(4242, start + 1000, start + 2000, "train.py(4): main");
  detail::record_stack_sample(4242, start + 2000, start + 3000, "train.py(5): main", 100'000'000'000);
  prof.stop();
  std::vector<std::pair<std::string, uint64_t>> samples;
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  for (const auto& e : f.events) {
    if (e.kind != raw::EventKind::kStackSample) continue;
    EXPECT_EQ(e.a, 4242u);
    samples.emplace_back(f.name(e.name_id), e.b);
  }
  EXPECT_EQ(samples,
            (std::vector<std::pair<std::string, uint64_t>>{{"train.py(3): main", 2'500'000},
                                                           {"train.py(4): main", 0},
                                                           {"train.py(5): main", detail::kMaxCpuWaitNs}}));
}

TEST(Recording, MarksCountersAndCrossThreadRanges) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.mstx_domain_exclude = {"noisy"};
  Profiler prof(o);
  mark("epoch begins");
  mark("dropped", "noisy");
  EXPECT_EQ(range_start("filtered", "noisy"), 0u);
  uint64_t id = range_start("load batch", "data");
  ASSERT_NE(id, 0u);
  std::thread([id] { range_end(id); }).join();
  range_end(0);  // no-op
  counter("loss", 0.25);
  counter("loss", -1.5e300);
  prof.stop();

  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  std::vector<double> losses;
  int marks = 0, begins = 0, ends = 0;
  uint32_t begin_tid = 0, end_tid = 0;
  for (const auto& e : f.events) {
    switch (e.kind) {
      case raw::EventKind::kMark:
        ++marks;
        EXPECT_EQ(f.name(e.name_id), "epoch begins");
        EXPECT_EQ(f.name(static_cast<uint32_t>(e.a)), "default");
        break;
      case raw::EventKind::kCounter:
        EXPECT_EQ(f.name(e.name_id), "loss");
        losses.push_back(std::bit_cast<double>(e.b));
        break;
      case raw::EventKind::kAsyncBegin:
        ++begins;
        EXPECT_EQ(f.name(e.name_id), "load batch");
        EXPECT_EQ(f.name(static_cast<uint32_t>(e.a)), "data");
        EXPECT_EQ(e.b, id);
        begin_tid = e.tid;
        break;
      case raw::EventKind::kAsyncEnd:
        ++ends;
        EXPECT_EQ(e.b, id);
        end_tid = e.tid;
        break;
      default: break;
    }
  }
  EXPECT_EQ(marks, 1);
  EXPECT_EQ(begins, 1);
  EXPECT_EQ(ends, 1);
  EXPECT_NE(begin_tid, end_tid);
  EXPECT_EQ(losses, (std::vector<double>{0.25, -1.5e300}));
}

TEST(Recording, MemoryTagsKeepTheirCategoryAddressBytesAndDevice) {
  TempDir dir;
  Profiler prof(options_in(dir));
  static const char block[64] = {};
  tag_memory(MemoryCategory::kOptimizerState, block, sizeof(block));
  tag_memory(MemoryCategory::kGradient, reinterpret_cast<const void*>(0x7f0000001000), uint64_t{3} << 33, 1,
             2);
  tag_memory(MemoryCategory::kInput, nullptr, 8);        // no block: nothing
  tag_memory(static_cast<MemoryCategory>(9), block, 8);  // no category: nothing
  EXPECT_STREQ(memory_category_name(static_cast<MemoryCategory>(9)), "");
  prof.stop();
  tag_memory(MemoryCategory::kParameter, block, 8);  // stopped: nothing

  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  std::vector<std::string> tags;
  for (const auto& e : f.events) {
    if (e.kind != raw::EventKind::kMemoryTag) continue;
    tags.push_back(std::string(f.name(e.name_id)) + " " + std::to_string(e.b) + " " + std::to_string(e.a) +
                   " " + std::to_string(e.device));
  }
  EXPECT_EQ(tags, (std::vector<std::string>{
                      "optimizer state " + std::to_string(reinterpret_cast<uintptr_t>(block)) + " 64 0",
                      "gradient " + std::to_string(0x7f0000001000) + " " + std::to_string(uint64_t{3} << 33) +
                          " " + std::to_string(raw::memory_device(1, 2)),
                  }));
}

TEST(Recording, DomainIncludeListWins) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.mstx_domain_include = {"keep"};
  o.mstx_domain_exclude = {"keep"};
  Profiler prof(o);
  mark("a", "keep");
  mark("b", "other");
  mark("c");
  prof.stop();
  auto counts = test::count_by_name(test::read_run(prof.last_run().run_dir));
  EXPECT_EQ(counts["a"], 1u);
  EXPECT_EQ(counts.count("b"), 0u);
  EXPECT_EQ(counts.count("c"), 0u);
}

TEST(Recording, NothingIsRecordedWhileStopped) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.start_profile = false;
  Profiler prof(o);
  { TRAINPROF_RANGE("before"); }
  mark("before");
  counter("before", 1);
  prof.start();
  { TRAINPROF_RANGE("during"); }
  prof.stop();
  { TRAINPROF_RANGE("after"); }
  prof.start();
  { TRAINPROF_RANGE("second"); }
  prof.stop();
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 2u);
  auto first = test::count_by_name(test::read_run(runs[0]));
  auto second = test::count_by_name(test::read_run(runs[1]));
  EXPECT_EQ(first.count("before"), 0u);
  EXPECT_EQ(first["during"], 1u);
  EXPECT_EQ(first.count("after"), 0u);
  EXPECT_EQ(second.count("after"), 0u);
  EXPECT_EQ(second["second"], 1u);
}

TEST(Recording, WithoutCpuActivityOnlyStepsAreRecorded) {
  TempDir dir;
  ProfilerOptions o = options_in(dir);
  o.activities = {Activity::GPU};
  Profiler prof(o);
  { TRAINPROF_RANGE("host"); }
  prof.step();
  prof.stop();
  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  for (const auto& e : f.events) EXPECT_EQ(e.kind, raw::EventKind::kStep);
  EXPECT_EQ(f.events.size(), 2u);
}

TEST(Recording, ControlFromAnotherThreadWhileThreadsRecord) {
  TempDir dir;
  ProfilerOptions o = options_in(dir, 16);
  o.start_profile = false;
  o.flush_interval_ms = 5;
  o.schedule = Schedule{.wait = 1, .warmup = 1, .active = 2};
  Profiler prof(o);
  std::atomic<bool> done{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      while (!done.load()) {
        TRAINPROF_RANGE("busy");
        mark("tick");
      }
    });
  }
  std::thread control([&] {
    for (int round = 0; round < 3; ++round) {
      prof.start();
      for (int s = 0; s < 8; ++s) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        prof.step();
      }
      prof.stop();
    }
  });
  control.join();
  done = true;
  for (auto& w : workers) w.join();
  auto runs = test::run_dirs(dir.path());
  EXPECT_GE(runs.size(), 6u);  // two full cycles per round, plus partial ones
  for (const std::string& run : runs) {
    raw::RawFile f = test::read_run(run);
    EXPECT_TRUE(f.issues.empty()) << run;
    EXPECT_TRUE(f.closed_cleanly) << run;
    EXPECT_GT(f.events.size(), 0u) << run;
  }
}

// A writer wakes the flusher once an eighth of the buffer limit waits in full
// blocks (1 to 16 of them), not for every block: small buffers are woken for
// early, large ones in batches.
TEST(BlockPool, WakeBatchIsAnEighthOfTheLimitFromOneToSixteen) {
  core::BlockPool pool;
  ASSERT_TRUE(pool.set_budget(4, 1 << 20));
  EXPECT_EQ(pool.wake_batch(), 1u);
  ASSERT_TRUE(pool.set_budget(40, 1 << 20));
  EXPECT_EQ(pool.wake_batch(), 5u);
  ASSERT_TRUE(pool.set_budget(1024, 1 << 20));
  EXPECT_EQ(pool.wake_batch(), core::BlockPool::kMaxWakeBatch);
  ASSERT_TRUE(pool.set_budget(16, 1 << 20));
  pool.set_thread_count(40);  // two blocks per thread raise the limit to 80
  EXPECT_EQ(pool.wake_batch(), 10u);
  ASSERT_TRUE(pool.set_budget(1024, 24));  // the cap wins over the budget
  pool.set_thread_count(1);
  EXPECT_EQ(pool.wake_batch(), 3u);
}

// Under sustained recording, full blocks reach the disk long before the
// flush interval (here a minute): a crash loses little, and the buffer's
// memory is reused instead of filling up.
TEST(Recording, FullBlocksAreWrittenWithoutWaitingForTheFlushInterval) {
  TempDir dir;
  ProfilerOptions o = options_in(dir, 64);  // 1024 blocks: a wake per 16 full ones
  o.flush_interval_ms = 60'000;
  Profiler prof(o);
  const std::string raw_path = prof.current_run_dir() + "/raw/host.tpraw";
  struct stat before {};
  ASSERT_EQ(stat(raw_path.c_str(), &before), 0) << raw_path;
  // 40 blocks' worth of events: enough for two wakes.
  for (uint32_t i = 0; i < 40 * core::kEventsPerBlock; ++i) TRAINPROF_RANGE("sustained");
  off_t written = before.st_size;
  for (int waited_ms = 0; waited_ms < 10'000 && written == before.st_size; waited_ms += 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    struct stat now {};
    ASSERT_EQ(stat(raw_path.c_str(), &now), 0);
    written = now.st_size;
  }
  // At 5 bytes an event, 16 blocks are more than 100 KiB.
  EXPECT_GT(written - before.st_size, 100 * 1024) << "nothing written before the interval";
  prof.stop();
  EXPECT_EQ(prof.last_run().events_dropped, 0u);
}

}  // namespace
}  // namespace trainprof
