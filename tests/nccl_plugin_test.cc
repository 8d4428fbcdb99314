// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// NCCL's profiler plugin interface driven as NCCL drives it, with synthetic
// events: collectives and point-to-point operations timed by their kernel
// channels on the GPU's clock become COMM events of the communicator's group.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collectors/nccl/nccl_profiler.h"
#include "raw/format.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using nccl::EventDescrV4;
using nccl::EventStateArgsV4;

constexpr uint64_t kMs = 1'000'000;

EventDescrV4 collective(const char* func, uint64_t seq, size_t count, const char* datatype) {
  EventDescrV4 d{};
  d.type = nccl::kProfileColl;
  d.coll.seq_number = seq;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.datatype = datatype;
  d.coll.root = -1;
  d.coll.algo = "Ring";
  d.coll.proto = "LL";
  return d;
}

// A channel of `parent` that ran on the GPU over [start, end] (globaltimer ns).
void run_channel(void* context, void* parent, uint8_t channel, uint64_t start, uint64_t end) {
  EventDescrV4 d{};
  d.type = nccl::kProfileKernelCh;
  d.parent = parent;
  d.kernel_ch.channel = channel;
  d.kernel_ch.ptimer = start;
  void* handle = nullptr;
  ASSERT_EQ(ncclProfiler_v4.start_event(context, &handle, &d), nccl::kSuccess);
  ASSERT_NE(handle, nullptr);
  EventStateArgsV4 args{};
  args.kernel_ch.ptimer = end;
  EXPECT_EQ(ncclProfiler_v4.record_event_state(handle, nccl::kKernelChStop, &args), nccl::kSuccess);
  EXPECT_EQ(ncclProfiler_v4.stop_event(handle), nccl::kSuccess);
}

