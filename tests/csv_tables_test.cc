// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Every column of every CSV table the analysis and the cluster write
// (export/csv_tables.h), from rows whose fields each hold a different value, so
// that a column written from the wrong field, in the wrong place or in the
// wrong unit shows; and dataset.csv from data stages whose statistics are
// worked out by hand. The passes that fill the rows have known-answer tests of
// their own (analysis_test.cc, cluster_test.cc).
#include "exporter/csv_tables.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/safe_file.h"
#include "raw/format.h"
#include "test_util.h"

namespace trainprof::exporter {
namespace {

// A table written into a fresh directory, as the analysis writes it.
class Table {
 public:
  Table() : fd_(base::open_directory_at(AT_FDCWD, dir_.path())) {}
  OutputPath path(const std::string& name) const { return {fd_.get(), dir_.path(), name}; }
  std::string text(const std::string& name) const { return test::read_text(dir_.sub(name)); }

 private:
  test::TempDir dir_;
  base::UniqueFd fd_;
};

TEST(CsvTables, OpStatisticColumns) {
  analysis::OpStatisticRow r;
  r.name = "conv, \"3x3\"";
  r.core_type = "GPU";
  r.count = 4;
  r.total_ns = 10'000'003;  // average: 10'000'003 / 4 = 2'500'000 ns (whole ns)
  r.min_ns = 1'000'001;
  r.max_ns = 4'000'002;
  r.self_ns = 9;  // not a column
  r.ratio_percent = 62.5;
  r.flops = 123'456'789;
  Table t;
  ASSERT_EQ(write_op_statistic({r}, t.path("op_statistic.csv")), "");
  EXPECT_EQ(t.text("op_statistic.csv"),
            "OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),Ratio(%),"
            "Total FLOPs\r\n"
            "\"conv, \"\"3x3\"\"\",GPU,4,10000.003,2500.000,1000.001,4000.002,62.500,123456789\r\n");
}

TEST(CsvTables, OperatorDetailsColumns) {
  analysis::OperatorDetailRow r;
  r.name = "aten::addmm";
  r.input_shapes = "[[2, 3], [3, 4]]";
  r.call_stack = "train.py(10): step;model.py(5): forward";
  r.calls = 3;
  r.host_self_ns = 1'500'000;
  r.host_total_ns = 2'000'001;
  r.flops = 48;
  r.module_hierarchy = "Net.fc1";
  r.device_self_ns = 700'002;
  r.device_total_ns = 900'003;
  Table t;
  ASSERT_EQ(write_operator_details({r}, t.path("operator_details.csv")), "");
  EXPECT_EQ(t.text("operator_details.csv"),
            "Name,Input Shapes,Call Stack,Host Self Duration(us),Host Total Duration(us),"
            "Device Self Duration(us),Device Total Duration(us),Calls,Total FLOPs,Module Hierarchy\r\n"
            "aten::addmm,\"[[2, 3], [3, 4]]\",train.py(10): step;model.py(5): forward,1500.000,2000.001,"
            "700.002,900.003,3,48,Net.fc1\r\n");
}

TEST(CsvTables, KernelDetailsColumns) {
  analysis::KernelRow k;
  k.step = 2;
  k.device = 1;
  k.stream = 7;
  k.name = "void k<float>(int, int)";
  k.type = "aten::mm";
  k.input_shapes = "[[4, 4]]";
  k.input_types = "float";
  k.start_ns = 1'000'000;
  k.dur_ns = 12'345;
  k.wait_ns = 1'001;
  k.blocks = 64;
  k.grid = "8,8,1";
  k.block = "128,1,1";
  k.registers = 32;
  k.static_shared = 1024;
  k.dynamic_shared = 512;
  k.correlation = 99;
  k.launch_api = "cudaLaunchKernel";
  k.launch_ns = 999'000;
  k.launch_thread = 4242;
  k.graph = 3;
  k.graph_node = 1ull << 40;
  k.capture_operator = "aten::mm";
  analysis::KernelRow unknown;  // no step, device, launch, launching thread or graph
  unknown.name = "k2";
  unknown.start_ns = 2'000'000;
  unknown.dur_ns = 1;
  Table t;
  // Times are wall clock: monotonic + the run's offset (5 s here).
  ASSERT_EQ(write_kernel_details({k, unknown}, 5'000'000'000, t.path("kernel_details.csv")), "");
  EXPECT_EQ(
      t.text("kernel_details.csv"),
      "Step Id,Device Id,Stream Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
      "Wait Time(us),Block Num,Input Shapes,Input Data Types,Grid,Block,Registers Per Thread,"
      "Static Shared Memory(B),Dynamic Shared Memory(B),Correlation Id,Launch API,Launch Time(us),"
      "Launch Thread,Graph Id,Graph Node Id,Capture Operator\r\n"
      "2,1,7,\"void k<float>(int, int)\",aten::mm,GPU,5001000.000,12.345,1.001,64,\"[[4, 4]]\",float,"
      "\"8,8,1\",\"128,1,1\",32,1024,512,99,cudaLaunchKernel,5000999.000,4242,3,1099511627776,aten::mm\r\n"
      ",,0,k2,,GPU,5002000.000,0.001,0.000,0,,,,,0,0,0,0,,,,,,\r\n");
}

TEST(CsvTables, StepTraceTimeColumns) {
  analysis::StepTraceRow r;
  r.step = 3;
  r.computing_ns = 1'000'001;
  r.communication_not_overlapped_ns = 2'000'002;
  r.overlapped_ns = 3'000'003;
  r.communication_ns = 4'000'004;
  r.free_ns = 5'000'005;
  r.stage_ns = 6'000'006;
  r.bubble_ns = 7'000'007;
  r.communication_not_overlapped_exclude_receive_ns = 8'000'008;
  r.preparing_ns = 9'000'009;
  r.data_wait_ns = 10'000'010;
  r.step_ns = 11;  // not a column
  Table t;
  ASSERT_EQ(write_step_trace_time({r}, t.path("step_trace_time.csv")), "");
  EXPECT_EQ(
      t.text("step_trace_time.csv"),
      "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
      "Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\r\n"
      "3,1000.001,2000.002,3000.003,4000.004,5000.005,6000.006,7000.007,8000.008,9000.009,10000.010\r\n");
}

// Two ranks' summaries: rank 1 has steps 4 and 5, rank 0 step 5 only.
std::vector<analysis::RankSummary> two_ranks() {
  std::vector<analysis::RankSummary> ranks(2);
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank].rank = rank;
    for (int64_t step : {5, 4}) {
      if (rank == 0 && step == 4) continue;
      analysis::RankStep st;
      analysis::StepTraceRow& r = st.row;
      r.step = step;
      // Field f of (rank, step): f ms + rank us + step ns, all different.
      auto v = [&](uint64_t f) { return f * 1'000'000 + static_cast<uint64_t>(rank) * 1000 + step; };
      r.computing_ns = v(1), r.communication_not_overlapped_ns = v(2), r.overlapped_ns = v(3);
      r.communication_ns = v(4), r.free_ns = v(5), r.stage_ns = v(6), r.bubble_ns = v(7);
      r.communication_not_overlapped_exclude_receive_ns = v(8), r.preparing_ns = v(9), r.data_wait_ns = v(10);
      ranks[rank].steps.push_back(st);
    }
  }
  return ranks;
}

TEST(CsvTables, ClusterStepTraceHasARowPerStepAndRankInThatOrder) {
  EXPECT_EQ(cluster_step_trace_csv(two_ranks()),
            "Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
            "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\n"
            "4,rank,1,1001.004,2001.004,3001.004,4001.004,5001.004,6001.004,7001.004,8001.004,9001.004,"
            "10001.004\n"
            "5,rank,0,1000.005,2000.005,3000.005,4000.005,5000.005,6000.005,7000.005,8000.005,9000.005,"
            "10000.005\n"
            "5,rank,1,1001.005,2001.005,3001.005,4001.005,5001.005,6001.005,7001.005,8001.005,9001.005,"
            "10001.005\n");
}

TEST(CsvTables, MsprofStepTraceStartsWithTheRankAsDevice) {
  EXPECT_EQ(
      msprof_step_trace_csv(two_ranks()[1]),
      "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
      "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing,Data Wait\n"
      "1,5,1001.005,2001.005,3001.005,4001.005,5001.005,6001.005,7001.005,8001.005,9001.005,10001.005\n"
      "1,4,1001.004,2001.004,3001.004,4001.004,5001.004,6001.004,7001.004,8001.004,9001.004,10001.004\n");
}

constexpr uint64_t kMiB = 1024 * 1024;

TEST(CsvTables, MemoryRecordColumns) {
  analysis::TraceModel m;
  m.realtime_offset_ns = 1'000'000'000;  // wall = monotonic + 1 s
  const uint32_t cuda0 = static_cast<uint32_t>(raw::memory_device(1, 0));
  const uint32_t cpu = static_cast<uint32_t>(raw::memory_device(0, -1));
  const uint32_t driver = static_cast<uint32_t>(raw::memory_device(1, 1) | raw::kMemoryFromDriver);
  m.memory = {{2'000'000, 0x10, 1024, 1 * kMiB, 3 * kMiB, 1, cuda0},
              {2'500'001, 0x20, 512, kMiB / 2, 3 * kMiB / 2, 1, cpu},
              {3'000'000, 0x30, 4096, 5 * kMiB / 4, 2 * kMiB, 1, driver}};
  Table t;
  ASSERT_EQ(write_memory_record(m, t.path("memory_record.csv")), "");
  // Active is the allocated total (what a caching allocator's blocks in use hold).
  EXPECT_EQ(t.text("memory_record.csv"),
            "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),Device Type\r\n"
            "LibTorch,1002000.000,1.000000,3.000000,1.000000,CUDA:0\r\n"
            "LibTorch,1002500.001,0.500000,1.500000,0.500000,CPU\r\n"
            "CUDA driver,1003000.000,1.250000,2.000000,1.250000,CUDA:1 driver\r\n");
}

TEST(CsvTables, OperatorMemoryColumns) {
  analysis::TraceModel m;
  m.realtime_offset_ns = 1'000'000'000;
  m.strings = {"", "aten::empty", "aten::add"};
  const uint32_t cuda0 = static_cast<uint32_t>(raw::memory_device(1, 0));
  analysis::MemoryMatch match;
  analysis::OperatorMemoryRow freed;
  freed.name = 1;
  freed.device = cuda0;
  freed.bytes = 1536;  // 1.5 KB
  freed.alloc_ns = 3'000'000;
  freed.alloc_total_allocated = 2 * kMiB;
  freed.alloc_total_reserved = 4 * kMiB;
  freed.released = true;
  freed.release_ns = 5'500'001;
  freed.release_total_allocated = kMiB / 4;
  freed.release_total_reserved = 3 * kMiB;
  analysis::OperatorMemoryRow held;  // never freed in the run
  held.name = 2;
  held.device = static_cast<uint32_t>(raw::memory_device(0, -1));
  held.bytes = 100;
  held.alloc_ns = 6'000'000;
  held.alloc_total_allocated = kMiB;
  held.alloc_total_reserved = kMiB;
  match.rows = {freed, held};
  Table t;
  ASSERT_EQ(write_operator_memory(m, match, t.path("operator_memory.csv")), "");
  EXPECT_EQ(
      t.text("operator_memory.csv"),
      // MindSpore's header, column for column.
      "Name,Size(KB),Allocation Time(us),Release Time(us),Active Release Time(us),Duration(us),"
      "Active Duration(us),Allocation Total Allocated(MB),Allocation Total Reserved(MB),"
      "Allocation Total Active(MB),Release Total Allocated(MB),Release Total Reserved(MB),"
      "Release Total Active(MB),Stream Ptr,Device Type\r\n"
      "aten::empty,1.500,1003000.000,1005500.001,,2500.001,,2.000000,4.000000,2.000000,0.250000,3.000000,"
      "0.250000,,CUDA:0\r\n"
      "aten::add,0.098,1006000.000,,,,,1.000000,1.000000,1.000000,,,,,CPU\r\n");
}

TEST(CsvTables, HostUsageColumnsLeaveAMissingValueEmpty) {
  analysis::HostUsageTable table{
      "host_cpu_usage.csv", {"Host CPU (%)", "Process CPU (%)"}, {1000, 2'000'500}, {}};
  table.values = {{12.5, std::nan("")}, {100.0 / 3, 0}};
  Table t;
  ASSERT_EQ(write_host_usage(table, 1'000'000'000, t.path("host_cpu_usage.csv")), "");
  EXPECT_EQ(t.text("host_cpu_usage.csv"),
            "Timestamp(us),Host CPU (%),Process CPU (%)\r\n"
            "1000001.000,12.500,\r\n"
            "1002000.500,33.333,0.000\r\n");
}

// dataset.csv from data stages: per (operation, stage), the occurrences,
// the average (whole ns), and the custom info of the latest stage that had
// one; rows in pipeline order, then by total, largest first.
TEST(CsvTables, DatasetStatisticsFromStagesWorkedOutByHand) {
  analysis::TraceModel m;
  m.strings = {"",      "MyDataset", "dataset",    "workers=1", "workers=2", "Resize",   "transform",
               "Stack", "collate",   "DataLoader", "wait",      "Prefetch",  "prefetch", "BigDataset"};
  m.data_stages = {
      // MyDataset: 2000 + 1000 + 3001 = 6001 ns in 3; the info of the latest (t = 30).
      {30, 2000, 2, 1, 2, 4},
      {10, 1000, 1, 1, 2, 3},  // the latest in the list, not in time
      {20, 3001, 1, 1, 2, 0},
      // BigDataset, also a dataset stage, but 7000 ns in total: before MyDataset.
      {40, 7000, 1, 13, 2, 0},
      // Resize: 4 x 250 = 1000 ns.
      {50, 250, 1, 5, 6, 0},
      {60, 250, 1, 5, 6, 0},
      {70, 250, 1, 5, 6, 0},
      {80, 250, 1, 5, 6, 0},
      {90, 500, 1, 7, 8, 0},     // Stack: collate, 500 ns
      {100, 7000, 3, 9, 10, 0},  // DataLoader: wait 2 x 7000
      {200, 7000, 3, 9, 10, 0},
      {5, 100'000, 1, 11, 12, 0},  // a stage of the user's own: last, whatever its total
  };
  Table t;
  ASSERT_EQ(write_dataset(analysis::dataset_statistics(m), t.path("dataset.csv")), "");
  EXPECT_EQ(t.text("dataset.csv"),
            // MindSpore's header, its space in "Avg. time (us)" included.
            "Operation,Stage,Occurrences,Avg. time (us),Custom Info\r\n"
            "BigDataset,dataset,1,7.000,\r\n"
            "MyDataset,dataset,3,2.000,workers=2\r\n"
            "Resize,transform,4,0.250,\r\n"
            "Stack,collate,1,0.500,\r\n"
            "DataLoader,wait,2,7.000,\r\n"
            "Prefetch,prefetch,1,100.000,\r\n");
}

}  // namespace
}  // namespace trainprof::exporter
