// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The critical path of a step (analysis/ critical_path.h) on models made by
// hand: a synchronization hands the path to the device activity it waited for,
// an activity to its launch or to the one before it on its stream, a launch to
// the thread that made it; waits for data and communication are their own
// kinds; the segments cover the step exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/critical_path.h"
#include "analysis/timeline.h"
#include "analysis/trace_model.h"
#include "analysis/what_if.h"

namespace trainprof::analysis {
namespace {

GpuActivity kernel(uint32_t name, uint64_t start, uint64_t end, uint32_t stream, uint32_t correlation) {
  return GpuActivity{start, end, raw::EventKind::kGpuKernel, name, correlation, 0, 1, stream, 0, 0, 0, 0};
}

GpuActivity api(uint32_t name, uint64_t start, uint64_t end, uint32_t thread, uint32_t correlation) {
  return GpuActivity{start, end, raw::EventKind::kGpuApi, name, correlation, -1, 1, 0, 0, 0, 0, thread};
}

// One segment as text: "kind name [start, end) place".
std::string text(const TraceModel& m, const PathSegment& s) {
  std::string place =
      s.device >= 0 ? "stream " + std::to_string(s.stream) : "thread " + std::to_string(s.tid);
  return std::string(path_kind_name(s.kind)) + " " + m.name(s.name) + " [" + std::to_string(s.start_ns) +
         ", " + std::to_string(s.start_ns + s.dur_ns) + ") " + place;
}

std::vector<std::string> texts(const TraceModel& m, const std::vector<PathSegment>& path) {
  std::vector<std::string> out;
  uint64_t covered = 0;
  for (const PathSegment& s : path) {
    out.push_back(text(m, s));
    covered += s.dur_ns;
  }
  EXPECT_EQ(covered, 1000u) << "the segments cover the step";
  for (size_t i = 1; i < path.size(); ++i)
    EXPECT_EQ(path[i - 1].start_ns + path[i - 1].dur_ns, path[i].start_ns);
  return out;
}

enum Name : uint32_t {
  kStep = 1,
  kForward,
  kOptimizer,
  kItem,
  kBackwardOp,
  kLaunchApi,
  kSyncApi,
  kK1,
  kK2,
  kK3
};

// Step 0 is [0, 1000) on thread 1: "forward" [0, 300) launches K1 (runs
// [120, 500) on stream 7), "optimizer" [300, 400) launches K2 (queued behind
// K1: [500, 600)), "item" [400, 950) synchronizes the device [400, 905).
// With `autograd`, thread 2's "backward op" [550, 700) launches K3 on stream
// 9 at 650, which runs [700, 900): the last activity the sync waited for.
TraceModel gpu_step(bool autograd) {
  TraceModel m;
  m.strings = {"",
               "ProfilerStep#0",
               "forward",
               "optimizer",
               "item",
               "backward op",
               "cudaLaunchKernel",
               "cudaDeviceSynchronize",
               "K1",
               "K2",
               "K3"};
  auto range = [&m](uint32_t tid, uint32_t name, uint64_t start, uint64_t end, bool step = false) {
    m.add_slice(make_slice(start, end - start, m.key_of({.tid = tid, .name = name, .is_step = step})));
  };
  range(1, kStep, 0, 1000, true);
  range(1, kForward, 0, 300);
  range(1, kOptimizer, 300, 400);
  range(1, kItem, 400, 950);
  m.gpu = {api(kLaunchApi, 100, 110, 1, 1), kernel(kK1, 120, 500, 7, 1), api(kLaunchApi, 350, 360, 1, 2),
           api(kSyncApi, 400, 905, 1, 4), kernel(kK2, 500, 600, 7, 2)};
  if (autograd) {
    range(2, kBackwardOp, 550, 700);
    m.gpu.push_back(api(kLaunchApi, 650, 660, 2, 3));
    m.gpu.push_back(kernel(kK3, 700, 900, 9, 3));
  }
  std::stable_sort(m.gpu.begin(), m.gpu.end(),
                   [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  m.steps = {{0, 0, 1000}};
  order_timeline(m);
  return m;
}

TEST(CriticalPath, ASyncLeadsToTheKernelItWaitedForAndItsLaunchingThread) {
  TraceModel m = gpu_step(/*autograd=*/true);
  std::vector<std::string> path = texts(m, critical_path(m));
  // K1 and K2 ended long before the sync returned: not on the path.
  EXPECT_EQ(path, (std::vector<std::string>{
                      "host forward [0, 300) thread 1",
                      "host optimizer [300, 400) thread 1",
                      "sync cudaDeviceSynchronize [400, 550) thread 1",  // before thread 2 began
                      "host backward op [550, 650) thread 2",
                      "launch cudaLaunchKernel [650, 700) thread 2",
                      "device K3 [700, 900) stream 9",
                      "sync cudaDeviceSynchronize [900, 905) thread 1",
                      "host item [905, 950) thread 1",
                      "host untracked  [950, 1000) thread 1",
                  }));
}

TEST(CriticalPath, AKernelQueuedBehindAnotherFollowsItsStream) {
  TraceModel m = gpu_step(/*autograd=*/false);
  std::vector<std::string> path = texts(m, critical_path(m));
  // K2 was launched at 350 but K1 held the stream until 500; K1 waited for
  // its own launch at 100.
  EXPECT_EQ(path, (std::vector<std::string>{
                      "host forward [0, 100) thread 1",
                      "launch cudaLaunchKernel [100, 120) thread 1",
                      "device K1 [120, 500) stream 7",
                      "device K2 [500, 600) stream 7",
                      "sync cudaDeviceSynchronize [600, 905) thread 1",
                      "host item [905, 950) thread 1",
                      "host untracked  [950, 1000) thread 1",
                  }));
  std::vector<PathShare> shares = path_shares(critical_path(m));
  ASSERT_FALSE(shares.empty());
  EXPECT_EQ(shares[0].kind, PathKind::kDevice);  // K1, 380 ns
  EXPECT_EQ(m.name(shares[0].name), "K1");
  EXPECT_EQ(shares[0].ns, 380u);
}

TEST(CriticalPath, DataWaitsAndCommunicationAreTheirOwnKinds) {
  TraceModel m;
  m.strings = {"",        "ProfilerStep#0", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               "compute", "MPI_Allreduce",  "loader",
               "wait",    "ProfilerStep#1"};
  auto range = [&m](uint32_t name, uint64_t start, uint64_t end, bool step = false) {
    m.add_slice(make_slice(start, end - start, m.key_of({.tid = 1, .name = name, .is_step = step})));
  };
  // Step 0: a DataLoader fetch, compute, an allreduce outside every range.
  range(1, 0, 1000, true);
  range(2, 0, 200);
  range(3, 200, 700);
  m.comm_calls.push_back(CommCall{700, 900, 8, 1, 4, 0, raw::kCommCollective, 0, -1, -1});
  // Step 1: a data stage "wait" inside compute.
  range(7, 1000, 2000, true);
  range(3, 1000, 2000);
  m.data_stages.push_back(DataStageSlice{1100, 300, 1, 5, 6, 0});
  m.steps = {{0, 0, 1000}, {1, 1000, 2000}};
  order_timeline(m);
  std::vector<PathSegment> path = critical_path(m);
  std::vector<std::string> all;
  for (const PathSegment& s : path) all.push_back(std::to_string(s.step) + " " + text(m, s));
  EXPECT_EQ(all,
            (std::vector<std::string>{
                "0 data wait enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ [0, 200) thread 1",
                "0 host compute [200, 700) thread 1",
                "0 communication MPI_Allreduce [700, 900) thread 1",
                "0 host untracked  [900, 1000) thread 1",
                "1 host compute [1000, 1100) thread 1",
                "1 data wait loader [1100, 1400) thread 1",
                "1 host compute [1400, 2000) thread 1",
            }));
}

// torch.distributed over Gloo: the step's thread calls c10d::allreduce_,
// which only queues the work, then waits outside every range while Gloo's
// thread runs it; the COMM is recorded on that thread from the call's start.
// `async`: the call was async_op=True (the caller goes on).
TraceModel gloo_step(bool async) {
  TraceModel m;
  m.strings = {"", "ProfilerStep#0", "work", "c10d::allreduce_", "allreduce", "c10d::broadcast_"};
  auto range = [&m](uint32_t tid, uint32_t name, uint64_t start, uint64_t end, bool step = false) {
    m.add_slice(make_slice(start, end - start, m.key_of({.tid = tid, .name = name, .is_step = step})));
  };
  range(1, 1, 0, 1000, true);
  range(1, 2, 0, 600);
  range(1, 3, 600, 610);  // the call; its COMM starts at the same time
  range(1, 5, 450, 460);  // another call at the time of nothing recorded
  uint32_t flags = raw::kCommCollective | (async ? raw::kCommCompletion : 0);
  m.comm_calls.push_back(
      CommCall{450, 980, 8, 5, 4, 0, raw::kCommCollective, 0, -1, -1});  // not the broadcast's
  m.comm_calls.push_back(CommCall{600, 950, 8, 5, 4, 0, flags, 1, -1, -1});
  m.steps = {{0, 0, 1000}};
  order_timeline(m);
  return m;
}

TEST(CriticalPath, AWaitForACollectiveRunOnAnotherThreadIsCommunicationOfTheCaller) {
  TraceModel m = gloo_step(false);
  EXPECT_EQ(texts(m, critical_path(m)), (std::vector<std::string>{
                                            "host work [0, 600) thread 1",
                                            "communication allreduce [600, 950) thread 1",
                                            "host untracked  [950, 1000) thread 1",
                                        }));
  WhatIf overlapped;
  overlapped.overlap_communication = true;
  std::vector<StepEstimate> steps = what_if(m, overlapped, "");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].estimated_ns, 650u);
  // An async_op=True call does not hold its caller: the wait is not its.
  m = gloo_step(true);
  EXPECT_EQ(texts(m, critical_path(m)), (std::vector<std::string>{
                                            "host work [0, 600) thread 1",
                                            "host c10d::allreduce_ [600, 610) thread 1",
                                            "host untracked  [610, 1000) thread 1",
                                        }));
}

TEST(CriticalPath, ARunOfSmallRangesIsOneRowAndItsGapsAnother) {
  TraceModel m;
  m.strings = {"", "ProfilerStep#0", "layer"};
  m.add_slice(make_slice(0, 1000, m.key_of({.tid = 1, .name = 1, .is_step = true})));
  for (uint64_t i = 0; i < 10; ++i) m.add_slice(make_slice(100 * i, 90, m.key_of({.tid = 1, .name = 2})));
  m.steps = {{0, 0, 1000}};
  order_timeline(m);
  std::vector<PathSegment> path = critical_path(m);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path[0].kind, PathKind::kHost);
  EXPECT_EQ(path[0].count, 10u);
  EXPECT_EQ(path[0].dur_ns, 900u);
  EXPECT_EQ(path[0].span_ns, 990u);
  EXPECT_EQ(path[1].kind, PathKind::kHostUntracked);
  EXPECT_EQ(path[1].count, 10u);  // nine gaps between, one after
  EXPECT_EQ(path[1].dur_ns, 100u);
}

// The re-timing, on the same steps: with no change every step keeps its
// length; a change moves the step's end by what the dependencies let through.
uint64_t estimate(const TraceModel& m, const WhatIf& change, const std::string& focus = "") {
  std::vector<StepEstimate> steps = what_if(m, change, focus);
  EXPECT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.empty() ? 0 : steps[0].recorded_ns, 1000u);
  return steps.empty() ? 0 : steps[0].estimated_ns;
}

