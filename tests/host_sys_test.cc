// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Host system usage (host_sys): the /proc parsers on real and damaged texts, a
// run that samples the host into counters and host_*_usage.csv, the summary's
// verdict on a step that saturated the CPU, and no sampler without the option.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/safe_file.h"
#include "collectors/system/proc_stats.h"
#include "exporter/csv_reader.h"
#include "raw/host_counters.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using test::TempDir;

// ---- parsers ----

TEST(ProcStats, CpuLinesOfProcStat) {
  const char* text =
      "cpu  100 5 50 1000 20 3 2 1 0 0\n"
      "cpu0 60 5 30 400 10 2 1 1 0 0\n"
      "cpu1 40 0 20 600 10 1 1 0 0 0\n"
      "intr 12345 0 0\n";
  system::CpuTicks all;
  std::vector<system::CpuTicks> cores;
  ASSERT_TRUE(system::parse_proc_stat(text, &all, &cores));
  EXPECT_EQ(all.busy, 100u + 5 + 50 + 3 + 2 + 1);
  EXPECT_EQ(all.total, all.busy + 1000 + 20);
  ASSERT_EQ(cores.size(), 2u);
  EXPECT_EQ(cores[1].busy, 40u + 20 + 1 + 1);
  // Cut by the reader in the middle of cpu1: cpu0 stands, cpu1 does not.
  ASSERT_TRUE(system::parse_proc_stat("cpu  1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 2", &all, &cores));
  EXPECT_EQ(cores.size(), 1u);
  for (const char* bad :
       {"", "intr 1 2 3\n", "cpu  1 2 x 4 5 6 7 8\n", "cpu  99999999999999999999999 1 1 1 1 1 1 1\n"})
    EXPECT_FALSE(system::parse_proc_stat(bad, &all, &cores)) << bad;
}

TEST(ProcStats, ProcessTicksAfterACommandNameWithSpacesAndParentheses) {
  uint64_t ticks = 0;
  ASSERT_TRUE(system::parse_process_cpu_ticks(
      "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 100 0 0\n", &ticks));
  EXPECT_EQ(ticks, 325u);
  EXPECT_FALSE(system::parse_process_cpu_ticks("4242 (x) S 1 2 3", &ticks));
  EXPECT_FALSE(system::parse_process_cpu_ticks("no parenthesis at all", &ticks));
}

TEST(ProcStats, MeminfoAndStatm) {
  system::MemInfo m;
  ASSERT_TRUE(
      system::parse_meminfo("MemTotal:       16000 kB\nMemFree:  10 kB\nMemAvailable:   12000 kB\n", &m));
  EXPECT_EQ(m.total_kib, 16000u);
  EXPECT_EQ(m.available_kib, 12000u);
  EXPECT_FALSE(system::parse_meminfo("MemTotal: 16000 kB\n", &m));                    // no MemAvailable
  EXPECT_FALSE(system::parse_meminfo("MemTotal: 10 kB\nMemAvailable: 20 kB\n", &m));  // inconsistent
  uint64_t pages = 0;
  ASSERT_TRUE(system::parse_statm_resident_pages("1000 250 30 1 0 400 0\n", &pages));
  EXPECT_EQ(pages, 250u);
  EXPECT_FALSE(system::parse_statm_resident_pages("1000", &pages));
}

TEST(ProcStats, DiskstatsCountWholeDisksOnce) {
  const char* text =
      "   8       0 sda 10 0 100 0 20 0 200 0 0 0 0\n"
      "   8       1 sda1 5 0 60 0 10 0 150 0 0 0 0\n"
      " 259       0 nvme0n1 1 0 1000 0 2 0 2000 0 0 0 0\n"
      " 259       1 nvme0n1p1 1 0 999 0 2 0 1999 0 0 0 0\n"
      "   7       0 loop0 1 0 77 0 1 0 77 0 0 0 0\n"
      " 253       0 dm-0 1 0 88 0 1 0 88 0 0 0 0\n"
      " 254       0 vda 1 0 7 0 1 0 9 0 0 0 0\n";
  system::DiskBytes b;
  ASSERT_TRUE(system::parse_diskstats(text, &b));
  EXPECT_EQ(b.read, (100u + 1000 + 7) * 512);
  EXPECT_EQ(b.written, (200u + 2000 + 9) * 512);
  EXPECT_FALSE(system::parse_diskstats("   7 0 loop0 1 0 77 0 1 0 77\n", &b));  // only virtual devices
  EXPECT_FALSE(system::parse_diskstats("garbage\n\n", &b));
}