// As NCCL calls it: the plugin's activation mask, an all-reduce enqueued
// (stopped) before its two channels ran on the GPU and reported one after
// the other (written once both ended, from the first start to the last end),
// a send with one channel (written, with its peer), a broadcast whose kernel
// was never timed (counted, not written), a channel whose parent is not the
// plugin's and calls on empty handles (ignored). The COMM events carry the
// communicator's group and NCCL's sequence number, the GPU times mapped to
// the host's clock, and kCommOnDevice; the group is recorded once.
TEST(NcclPlugin, OperationsTimedOnTheGpuBecomeCommEventsOfTheirCommunicator) {
  test::TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  EXPECT_STREQ(ncclProfiler_v4.name, "trainprof");
  void* context = nullptr;
  int mask = 0;
  ASSERT_EQ(ncclProfiler_v4.init(&context, &mask, "pg0", 0xabcull, 1, 1, 0, nullptr), nccl::kSuccess);
  ASSERT_NE(context, nullptr);
  EXPECT_EQ(mask, nccl::kProfileColl | nccl::kProfileP2p | nccl::kProfileKernelCh);  // a session records

  const uint64_t base = detail::realtime_now_ns() - 50 * kMs;  // the GPU ran these in the last 50 ms
  EventDescrV4 all_reduce = collective("AllReduce", 7, 1024, "ncclFloat32");
  all_reduce.coll.channels = 2;  // written once both have ended
  void* op = nullptr;
  ASSERT_EQ(ncclProfiler_v4.start_event(context, &op, &all_reduce), nccl::kSuccess);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(ncclProfiler_v4.stop_event(op), nccl::kSuccess);  // enqueued: the kernel's events come after
  run_channel(context, op, 0, base + 10 * kMs, base + 13 * kMs);
  run_channel(context, op, 1, base + 11 * kMs, base + 15 * kMs);

  EventDescrV4 send{};
  send.type = nccl::kProfileP2p;
  send.p2p.func = "Send";
  send.p2p.count = 100;
  send.p2p.datatype = "ncclBfloat16";
  send.p2p.peer = 0;
  void* p2p = nullptr;
  ASSERT_EQ(ncclProfiler_v4.start_event(context, &p2p, &send), nccl::kSuccess);
  run_channel(context, p2p, 0, base + 20 * kMs, base + 21 * kMs);
  EXPECT_EQ(ncclProfiler_v4.stop_event(p2p), nccl::kSuccess);

  EventDescrV4 broadcast = collective("Broadcast", 8, 10, "ncclInt8");
  void* untimed = nullptr;
  ASSERT_EQ(ncclProfiler_v4.start_event(context, &untimed, &broadcast), nccl::kSuccess);
  EXPECT_EQ(ncclProfiler_v4.stop_event(untimed), nccl::kSuccess);

  int not_ours = 0;
  EventDescrV4 stray{};
  stray.type = nccl::kProfileKernelCh;
  stray.parent = &not_ours;
  void* none = &not_ours;
  EXPECT_EQ(ncclProfiler_v4.start_event(context, &none, &stray), nccl::kSuccess);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(ncclProfiler_v4.stop_event(nullptr), nccl::kSuccess);
  EXPECT_EQ(ncclProfiler_v4.record_event_state(nullptr, nccl::kKernelChStop, nullptr), nccl::kSuccess);
  EventDescrV4 group{};
  group.type = nccl::kProfileGroup;  // not asked for: no handle
  void* group_handle = &not_ours;
  EXPECT_EQ(ncclProfiler_v4.start_event(context, &group_handle, &group), nccl::kSuccess);
  EXPECT_EQ(group_handle, nullptr);
  prof.stop();
  EXPECT_EQ(mask, 0) << "nothing is asked of NCCL while no session records";
  {
    Profiler again(o);
    EXPECT_EQ(mask, nccl::kProfileColl | nccl::kProfileP2p | nccl::kProfileKernelCh);
  }
  EXPECT_EQ(ncclProfiler_v4.finalize(context), nccl::kSuccess);
  void* later = nullptr;
  int later_mask = -1;
  ASSERT_EQ(ncclProfiler_v4.init(&later, &later_mask, "", 1, 1, 1, 0, nullptr), nccl::kSuccess);
  EXPECT_EQ(later_mask, 0) << "a communicator made while nothing records";
  EXPECT_EQ(ncclProfiler_v4.finalize(later), nccl::kSuccess);

  raw::RawFile f = test::read_run(prof.last_run().run_dir);
  std::vector<const raw::RawEvent*> comms;
  int groups = 0;
  for (const raw::RawEvent& e : f.events) {
    if (e.kind == raw::EventKind::kComm) comms.push_back(&e);
    if (e.kind == raw::EventKind::kCommGroup) {
      ++groups;
      EXPECT_EQ(f.name(e.name_id), std::string("nccl:0000000000000abc") + raw::kCommGroupSeparator + "0" +
                                       raw::kCommGroupSeparator + "NCCL pg0");
    }
  }
  EXPECT_EQ(groups, 1);
  ASSERT_EQ(comms.size(), 2u);
  const raw::RawEvent& ar = *comms[0];
  EXPECT_EQ(f.name(ar.name_id), std::string("AllReduce") + raw::kCommNameSeparator + "Ring" +
                                    raw::kCommNameSeparator + "LL");  // NCCL's algorithm and protocol
  EXPECT_EQ(ar.a, raw::kCommCollective | raw::kCommOnDevice);
  EXPECT_EQ(ar.b, 8u);  // sequence 7, + 1
  EXPECT_EQ(ar.comm_bytes, 4096u);
  EXPECT_EQ(f.name(ar.comm_group), "nccl:0000000000000abc");
  EXPECT_NEAR(static_cast<double>(ar.t1_ns - ar.t0_ns), 5e6, 0.05e6);  // 10 ms to 15 ms
  const raw::RawEvent& sent = *comms[1];
  EXPECT_EQ(f.name(sent.name_id), "Send");
  EXPECT_EQ(sent.a, raw::kCommSend | raw::kCommOnDevice);
  EXPECT_EQ(sent.comm_bytes, 200u);
  EXPECT_EQ(sent.comm_peer, 0);
  EXPECT_NEAR(static_cast<double>(sent.t0_ns) - static_cast<double>(ar.t0_ns), 10e6, 0.05e6);

  AnalyseReport report = analyse(prof.last_run().run_dir);
  ASSERT_TRUE(report.error.empty()) << report.error;
  nlohmann::json info =
      nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/PROFILER_OUTPUT/profiler_info.json"));
  const nlohmann::json& plugin = info["collectors"]["nccl"];
  EXPECT_EQ(plugin["operations_not_timed_yet"].get<int>(), 1) << plugin.dump();  // the broadcast
  EXPECT_GE(plugin["operations_written"].get<int>(), 2) << plugin.dump();
  // The timeline names the operation alone, with NCCL's choice beside it.
  nlohmann::json trace =
      nlohmann::json::parse(test::read_text(prof.last_run().run_dir + "/PROFILER_OUTPUT/trace_view.json"));
  int all_reduces = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "communication") continue;
    if (e["name"] == "AllReduce") {
      ++all_reduces;
      EXPECT_EQ(e["args"]["Algorithm"], "Ring") << e.dump();
      EXPECT_EQ(e["args"]["Protocol"], "LL") << e.dump();
      EXPECT_EQ(e["args"]["Sequence"], 7) << e.dump();
    } else {
      EXPECT_EQ(e["name"], "Send") << e.dump();
      EXPECT_FALSE(e["args"].contains("Algorithm")) << e.dump();
    }
  }
  EXPECT_EQ(all_reduces, 1);
}