WhatIf faster(const std::string& name, double k) {
  WhatIf w;
  w.faster = name;
  w.speedup = k;
  return w;
}

TEST(WhatIf, WithNoChangeEveryStepKeepsItsLength) {
  for (bool autograd : {true, false}) EXPECT_EQ(estimate(gpu_step(autograd), WhatIf{}), 1000u) << autograd;
}

TEST(WhatIf, AKernelOnThePathMovesTheStepsEndOneOffItDoesNot) {
  // K3 (200 ns, waited for by the sync) twice as fast: the sync returns 100
  // ns sooner. K1 (off the path, ends at 500) twice as fast: nothing.
  EXPECT_EQ(estimate(gpu_step(true), faster("K3", 2)), 900u);
  EXPECT_EQ(estimate(gpu_step(true), faster("K1", 2)), 1000u);
  // Without thread 2, K1 and K2 are the path. K1 twice as fast runs
  // [120, 310); K2, launched at 350, no longer queues: [350, 450); the sync
  // took 305 ns after K2 ended and still does: it returns at 755, 150 sooner.
  EXPECT_EQ(estimate(gpu_step(false), faster("K1", 2)), 850u);
  // "forward" twice as fast ends at 150 and launches K1 at 50 (K1: [70,
  // 450)); "optimizer" runs [150, 250) and launches K2 at 200, which queues
  // behind K1 until 450; the sync, from 250, returns 305 after K2's end (550).
  EXPECT_EQ(estimate(gpu_step(false), faster("forward", 2)), 950u);
}