TEST(ProcStats, NetDevLeavesOutLoopback) {
  const char* text =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo "
      "colls carrier "
      "compressed\n"
      "    lo:    9801      87    0    0    0     0          0         0     9801      87    0    0    0     "
      "0       0 0\n"
      "  eth0:28104467004  520171    0    0    0     0          0         0 23767538  339596    0    0    0  "
      "   0 0 0\n"
      "  eth1: 100 1 0 0 0 0 0 0 50 1 0 0 0 0 0 0\n";
  system::NetBytes b;
  ASSERT_TRUE(system::parse_net_dev(text, &b));
  EXPECT_EQ(b.received, 28104467004u + 100);
  EXPECT_EQ(b.sent, 23767538u + 50);
  EXPECT_FALSE(system::parse_net_dev("    lo: 1 2 3 4 5 6 7 8 9\n", &b));
}

// ---- a sampled run ----

ProfilerOptions host_options(const TempDir& dir) {
  ProfilerOptions o;
  o.output_path = dir.path();
  o.buffer_mb = 4;
  o.host_sys = {HostSystem::Cpu, HostSystem::Mem, HostSystem::Disk, HostSystem::Network};
  o.host_sys_interval_ms = 20;
  return o;
}

std::string analysed_output(const std::string& run) {
  AnalyseReport report = analyse(run);
  EXPECT_EQ(report.runs.size(), 1u);
  EXPECT_TRUE(report.runs.empty() || report.runs[0].ok) << (report.runs.empty() ? "" : report.runs[0].error);
  return run + "/PROFILER_OUTPUT";
}

std::vector<std::vector<std::string>> csv(const std::string& path) {
  return exporter::read_csv_file(path);
}

size_t column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

TEST(HostSys, ARunSamplesTheHostIntoCountersAndFourTables) {
  TempDir dir;
  auto started = std::chrono::steady_clock::now();
  {
    Profiler prof(host_options(dir));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    prof.stop();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  std::string out = analysed_output(runs[0]);

  auto cpu = csv(out + "/host_cpu_usage.csv");
  ASSERT_GE(cpu.size(), 3u);  // header and the rows of at least two samples (rates need two)
  EXPECT_LE(cpu.size() - 1, static_cast<size_t>(seconds / 0.020) + 2);  // never more often than asked
  EXPECT_EQ(cpu[0][0], "Timestamp(us)");
  size_t total = column(cpu[0], raw::kHostCpuCounter), process = column(cpu[0], raw::kProcessCpuCounter);
  size_t cores = std::thread::hardware_concurrency();
  EXPECT_EQ(cpu[0].size(), 3 + cores);
  EXPECT_EQ(cpu[0].back(), std::string(raw::kHostCpuCorePrefix) + std::to_string(cores - 1) + " (%)");
  double previous_ts = 0;
  for (size_t r = 1; r < cpu.size(); ++r) {
    double ts = std::stod(cpu[r][0]);
    EXPECT_GT(ts, previous_ts);
    previous_ts = ts;
    for (size_t c = 1; c < cpu[r].size(); ++c) {
      if (c == process) continue;  // 100 per busy core
      double v = std::stod(cpu[r][c]);
      EXPECT_GE(v, 0);
      EXPECT_LE(v, 100);
    }
    EXPECT_GE(std::stod(cpu[r][total]), 0);
  }

  auto mem = csv(out + "/host_mem_usage.csv");
  ASSERT_GE(mem.size(), 2u);
  size_t used = column(mem[0], raw::kHostMemoryUsedCounter),
         all = column(mem[0], raw::kHostMemoryTotalCounter);
  size_t rss = column(mem[0], raw::kProcessRssCounter);
  for (size_t r = 1; r < mem.size(); ++r) {
    EXPECT_LE(std::stod(mem[r][used]), std::stod(mem[r][all]));
    EXPECT_GT(std::stod(mem[r][rss]), 1);  // this test binary alone is more than a MiB
  }
  // Disks and networks where this machine has them (the parsers say so).
  system::DiskBytes disk;
  if (system::parse_diskstats(base::read_regular_file_at(AT_FDCWD, "/proc/diskstats", true), &disk)) {
    auto rows = csv(out + "/host_disk_usage.csv");
    ASSERT_GE(rows.size(), 2u);
    EXPECT_EQ(rows[0],
              (std::vector<std::string>{"Timestamp(us)", raw::kDiskReadCounter, raw::kDiskWriteCounter}));
  }
  system::NetBytes net;
  if (system::parse_net_dev(base::read_regular_file_at(AT_FDCWD, "/proc/net/dev", true), &net)) {
    auto rows = csv(out + "/host_network_usage.csv");
    ASSERT_GE(rows.size(), 2u);
    for (size_t r = 1; r < rows.size(); ++r) EXPECT_GE(std::stod(rows[r][1]), 0);
  }
  // The timeline's counter tracks, on the sampler's thread.
  nlohmann::json trace = nlohmann::json::parse(test::read_text(out + "/trace_view.json"));
  std::set<std::string> counters;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "C") counters.insert(e.value("name", ""));
  EXPECT_TRUE(counters.count(raw::kHostCpuCounter) && counters.count(raw::kProcessRssCounter));
}