// Two ranks (processes) of one NCCL communicator, whose three all-reduces
// all end together on the GPU while rank 1's kernels start 10 ms late: the
// cluster pass matches them by (communicator, NCCL sequence) as it matches
// MPI and Gloo calls, and rank 0 waited 10 ms at each.
TEST(NcclPlugin, RanksCollectivesAreMatchedByCommunicatorAndSequence) {
  test::TempDir dir;
  const uint64_t base = detail::realtime_now_ns() + 300 * kMs;  // both ranks record by then
  std::vector<test::Child> ranks;
  for (int rank : {0, 1}) {
    ranks.push_back(test::spawn({test::helper_path("nccl_rank_child"), dir.path(), std::to_string(rank), "2",
                                 std::to_string(base), rank == 1 ? "10" : "0"}));
  }
  for (test::Child& c : ranks) {
    int status = test::wait_status(c);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << c.first_line;
  }
  ClusterReport report = cluster(dir.path());
  ASSERT_TRUE(report.ok()) << report.error;
  nlohmann::json j = nlohmann::json::parse(test::read_text(report.output_dir + "/cluster_analysis.json"));
  EXPECT_EQ(j["world_size"], 2) << j.dump();
  EXPECT_EQ(j["collectives_matched"], 3) << j.dump();
  EXPECT_EQ(j["collectives_unmatched"], 0) << j.dump();
  for (const nlohmann::json& r : j["per_rank"]) {
    double waited_ms = r["waited_ns"].get<double>() / 1e6;
    if (r["rank"] == 0) {
      EXPECT_NEAR(waited_ms, 30.0, 1.0) << r.dump();  // 10 ms at each of three
    } else {
      EXPECT_NEAR(waited_ms, 0.0, 1.0) << r.dump();
      EXPECT_EQ(r["arrived_last"], 3) << r.dump();
    }
  }
}

TEST(NcclPlugin, DatatypeSizes) {
  EXPECT_EQ(nccl::datatype_bytes("ncclFloat32"), 4u);
  EXPECT_EQ(nccl::datatype_bytes("ncclBfloat16"), 2u);
  EXPECT_EQ(nccl::datatype_bytes("ncclUint64"), 8u);
  EXPECT_EQ(nccl::datatype_bytes("ncclSomethingNew"), 0u);
  EXPECT_EQ(nccl::datatype_bytes(nullptr), 0u);
}

}  // namespace
}  // namespace trainprof