TEST(WhatIf, DataWaitsCommunicationAndANestedOperator) {
  TraceModel m;
  m.strings = {"",        "ProfilerStep#0", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               "compute", "MPI_Allreduce",  "aten::mm"};
  auto range = [&m](uint32_t name, uint64_t start, uint64_t end, bool step = false) {
    m.add_slice(make_slice(start, end - start, m.key_of({.tid = 1, .name = name, .is_step = step})));
  };
  // A fetch [0, 200), compute [200, 700) holding aten::mm [300, 500), an
  // allreduce [700, 900), untracked [900, 1000).
  range(1, 0, 1000, true);
  range(2, 0, 200);
  range(3, 200, 700);
  range(5, 300, 500);
  m.comm_calls.push_back(CommCall{700, 900, 8, 1, 4, 0, raw::kCommCollective, 0, -1, -1});
  m.steps = {{0, 0, 1000}};
  order_timeline(m);
  WhatIf hidden;
  hidden.hide_data_wait = true;
  EXPECT_EQ(estimate(m, hidden), 800u);
  WhatIf overlapped;
  overlapped.overlap_communication = true;
  EXPECT_EQ(estimate(m, overlapped), 800u);
  hidden.overlap_communication = true;
  EXPECT_EQ(estimate(m, hidden), 600u);
  EXPECT_EQ(what_if_label(hidden), "data wait hidden, communication overlapped");
  // aten::mm is inside "compute": found only with it as the focus.
  EXPECT_EQ(estimate(m, faster("aten::mm", 2), "aten::mm"), 900u);
  EXPECT_EQ(estimate(m, faster("aten::mm", 4), "aten::mm"), 850u);
  EXPECT_EQ(estimate(m, faster("compute", 5)), 600u);
}

}  // namespace
}  // namespace trainprof::analysis