TEST(HostSys, AStepThatSaturatesTheCpuIsNamedInTheSummary) {
  TempDir dir;
  {
    ProfilerOptions o = host_options(dir);
    o.host_sys = {HostSystem::Cpu};
    o.data_process = true;
    Profiler prof(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    prof.step();  // step 0: idle
    std::atomic<bool> stop{false};
    std::vector<std::thread> burners;
    for (unsigned i = 0; i < std::thread::hardware_concurrency(); ++i) {
      burners.emplace_back([&] {
        volatile uint64_t x = 0;
        while (!stop.load(std::memory_order_relaxed)) x = x + 1;
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    {
      DataStage wait("loader", kStageLoaderWait);  // the loop waits for a batch meanwhile
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    prof.step();  // step 1: every core busy
    stop = true;
    for (std::thread& t : burners) t.join();
    prof.stop();
  }
  std::string run = test::run_dirs(dir.path())[0];
  std::string out = analysed_output(run);
  nlohmann::json info = nlohmann::json::parse(test::read_text(out + "/profiler_info.json"));
  std::vector<int64_t> saturated = info["analysis"]["host"]["cpu_saturated_steps"];
  EXPECT_NE(std::find(saturated.begin(), saturated.end(), 1), saturated.end())
      << info["analysis"]["host"].dump();
  std::string summary = summarize_run(run);
  EXPECT_NE(summary.find("host: CPU at 90 % or more in step(s) "), std::string::npos) << summary;
  EXPECT_NE(summary.find("while the training loop waited"), std::string::npos) << summary;
  size_t step1 = static_cast<size_t>(std::find(saturated.begin(), saturated.end(), 1) - saturated.begin());
  ASSERT_LT(step1, saturated.size());  // step 0 may be saturated too, by another process
  EXPECT_GE(info["analysis"]["host"]["cpu_saturated_data_wait_ns"][step1].get<uint64_t>(), 100'000'000u);
  EXPECT_NE(summary.find("host_cpu_usage.csv"), std::string::npos);
}

TEST(HostSys, WithoutTheOptionThereIsNoSamplerAndNoTable) {
  TempDir dir;
  {
    ProfilerOptions o;
    o.output_path = dir.path();
    o.buffer_mb = 4;
    Profiler prof(o);
    TRAINPROF_RANGE("work");
    prof.stop();
  }
  std::string run = test::run_dirs(dir.path())[0];
  for (const auto& [tid, name] : test::read_run(run).thread_names) EXPECT_NE(name, "trainprof host sampler");
  std::string out = analysed_output(run);
  for (const char* f :
       {"host_cpu_usage.csv", "host_mem_usage.csv", "host_disk_usage.csv", "host_network_usage.csv"})
    EXPECT_FALSE(std::filesystem::exists(out + "/" + f)) << f;
}

}  // namespace
}  // namespace trainprof
