// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The analysis engine: outputs checked by parsing them (JSON with nlohmann, CSV
// with the small reader below).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "analysis/gpu_kernels.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "analysis/timeline.h"
#include "core/event.h"
#include "core/raw_encoder.h"
#include "core/recorder.h"
#include "exporter/csv_reader.h"
#include "raw/crc32c.h"
#include "raw/format.h"
#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

using exporter::CsvRows;

CsvRows read_csv(const std::string& path) {
  bool well_formed = false;
  CsvRows rows = exporter::read_csv_file(path, &well_formed);
  EXPECT_TRUE(well_formed) << path << " ends inside a quoted field or without a line break";
  return rows;
}

// "12.345" (microseconds, 3 decimals) -> 12345 ns, exactly.
int64_t ns_of(const std::string& us) {
  size_t dot = us.find('.');
  EXPECT_NE(dot, std::string::npos) << us;
  EXPECT_EQ(us.size() - dot, 4u) << us;
  return std::stoll(us.substr(0, dot)) * 1000 + std::stoll(us.substr(dot + 1));
}

// Rows keyed by their first column.
std::map<std::string, std::vector<std::string>> by_name(const CsvRows& rows) {
  std::map<std::string, std::vector<std::string>> m;
  for (size_t i = 1; i < rows.size(); ++i) m[rows[i][0]] = rows[i];
  return m;
}

json read_json(const std::string& path) {
  return json::parse(test::read_text(path));
}

std::string out(const std::string& run, const std::string& file) {
  return run + "/PROFILER_OUTPUT/" + file;
}

// A run with `steps` steps; step N holds ranges "work" and "step_N".
std::string record_steps(const std::string& dir, int steps) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  for (int s = 0; s < steps; ++s) {
    {
      TRAINPROF_RANGE("work");
      trainprof::Range r("step_" + std::to_string(s));
    }
    prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

AnalyseOptions with_steps(std::vector<int64_t> steps) {
  AnalyseOptions o;
  o.step_list = std::move(steps);
  return o;
}

RunAnalysis analyse_one(const std::string& run, AnalyseOptions options = {}) {
  AnalyseReport report = analyse(run, options);
  EXPECT_TRUE(report.error.empty()) << report.error;
  EXPECT_EQ(report.runs.size(), 1u);
  return report.runs.empty() ? RunAnalysis{} : report.runs[0];
}

// On each of `threads` threads, `iterations` times: outer { inner1 { leaf } inner2 }.
void record_nested_ranges(int threads, int iterations) {
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([iterations] {
      for (int i = 0; i < iterations; ++i) {
        TRAINPROF_RANGE("outer");
        {
          TRAINPROF_RANGE("inner1");
          { TRAINPROF_RANGE("leaf"); }
        }
        { TRAINPROF_RANGE("inner2"); }
      }
    });
  }
  for (auto& t : running) t.join();
}

TEST(Analysis, SelfTimeOfNestedRangesOnManyThreads) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  record_nested_ranges(6, 2000);
  prof.stop();
  std::string run = prof.last_run().run_dir;
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  auto details = by_name(read_csv(out(run, "operator_details.csv")));
  auto self = [&](const char* n) { return ns_of(details[n][3]); };
  auto total = [&](const char* n) { return ns_of(details[n][4]); };
  ASSERT_EQ(details.size(), 4u);
  for (const char* n : {"outer", "inner1", "inner2", "leaf"}) EXPECT_EQ(details[n][7], "12000") << n;
  // Strict nesting: self times of a tree add up to its root's total.
  EXPECT_EQ(self("outer") + self("inner1") + self("inner2") + self("leaf"), total("outer"));
  EXPECT_EQ(total("inner1"), self("inner1") + total("leaf"));
  EXPECT_EQ(total("leaf"), self("leaf"));
  EXPECT_EQ(total("outer"), self("outer") + total("inner1") + total("inner2"));

  auto stats = read_csv(out(run, "op_statistic.csv"));
  ASSERT_EQ(stats[0],
            (std::vector<std::string>{"OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)",
                                      "Min Time(us)", "Max Time(us)", "Ratio(%)", "Total FLOPs"}));
  EXPECT_EQ(stats[1][0], "outer");  // sorted by total time
  double ratios = 0;
  for (size_t i = 1; i < stats.size(); ++i) {
    EXPECT_LE(ns_of(stats[i][5]), ns_of(stats[i][4]));
    EXPECT_LE(ns_of(stats[i][4]), ns_of(stats[i][6]));
    ratios += std::stod(stats[i][7]);
  }
  EXPECT_NEAR(ratios, 100.0, 0.01);
}

// torch.profiler's key_averages from the raw run, without the outputs: the
// same counts, totals and self times as operator_details.csv, per name.
TEST(KeyAverages, AgreeWithOperatorDetails) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  record_nested_ranges(2, 500);
  prof.stop();
  std::string run = prof.last_run().run_dir;
  KeyAverages k = key_averages(run);
  ASSERT_TRUE(k.error.empty()) << k.error;
  ASSERT_TRUE(analyse_one(run).ok);
  auto details = by_name(read_csv(out(run, "operator_details.csv")));
  // The ranges, and the step the session recorded at stop (every step is
  // torch's one row "ProfilerStep*").
  ASSERT_EQ(k.rows.size(), 5u);
  for (const KeyAverage& row : k.rows) {
    SCOPED_TRACE(row.name);
    if (row.name == "ProfilerStep*") {
      EXPECT_EQ(row.count, 1u);
      continue;
    }
    ASSERT_EQ(details.count(row.name), 1u);
    EXPECT_EQ(row.count, 1000u);
    EXPECT_EQ(row.self_ns, ns_of(details[row.name][3]));
    EXPECT_EQ(row.total_ns, ns_of(details[row.name][4]));
    EXPECT_FALSE(row.is_operator);  // user ranges
  }
  for (size_t i = 1; i < k.rows.size(); ++i) EXPECT_GE(k.rows[i - 1].self_ns, k.rows[i].self_ns);
  // Nothing recorded shapes or stacks: grouping by them changes nothing.
  KeyAverages shapes = key_averages(run, {.group_by_input_shape = true, .group_by_stack_n = 5});
  ASSERT_EQ(shapes.rows.size(), 5u);
  EXPECT_EQ(shapes.rows[0].name, k.rows[0].name);
  EXPECT_EQ(shapes.rows[0].self_ns, k.rows[0].self_ns);
  KeyAverages without_steps = key_averages(run, {.include_steps = false});
  ASSERT_EQ(without_steps.rows.size(), 4u);
  std::map<std::string, std::string> parent, parent_without_steps;
  for (const KeyAverage& row : without_steps.rows) {
    EXPECT_EQ(row.count, 1000u) << row.name;
    parent_without_steps[row.name] = row.first_parent;
  }
  for (const KeyAverage& row : k.rows) parent[row.name] = row.first_parent;
  // What each key's first call ran in (torch's cpu_parent of a key).
  EXPECT_EQ(parent, (std::map<std::string, std::string>{{"ProfilerStep*", ""},
                                                        {"outer", ""},  // on threads the step is not on
                                                        {"inner1", "outer"},
                                                        {"inner2", "outer"},
                                                        {"leaf", "inner1"}}));
  parent.erase("ProfilerStep*");
  EXPECT_EQ(parent_without_steps, parent);

  KeyAverages missing = key_averages(dir.path() + "/no_such_run");
  EXPECT_FALSE(missing.error.empty());
  EXPECT_TRUE(missing.rows.empty());
}

TEST(Analysis, TraceFollowsKinetoSchemaAndNestsPerThread) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.mstx_domain_include = {"default", "io"};
  Profiler prof(o);
  set_thread_name("trainer");
  for (int s = 0; s < 3; ++s) {
    {
      TRAINPROF_RANGE("forward");
      { TRAINPROF_RANGE("conv"); }
      mark("checkpoint", "io");
      counter("loss", 1.0 / (s + 1));
      uint64_t id = range_start("prefetch", "io");
      std::thread([id] { range_end(id); }).join();
    }
    prof.step();
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run).ok);
  std::string text = test::read_text(out(run, "trace_view.json"));
  json t = json::parse(text);
  EXPECT_EQ(t["schemaVersion"], 1);
  EXPECT_TRUE(t["deviceProperties"].is_array());
  EXPECT_EQ(t["distributedInfo"]["rank"], 0);
  EXPECT_NE(text.find("\"rank\": 0"), std::string::npos) << "HTA's regex needs a space after the colon";
  EXPECT_TRUE(t["baseTimeNanoseconds"].is_number_integer());
  EXPECT_EQ(t["traceName"], fs::path(run).filename().string());

  std::map<std::string, int> names;
  std::set<std::string> thread_names;
  std::map<int64_t, std::vector<std::pair<double, double>>> open;  // tid -> stack of [ts, end)
  double last_ts = -1e18;
  bool in_path = false;
  int async_b = 0, async_e = 0;
  for (const json& e : t["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") thread_names.insert(e["args"]["name"]);
      continue;
    }
    ASSERT_TRUE(e.contains("cat")) << e.dump();
    double ts = e["ts"];
    // The critical path's track and flows come last (known once every
    // window is written), in time order of their own.
    if (e["cat"] == "critical_path" && !in_path) {
      in_path = true;
      last_ts = -1e18;
    }
    EXPECT_EQ(e["cat"] == "critical_path", in_path) << "the path comes last: " << e.dump();
    EXPECT_GE(ts, last_ts) << "events are in time order";
    last_ts = ts;
    if (in_path) continue;
    ++names[e["name"]];
    if (ph == "X") {
      double end = ts + e["dur"].get<double>();
      auto& stack = open[e["tid"]];
      while (!stack.empty() && stack.back().second <= ts) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(end, stack.back().second + 1e-9) << "slices nest: " << e.dump();
      }
      stack.emplace_back(ts, end);
      EXPECT_EQ(e["cat"], "user_annotation");
      // Microseconds with 3 decimals.
      std::string dump = e.dump();
      EXPECT_NE(dump.find("\"dur\":"), std::string::npos);
    }
    if (ph == "b") ++async_b;
    if (ph == "e") ++async_e;
    if (ph == "C") {
      EXPECT_TRUE(e["args"]["value"].is_number());
    }
    if (ph == "i") {
      EXPECT_EQ(e["args"]["domain"], "io");
    }
  }
  EXPECT_EQ(names["ProfilerStep#0"], 1);
  EXPECT_EQ(names["ProfilerStep#2"], 1);
  EXPECT_EQ(names["forward"], 3);
  EXPECT_EQ(names["conv"], 3);
  EXPECT_EQ(names["checkpoint"], 3);
  EXPECT_EQ(names["loss"], 3);
  EXPECT_EQ(async_b, 3);
  EXPECT_EQ(async_e, 3);
  EXPECT_TRUE(thread_names.count("trainer"));
  // ts keeps nanoseconds: 3 decimals in the text.
  EXPECT_NE(text.find("\"ts\":"), std::string::npos);
  size_t ts_at = text.find("\"ts\":");
  std::string ts_text = text.substr(ts_at + 5, text.find(',', ts_at) - ts_at - 5);
  EXPECT_EQ(ts_text.size() - ts_text.find('.'), 4u) << ts_text;
}

TEST(Analysis, RangesThatDoNotNestAreReported) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  {
    TRAINPROF_RANGE("spans_step");  // left open across step(): crosses ProfilerStep#0
    prof.step();
  }
  prof.stop();
  RunAnalysis r = analyse_one(prof.last_run().run_dir);
  ASSERT_TRUE(r.ok) << r.error;
  bool warned = false;
  for (const auto& w : r.warnings) {
    warned |= w.find("'spans_step' ends after 'ProfilerStep#0'") != std::string::npos;
  }
  EXPECT_TRUE(warned);
}

TEST(Analysis, StepSelection) {
  TempDir dir;
  std::string run;
  {
    // Each step: its ranges, a counter, a mark and a data stage, each telling its step.
    ProfilerOptions o;
    o.output_path = dir.path();
    o.data_process = true;
    Profiler prof(o);
    for (int s = 0; s < 6; ++s) {
      {
        TRAINPROF_RANGE("work");
        trainprof::Range r("step_" + std::to_string(s));
        trainprof::counter("loss", s);
        trainprof::mark("mark_" + std::to_string(s));
        DataStage fetch("loader", kStageDatasetGet);
      }
      prof.step();
    }
    prof.stop();
    run = prof.last_run().run_dir;
  }
  RunAnalysis r = analyse_one(run, with_steps({2, 3}));
  ASSERT_TRUE(r.ok) << r.error;
  std::set<std::string> names;
  std::set<int> path_steps;
  std::vector<double> losses;
  json trace = read_json(out(run, "trace_view.json"));  // must outlive the loop
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "loss") losses.push_back(e["args"].begin()->get<double>());
    if (e["ph"] != "M" && e["ph"] != "C" && e.value("cat", "") != "dataset" &&
        e.value("cat", "") != "critical_path")
      names.insert(e["name"]);
    if (e.value("cat", "") == "critical_path" && e["ph"] == "X")
      path_steps.insert(e["args"]["Step"].get<int>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"ProfilerStep#2", "ProfilerStep#3", "step_2", "step_3", "work",
                                          "mark_2", "mark_3"}));
  EXPECT_EQ(path_steps, (std::set<int>{2, 3}));    // the critical path of the chosen steps alone
  EXPECT_EQ(losses, (std::vector<double>{2, 3}));  // the scan's events are narrowed too
  EXPECT_EQ(by_name(read_csv(out(run, "dataset.csv")))["loader"][2], "2");  // Occurrences
  auto steps = read_csv(out(run, "step_trace_time.csv"));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[1][0], "2");
  EXPECT_EQ(steps[2][0], "3");
  EXPECT_EQ(by_name(read_csv(out(run, "operator_details.csv")))["work"][7], "2");
  EXPECT_EQ(read_json(out(run, "profiler_info.json"))["analysis"]["steps"], json::parse("[2, 3]"));

  r = analyse_one(run, with_steps({2, 4}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("consecutive"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("recorded steps: 1-5; 0 is the start-up, not a step; 6 is the tail after the last "
                         "step, not a step"),
            std::string::npos)
      << r.error;
  r = analyse_one(run, with_steps({7, 8}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("step 7 was not recorded"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("1-5"), std::string::npos) << r.error;
  r = analyse_one(run, with_steps({0, 1}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("step 0 is not a step; recorded steps: 1-5"), std::string::npos) << r.error;

  EXPECT_EQ(parse_step_list("3-5"), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(parse_step_list("3,4,5"), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_THROW(parse_step_list("3-x"), std::invalid_argument);
  EXPECT_THROW(parse_step_list("5-3"), std::invalid_argument);
  EXPECT_THROW(parse_step_list(""), std::invalid_argument);
}

// A clock exchange with rank 0 still running, or failed, when the run is
// analysed (profiler_info.json's clock_sync.exchanges) is a warning with the
// reason, and the analysis keeps the alignment it used.
TEST(Analysis, AClockExchangeUnfinishedOrFailedIsSaid) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 2);
  std::string info_path = run + "/profiler_info.json";
  json info = read_json(info_path);
  info["clock_sync"] = {{"reference_rank", 0},
                        {"points", json::array()},
                        {"exchanges",
                         {{"started", 2},
                          {"running", 1},
                          {"failed", 1},
                          {"failures", {"DistStoreError: wait timeout after 10000ms"}}}}};
  test::write_bytes(info_path, info.dump());
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  std::string warnings;
  for (const std::string& w : r.warnings) warnings += w + "\n";
  EXPECT_NE(
      warnings.find("clock alignment: 1 of 2 clock exchange(s) with the reference rank failed "
                    "(DistStoreError: wait timeout after 10000ms); 1 clock exchange(s) with the reference "
                    "rank still running when the run was analysed"),
      std::string::npos)
      << warnings;
  EXPECT_EQ(read_json(out(run, "profiler_info.json"))["analysis"]["clock_sync"], info["clock_sync"]);
}

TEST(Analysis, StepTraceBreakdownAddsUp) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int s = 0; s < 4; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // free (host idle) time
    {
      TRAINPROF_RANGE("compute");
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    prof.step();
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run).ok);
  auto rows = read_csv(out(run, "step_trace_time.csv"));
  const std::vector<std::string> header = {
      "Step",       "Computing",     "Communication(Not Overlapped)",
      "Overlapped", "Communication", "Free",
      "Stage",      "Bubble",        "Communication(Not Overlapped and Exclude Receive)",
      "Preparing",  "Data Wait"};
  EXPECT_EQ(rows[0], header);
  ASSERT_EQ(rows.size(),
            4u);  // steps 1-3: step 0 is the start-up, 4 (from the last step() to stop()) the tail
  // Each step's length, from its ProfilerStep#N slice in the timeline.
  std::map<std::string, int64_t> step_ns;
  json trace = read_json(out(run, "trace_view.json"));
  for (const auto& e : trace["traceEvents"]) {
    std::string name = e.value("name", "");
    if (name.starts_with("ProfilerStep#") && e.value("ph", "") == "X")
      step_ns[name.substr(13)] = std::llround(e["dur"].get<double>() * 1000);
  }
  for (size_t i = 1; i <= 3; ++i) {
    int64_t computing = ns_of(rows[i][1]), not_overlapped = ns_of(rows[i][2]), free = ns_of(rows[i][5]),
            preparing = ns_of(rows[i][9]), data_wait = ns_of(rows[i][10]);
    ASSERT_TRUE(step_ns.count(rows[i][0])) << rows[i][0];
    // The parts add up to the step, to the nanosecond.
    EXPECT_EQ(computing + not_overlapped + data_wait + free, step_ns[rows[i][0]]) << i;
    EXPECT_EQ(ns_of(rows[i][4]), 0);  // no communication, no data waits recorded
    EXPECT_EQ(data_wait, 0);
    EXPECT_GE(computing, 3'000'000) << i;
    EXPECT_GE(free, 2'000'000) << i;
    EXPECT_GE(preparing, 2'000'000) << i;
    EXPECT_LE(preparing, step_ns[rows[i][0]] - computing) << i;  // the gap before the range
  }
}

TEST(Analysis, UnionLengthCountsOverlapsOnce) {
  analysis::UnionLength none;
  EXPECT_EQ(none.total(), 0u);
  analysis::UnionLength u;
  for (auto [s, e] :
       std::vector<std::pair<uint64_t, uint64_t>>{{0, 10}, {5, 15}, {15, 20}, {30, 40}, {32, 35}}) {
    u.add(s, e);
  }
  EXPECT_EQ(u.total(), 30u);  // [0, 20) and [30, 40)
}

// Stack samples are given the part of their span in gaps between their
// thread's outermost slices, gaps under kGlueGapNs left out; the counted
// steps' samples on the step's thread, by the program's function.
TEST(Analysis, StackSamplesAreGivenTheirThreadsTimeOutsideOperators) {
  analysis::TraceModel m;
  m.strings = {"",
               "ProfilerStep#1",
               "aten::mm",
               "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1500): _call_impl;"
               "train.py(14): load_features;train.py(40): main",
               "train.py(22): batches (generator);train.py(38): main",
               "train.py(41): main"};
  constexpr uint64_t ms = 1'000'000;
  uint32_t step = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t op = m.key_of({.tid = 1, .name = 2, .is_op = true});
  uint32_t other_op = m.key_of({.tid = 2, .name = 2, .is_op = true});
  // Thread 1: operators at [0, 10), [10.05, 20) (a 50 us glue gap), [50, 60), [60, 70) nested
  // in none; thread 2 (no step): one operator at [0, 100).
  for (analysis::Slice s : std::vector<analysis::Slice>{{0, 100 * ms, step},
                                                        {0, 10 * ms, op},
                                                        {10 * ms + 50'000, 10 * ms - 50'000, op},
                                                        {50 * ms, 10 * ms, op},
                                                        {60 * ms, 10 * ms, op},
                                                        {0, 100 * ms, other_op}}) {
    m.add_slice(s);
  }
  m.steps = {{1, 0, 100 * ms, 1}};
  // Samples of thread 1: [0, 20) is operators and glue; [20, 45) outside;
  // [45, 75) 10 outside; [80, 100) outside. Thread 2's: all covered.
  m.stack_samples = {{0, 20 * ms, 1, 3},
                     {20 * ms, 45 * ms, 1, 3},
                     {45 * ms, 75 * ms, 1, 4},
                     {80 * ms, 100 * ms, 1, 5},
                     {0, 100 * ms, 2, 5}};
  analysis::order_timeline(m);
  analysis::attribute_stack_samples(m);
  EXPECT_EQ(m.stack_samples[0].outside_ns, 0u);  // the 50 us gap is glue
  EXPECT_EQ(m.stack_samples[1].outside_ns, 25 * ms);
  EXPECT_EQ(m.stack_samples[2].outside_ns, 5 * ms + 5 * ms);  // [45, 50) and [70, 75)
  EXPECT_EQ(m.stack_samples[3].outside_ns, 20 * ms);
  EXPECT_EQ(m.stack_samples[4].outside_ns, 0u);
  analysis::OutsideOperators o = analysis::outside_operators(m);
  EXPECT_EQ(o.samples, 4u);  // thread 2 runs no step
  EXPECT_EQ(o.outside_ns, 55 * ms);
  ASSERT_EQ(o.functions.size(), 3u);
  // The program's innermost frame, past torch's own.
  EXPECT_EQ(analysis::describe(o.functions[0]), "load_features (train.py:14)");
  EXPECT_EQ(o.functions[0].ns, 25 * ms);
  EXPECT_FALSE(o.functions[0].input);
  EXPECT_EQ(analysis::describe(o.functions[2]), "batches (train.py:22)");
  EXPECT_TRUE(o.functions[2].input);  // a generator: the loop's input
  EXPECT_EQ(analysis::top_outside_function(m, 1, 20 * ms, 100 * ms), "load_features (train.py:14)");
  EXPECT_EQ(analysis::top_outside_function(m, 1, 70 * ms, 100 * ms), "main (train.py:41)");
  // Operators sampled: the gaps between recorded ones are mostly unrecorded
  // operators, so no function is named (a clean loop would be "outside").
  m.operator_sampling = 100;
  o = analysis::outside_operators(m);
  EXPECT_TRUE(o.functions.empty());
  EXPECT_TRUE(o.by_step.empty());
  EXPECT_NE(o.not_attributed.find("1 call in 100 recorded"), std::string::npos) << o.not_attributed;
}

// A thread outside operators while a collective of the host runs is
// waiting for it (a Gloo all_reduce's wait(), DDP's wait for its buckets):
// communication, not a function's work. An NCCL operation timed on the
// device keeps the host from nothing.
TEST(Analysis, StackSamplesAreNotGivenTimeTheHostSpentInCommunication) {
  analysis::TraceModel m;
  m.strings = {"", "ProfilerStep#1", "aten::mm", "train.py(36): main", "c10d::allreduce_"};
  constexpr uint64_t ms = 1'000'000;
  uint32_t step = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t op = m.key_of({.tid = 1, .name = 2, .is_op = true});
  for (analysis::Slice s :
       std::vector<analysis::Slice>{{0, 100 * ms, step}, {0, 10 * ms, op}, {90 * ms, 10 * ms, op}})
    m.add_slice(s);
  m.steps = {{1, 0, 100 * ms, 1}};
  // In flight [5, 60) on another thread; on the device [70, 80).
  m.comm_calls = {{5 * ms, 60 * ms, 1024, 7, 4, 0, raw::kCommCollective | raw::kCommCompletion, 0, -1, -1},
                  {70 * ms, 80 * ms, 1024, 7, 4, 0, raw::kCommCollective | raw::kCommOnDevice, 1, -1, -1}};
  m.stack_samples = {{0, 100 * ms, 1, 3}};
  analysis::order_timeline(m);
  analysis::attribute_stack_samples(m);
  EXPECT_EQ(m.stack_samples[0].outside_ns, 30 * ms);  // [60, 90): the gap [10, 90) less [10, 60)
}

// A thread that waited for a CPU (a machine busy with other work) was
// preempted: the wait is no function's, taken from its outside time first
// (a preemption between operators is what opens a gap), never below zero.
TEST(Analysis, StackSamplesLeaveOutTheirThreadsWaitForACpu) {
  analysis::TraceModel m;
  m.strings = {"", "ProfilerStep#1", "aten::mm", "train.py(36): main"};
  constexpr uint64_t ms = 1'000'000;
  uint32_t step = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t op = m.key_of({.tid = 1, .name = 2, .is_op = true});
  for (analysis::Slice s : std::vector<analysis::Slice>{
           {0, 100 * ms, step}, {0, 10 * ms, op}, {12 * ms, 38 * ms, op}, {60 * ms, 40 * ms, op}})
    m.add_slice(s);
  m.steps = {{1, 0, 100 * ms, 1}};
  // [0, 50): a 2 ms gap, 3 ms of CPU wait; [50, 100): a 10 ms gap, 4 ms of it.
  m.stack_samples = {{0, 50 * ms, 1, 3, 3 * ms}, {50 * ms, 100 * ms, 1, 3, 4 * ms}};
  analysis::order_timeline(m);
  analysis::attribute_stack_samples(m);
  EXPECT_EQ(m.stack_samples[0].outside_ns, 0u);
  EXPECT_EQ(m.stack_samples[1].outside_ns, 6 * ms);
}

TEST(Analysis, StepTraceUnionsThreadsAndClipsToTheWindow) {
  analysis::TraceModel m;
  m.strings = {"", "ProfilerStep#0", "ProfilerStep#1", "op"};
  uint32_t step0 = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t step1 = m.key_of({.tid = 1, .name = 2, .is_step = true});
  uint32_t a = m.key_of({.tid = 1, .name = 3}), b = m.key_of({.tid = 2, .name = 3});
  for (analysis::Slice s : std::vector<analysis::Slice>{
           {0, 100, step0}, {10, 30, a}, {30, 30, b}, {70, 10, a}, {90, 30, b}, {100, 100, step1}}) {
    m.add_slice(s);
  }
  m.steps = {{0, 0, 100}, {1, 100, 200}};
  analysis::order_timeline(m);
  analysis::compute_self_times(m);
  std::vector<analysis::StepTraceRow> rows = analysis::step_trace(m);
  ASSERT_EQ(rows.size(), 2u);
  // Step 0: [10, 60) from two threads, [70, 80), [90, 100) of a slice that runs on.
  EXPECT_EQ(rows[0].computing_ns, 70u);
  EXPECT_EQ(rows[0].free_ns, 30u);
  EXPECT_EQ(rows[0].preparing_ns, 10u);
  // Step 1: only [100, 120), the part of that slice inside the window.
  EXPECT_EQ(rows[1].computing_ns, 20u);
  EXPECT_EQ(rows[1].free_ns, 80u);
  EXPECT_EQ(rows[1].preparing_ns, 0u);
}

// The loop's waits for data: torch's DataLoader fetch (a range, whatever it
// holds) and a data stage "wait" come out of Computing into Data Wait, the
// part in communication stays communication, and the four parts add up.
TEST(Analysis, StepTraceTakesTheLoopsWaitsForDataOutOfComputing) {
  analysis::TraceModel m;
  m.strings = {"",
               "ProfilerStep#0",
               "compute",
               "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               "aten::stack",
               "MPI_Allreduce",
               "MPI_Iallreduce",
               "loader",
               "wait"};
  uint32_t step0 = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t compute = m.key_of({.tid = 1, .name = 2}), fetch = m.key_of({.tid = 1, .name = 3}),
           stack = m.key_of({.tid = 1, .name = 4, .is_op = true});
  for (analysis::Slice s : std::vector<analysis::Slice>{
           {0, 100, step0}, {10, 20, compute}, {40, 20, fetch}, {50, 5, stack}, {60, 20, compute}}) {
    m.add_slice(s);
  }
  m.steps = {{0, 0, 100}};
  m.comm_calls = {
      {70, 85, 8, 1, 5, 0, static_cast<uint32_t>(raw::kCommCollective), 0, -1, -1},
      {85, 95, 8, 1, 6, 0, static_cast<uint32_t>(raw::kCommCollective | raw::kCommCompletion), 1, -1, -1},
  };
  m.data_stages = {{90, 7, 1, 7, 8, 0}};  // a wait with no range around it: [90, 97)
  analysis::order_timeline(m);
  analysis::compute_self_times(m);
  std::vector<analysis::StepTraceRow> rows = analysis::step_trace(m);
  ASSERT_EQ(rows.size(), 1u);
  const analysis::StepTraceRow& r = rows[0];
  EXPECT_EQ(r.computing_ns, 30u);      // [10, 30) and [60, 70): not the fetch, not the allreduce
  EXPECT_EQ(r.communication_ns, 25u);  // [70, 95)
  EXPECT_EQ(r.overlapped_ns, 0u);
  EXPECT_EQ(r.communication_not_overlapped_ns, 25u);
  EXPECT_EQ(r.data_wait_ns, 22u);  // the fetch [40, 60) and the wait's [95, 97) after the collective
  EXPECT_EQ(r.free_ns, 23u);       // [0, 10), [30, 40), [97, 100)
  EXPECT_EQ(r.computing_ns + r.communication_not_overlapped_ns + r.data_wait_ns + r.free_ns, 100u);
  EXPECT_EQ(r.preparing_ns, 10u);
  EXPECT_EQ(r.stage_ns, 25u);
  EXPECT_EQ(r.bubble_ns, 0u);

  // Operators sampled (1 call in 100) and no device: the host's idle time
  // cannot be told from the operators not recorded, so all of the step but
  // its waits is Computing.
  m.operator_sampling = 100;
  rows = analysis::step_trace(m);
  const analysis::StepTraceRow& sampled = rows[0];
  EXPECT_EQ(sampled.computing_ns, 100u - 25u - 22u);
  EXPECT_EQ(sampled.communication_not_overlapped_ns, 25u);
  EXPECT_EQ(sampled.data_wait_ns, 22u);
  EXPECT_EQ(sampled.free_ns, 0u);
  EXPECT_EQ(sampled.preparing_ns, 0u);

  // With the device's time: Data Wait is the device idle while the host
  // waited for data, out of the device's Free (kernels are never sampled).
  m.gpu = {{20, 50, raw::EventKind::kGpuKernel, 2, 1, 0, 1, 7, 0, 0, 0, 0},
           {62, 75, raw::EventKind::kGpuKernel, 2, 2, 0, 1, 7, 0, 0, 0, 0}};
  rows = analysis::step_trace(m);
  const analysis::StepTraceRow& d = rows[0];
  EXPECT_EQ(d.computing_ns, 43u);      // the kernels
  EXPECT_EQ(d.communication_ns, 25u);  // the host's calls, [70, 95)
  EXPECT_EQ(d.overlapped_ns, 5u);      // [70, 75)
  EXPECT_EQ(d.data_wait_ns, 12u);      // [50, 60) and [95, 97): the device idle, the loop waiting
  EXPECT_EQ(d.free_ns, 100u - 43u - 20u - 12u);
  EXPECT_EQ(d.preparing_ns, 20u);
}

TEST(Analysis, StepTraceSplitsCommunicationFromComputing) {
  analysis::TraceModel m;
  m.strings = {"", "ProfilerStep#0", "train", "MPI_Allreduce", "MPI_Iallreduce", "MPI_Recv"};
  uint32_t step0 = m.key_of({.tid = 1, .name = 1, .is_step = true});
  uint32_t train = m.key_of({.tid = 1, .name = 2});
  // A range over [0, 100) that holds a blocking allreduce [60, 80); a
  // nonblocking one in flight over [10, 50) while it computes; a blocking
  // receive [85, 95) outside the range.
  for (analysis::Slice s : std::vector<analysis::Slice>{{0, 100, step0}, {0, 80, train}}) m.add_slice(s);
  m.steps = {{0, 0, 100}};
  m.comm_calls = {
      {10, 50, 8, 1, 4, 0, static_cast<uint32_t>(raw::kCommCollective | raw::kCommCompletion), 0, -1, -1},
      {60, 80, 8, 1, 3, 0, static_cast<uint32_t>(raw::kCommCollective), 1, -1, -1},
      {85, 95, 8, 1, 5, 0, static_cast<uint32_t>(raw::kCommRecv), -1, 0, 0},
  };
  analysis::order_timeline(m);
  analysis::compute_self_times(m);
  std::vector<analysis::StepTraceRow> rows = analysis::step_trace(m);
  ASSERT_EQ(rows.size(), 1u);
  const analysis::StepTraceRow& r = rows[0];
  EXPECT_EQ(r.computing_ns, 60u);      // [0, 80) less the allreduce it holds
  EXPECT_EQ(r.communication_ns, 70u);  // 40 in flight + 20 + 10
  EXPECT_EQ(r.overlapped_ns, 40u);     // in flight while computing
  EXPECT_EQ(r.communication_not_overlapped_ns, 30u);
  EXPECT_EQ(r.free_ns, 10u);  // [80, 85) and [95, 100)
  EXPECT_EQ(r.computing_ns + r.communication_not_overlapped_ns + r.free_ns, 100u);
  EXPECT_EQ(r.bubble_ns, 10u);                                        // the receive
  EXPECT_EQ(r.communication_not_overlapped_exclude_receive_ns, 20u);  // 30 - 10
  EXPECT_EQ(r.stage_ns, 75u);                                         // [10, 95) less the receive
}

TEST(Analysis, ZeroEventsTruncatedAndCorruptRunsStillAnalyse) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 40);
  std::string raw_path = run + "/raw/host.tpraw";
  std::string bytes = test::read_text(raw_path);

  // Header only: zero events.
  {
    std::ofstream f(raw_path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), raw::kFileHeaderSize);
  }
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.events, 0u);
  json t = read_json(out(run, "trace_view.json"));
  for (const json& e : t["traceEvents"]) EXPECT_EQ(e["ph"], "M");
  EXPECT_EQ(read_csv(out(run, "step_trace_time.csv")).size(), 1u);  // header only

  // Empty: killed between creating the file and writing its header.
  { std::ofstream f(raw_path, std::ios::binary | std::ios::trunc); }
  r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.events, 0u);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("is empty"), std::string::npos) << r.warnings[0];
  EXPECT_NO_THROW(read_json(out(run, "trace_view.json")));

  // Cut in the middle of the last chunk.
  {
    std::ofstream f(raw_path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 30));
  }
  r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  bool truncated_warning = false;
  for (const auto& w : r.warnings) truncated_warning |= w.find("truncated tail") != std::string::npos;
  EXPECT_TRUE(truncated_warning);
  EXPECT_NO_THROW(read_json(out(run, "trace_view.json")));

  // A flipped byte in the first chunk after the header.
  std::string bad = bytes;
  bad[raw::kFileHeaderSize + raw::kChunkHeaderSize + 3] ^= 0x40;
  {
    std::ofstream f(raw_path, std::ios::binary | std::ios::trunc);
    f.write(bad.data(), static_cast<std::streamsize>(bad.size()));
  }
  r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  bool corrupt_warning = false;
  for (const auto& w : r.warnings) {
    corrupt_warning |= w.find("corrupt chunk") != std::string::npos &&
                       w.find("offset " + std::to_string(raw::kFileHeaderSize)) != std::string::npos;
  }
  EXPECT_TRUE(corrupt_warning);
  EXPECT_NO_THROW(read_json(out(run, "trace_view.json")));
}

TEST(Analysis, RunKilledBySigkillIsAnalysedWithAWarning) {
  TempDir dir;
  test::Child child = test::spawn({test::helper_path("crash_child"), dir.path()});
  ASSERT_EQ(child.first_line.rfind("RUN ", 0), 0u) << child.first_line;        // recording has started
  ASSERT_TRUE(test::wait_for_raw_bytes(child.first_line.substr(4), 1 << 20));  // thousands of iterations
  kill(child.pid, SIGKILL);
  test::wait_status(child);
  auto runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u);
  RunAnalysis a = analyse_one(runs[0]);
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_GT(a.events, 1000u);
  bool warned = false;
  for (const auto& w : a.warnings) warned |= w.find("not closed normally") != std::string::npos;
  EXPECT_TRUE(warned);
  auto details = by_name(read_csv(out(runs[0], "operator_details.csv")));
  EXPECT_GT(std::stoll(details["iteration"][7]), 500);
}

TEST(Analysis, NamesWithQuotesNewlinesAndUtf8) {
  TempDir dir;
  const std::vector<std::string> names = {
      "say \"hi\"",   "back\\slash",          "two\nlines", "tab\there", "a,b,c", "caf\xc3\xa9 \xe6\x97\xa5",
      "ctrl\x01\x1f", "bad utf8 \xff\xfe end"};
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (const std::string& n : names) {
    trainprof::Range r(n);
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run).ok);
  std::set<std::string> in_trace;
  json trace = read_json(out(run, "trace_view.json"));  // must outlive the loop
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") in_trace.insert(e["name"]);
  }
  for (size_t i = 0; i + 1 < names.size(); ++i) EXPECT_TRUE(in_trace.count(names[i])) << names[i];
  EXPECT_TRUE(in_trace.count("bad utf8 \xef\xbf\xbd\xef\xbf\xbd end")) << "invalid bytes become U+FFFD";
  // CSV fields with commas, quotes and newlines come back intact.
  auto details = by_name(read_csv(out(run, "operator_details.csv")));
  for (const std::string& n : names) EXPECT_TRUE(details.count(n)) << n;
  for (const auto& [name, row] : details)
    EXPECT_EQ(row.size(), 10u) << name;  // ..., Total FLOPs, Module Hierarchy
}

TEST(Analysis, ReanalysisIsIdenticalAndSimplifyRemovesRaw) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 5);
  ASSERT_TRUE(analyse_one(run).ok);
  std::map<std::string, std::string> first;
  for (const char* f : {"trace_view.json", "op_statistic.csv", "operator_details.csv", "step_trace_time.csv",
                        "profiler_metadata.json"}) {
    first[f] = test::read_text(out(run, f));
  }
  AnalyseOptions simplify;
  simplify.data_simplification = true;
  ASSERT_TRUE(analyse_one(run, simplify).ok);
  for (const auto& [f, text] : first) EXPECT_EQ(test::read_text(out(run, f)), text) << f;
  EXPECT_FALSE(fs::exists(run + "/raw"));
  RunAnalysis again = analyse_one(run);
  EXPECT_FALSE(again.ok);
  EXPECT_NE(again.error.find("removed by data simplification"), std::string::npos) << again.error;
  EXPECT_EQ(test::read_text(out(run, "trace_view.json")), first["trace_view.json"]) << "outputs kept";
}

// Issue 11 item 11: --simplify removed raw/ of a run still being recorded.
// The recording lock is an flock of another open file description, so it
// holds against an analysis in the recording process itself; stop() releases
// it, so a closed run is not taken for a live one by the same process.
TEST(Analysis, ARunStillBeingRecordedIsPartialAndKeepsItsRawData) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.flush_interval_ms = 10;
  Profiler prof(o);
  for (int i = 0; i < 1000; ++i) {
    TRAINPROF_RANGE("live");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string run = prof.current_run_dir();
  AnalyseOptions simplify;
  simplify.data_simplification = true;
  RunAnalysis live = analyse_one(run, simplify);
  EXPECT_TRUE(live.ok) << live.error;
  std::string warnings;
  for (const std::string& w : live.warnings) warnings += w + "\n";
  EXPECT_NE(warnings.find("still being recorded"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("raw/ is kept"), std::string::npos) << warnings;
  EXPECT_TRUE(fs::exists(run + "/raw"));
  prof.stop();

  RunAnalysis closed = analyse_one(run, simplify);
  EXPECT_TRUE(closed.ok) << closed.error;
  for (const std::string& w : closed.warnings)
    EXPECT_EQ(w.find("still being recorded"), std::string::npos) << w;
  EXPECT_FALSE(fs::exists(run + "/raw"));
}

TEST(Analysis, UnwritableOutputDirectoryFailsThatRunClearly) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 2);
  { std::ofstream blocker(run + "/PROFILER_OUTPUT"); }  // a file where the directory should be
  RunAnalysis r = analyse_one(run);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("PROFILER_OUTPUT"), std::string::npos) << r.error;
}

// `trainprof summary` reads outputs that anyone with access to the run could
// have replaced: a FIFO planted there must not block it.
TEST(Analysis, SummaryDoesNotBlockOnAPlantedFifo) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 3);
  ASSERT_TRUE(analyse_one(run).ok);
  for (const char* name : {"operator_details.csv", "step_trace_time.csv", "profiler_info.json"}) {
    ASSERT_EQ(unlink(out(run, name).c_str()), 0);
    ASSERT_EQ(mkfifo(out(run, name).c_str(), 0600), 0);
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a blocked open or read ends the child with SIGALRM
    std::string text = summarize_run(run);
    _exit(text.empty() ? 3 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? std::string("killed by ") + strsignal(WTERMSIG(status)) : "exit status");
}

TEST(Analysis, NoRunsAndMissingPath) {
  TempDir dir;
  fs::create_directories(dir.sub("empty/deeper"));
  AnalyseReport report = analyse(dir.sub("empty"));
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.error.find("no trainprof run directory"), std::string::npos) << report.error;
  report = analyse(dir.sub("missing"));
  EXPECT_NE(report.error.find("does not exist"), std::string::npos) << report.error;
}

// The trace size limit of the two tests below: 400 KiB.
constexpr uint64_t kTraceLimit = 400 * 1024;

AnalyseOptions limited_to(uint64_t trace_bytes) {
  AnalyseOptions o;
  o.trace_size_limit_bytes = trace_bytes;
  return o;
}

// The analysis' warning that the trace was cut ("" when none).
std::string cut_warning(const RunAnalysis& r) {
  for (const std::string& w : r.warnings) {
    if (w.find("was cut") != std::string::npos) return w;
  }
  return "";
}

TEST(Analysis, TraceSizeLimitCutsWholeSteps) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int s = 0; s < 50; ++s) {
    for (int i = 0; i < 400; ++i) {
      TRAINPROF_RANGE("busy");
    }
    prof.step();
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  RunAnalysis r = analyse_one(run, limited_to(kTraceLimit));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_LE(fs::file_size(out(run, "trace_view.json")), kTraceLimit);
  EXPECT_FALSE(cut_warning(r).empty());
  // Whole steps: every step in the trace has all 400 of its ranges.
  json t = read_json(out(run, "trace_view.json"));
  int steps = 0, busy = 0;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    std::string name = e["name"];
    if (name.rfind("ProfilerStep#", 0) == 0) ++steps;
    if (name == "busy") ++busy;
  }
  EXPECT_GT(steps, 3);
  EXPECT_LT(steps, 50);
  EXPECT_EQ(busy, 400 * steps);
  // The CSVs still cover every step.
  EXPECT_EQ(read_csv(out(run, "step_trace_time.csv")).size(), 50u);  // header + 1..49 (0: start-up, 50: tail)
}

// Issue 18 item 2: when no whole step fits (here the run's one step is 10x
// the limit), the trace is cut by time instead of not written at all.
TEST(Analysis, TraceSizeLimitCutsInsideAStepWhenNoWholeStepFits) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int i = 0; i < 40000; ++i) {
    TRAINPROF_RANGE("busy");
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  RunAnalysis r = analyse_one(run, limited_to(kTraceLimit));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_LE(fs::file_size(out(run, "trace_view.json")), kTraceLimit);
  std::string warning = cut_warning(r);
  EXPECT_NE(warning.find("under 0.39 MiB"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ms into the run"), std::string::npos) << warning;
  EXPECT_NE(warning.find("--trace-limit-mb"), std::string::npos) << warning;
  json t = read_json(out(run, "trace_view.json"));
  int busy = 0, markers = 0;
  double last_busy = 0, marker_ts = 0;
  for (const json& e : t["traceEvents"]) {
    if (e.value("name", "") == "busy") {
      ++busy;
      last_busy = std::max(last_busy, std::stod(e["ts"].dump()));
    }
    if (e.value("name", "") == "[trainprof] trace cut at the size limit") {
      ++markers;
      marker_ts = std::stod(e["ts"].dump());
    }
  }
  EXPECT_GT(busy, 1000);
  EXPECT_LT(busy, 40000);
  EXPECT_EQ(markers, 1);
  EXPECT_GE(marker_ts, last_busy);  // the marker is where the kept part ends
  // The CSVs still count every range.
  auto stats = read_csv(out(run, "op_statistic.csv"));
  bool counted = false;
  for (const auto& row : stats) counted |= row.size() > 2 && row[0] == "busy" && row[2] == "40000";
  EXPECT_TRUE(counted);
}

TEST(Analysis, EightRanksWithTwoJobsMatchOneByOne) {
  TempDir dir;
  for (int rank = 0; rank < 8; ++rank) {
    std::string opts =
        R"({"start": true, "output_path": ")" + dir.sub("tree/rank" + std::to_string(rank)) + R"("})";
    test::ProcessResult p =
        test::run_process({test::helper_path("env_child")},
                          {{"TRAINPROF_OPTIONS", opts}, {"RANK", std::to_string(rank)}, {"WORLD_SIZE", "8"}});
    ASSERT_EQ(p.exit_code, 0) << p.output;
  }
  fs::copy(dir.sub("tree"), dir.sub("alone"), fs::copy_options::recursive);
  AnalyseOptions two_jobs;
  two_jobs.max_workers = 2;
  AnalyseReport together = analyse(dir.sub("tree"), two_jobs);
  ASSERT_TRUE(together.ok()) << together.error;
  ASSERT_EQ(together.runs.size(), 8u);
  std::vector<std::string> alone_runs = find_run_directories(dir.sub("alone"));
  ASSERT_EQ(alone_runs.size(), 8u);
  std::set<int> ranks;
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(analyse_one(alone_runs[i]).ok);
    const std::string& a = together.runs[i].run_dir;
    const std::string& b = alone_runs[i];
    EXPECT_EQ(fs::path(a).filename(), fs::path(b).filename());
    for (const char* f :
         {"trace_view.json", "op_statistic.csv", "operator_details.csv", "step_trace_time.csv"}) {
      EXPECT_EQ(test::read_text(out(a, f)), test::read_text(out(b, f))) << f << " of " << a;
    }
    ranks.insert(read_json(out(a, "trace_view.json"))["distributedInfo"]["rank"].get<int>());
  }
  EXPECT_EQ(ranks.size(), 8u);
}

TEST(Analysis, AsyncModeLeavesCompleteOutputs) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  for (int s = 0; s < 3; ++s) {
    { TRAINPROF_RANGE("work"); }
    prof.step();
  }
  prof.stop();
  AnalyseReport now = prof.analyse(AnalyseMode::Async);
  EXPECT_TRUE(now.runs.empty());  // returns at once
  ASSERT_TRUE(prof.wait_for_analysis());
  std::string run = prof.last_run().run_dir;
  EXPECT_EQ(by_name(read_csv(out(run, "operator_details.csv")))["work"][7], "3");
  EXPECT_NO_THROW(read_json(out(run, "trace_view.json")));
  EXPECT_TRUE(read_json(out(run, "profiler_info.json")).contains("analysis"));
  // Nothing left to analyse: said plainly.
  EXPECT_FALSE(prof.analyse().error.empty());
}

TEST(Analysis, TraceHandlerAnalysesEachCycle) {
  TempDir dir;
  ProfilerOptions o;
  o.schedule = Schedule{.wait = 0, .warmup = 1, .active = 2, .repeat = 2};
  o.on_trace_ready = trace_handler(dir.sub("tb"));
  Profiler prof(o);
  for (int s = 0; s < 8; ++s) {
    { TRAINPROF_RANGE("step_body"); }
    prof.step();
  }
  prof.stop();
  auto runs = test::run_dirs(dir.sub("tb"));
  ASSERT_EQ(runs.size(), 2u);
  for (const std::string& run : runs) {
    auto steps = read_csv(out(run, "step_trace_time.csv"));
    EXPECT_EQ(steps.size(), 3u) << run;  // two active steps per cycle
  }
}

// Data pipeline stages on two threads: dataset.csv per (operation, stage) in
// pipeline order, and a Dataset track per thread in the timeline.
TEST(Dataset, StagesBecomeDatasetCsvAndATrackPerThread) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.data_process = true;
  Profiler prof(o);
  std::thread worker([] {
    for (int i = 0; i < 30; ++i) DataStage get("MyDataset", kStageDatasetGet, "workers=1");
    DataStage collate("Stack, \"batched\"", kStageCollate);
  });
  for (int i = 0; i < 5; ++i) DataStage wait("DataLoader", kStageLoaderWait);
  worker.join();
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run).ok);

  CsvRows rows = read_csv(out(run, "dataset.csv"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0],
            (std::vector<std::string>{"Operation", "Stage", "Occurrences", "Avg. time (us)", "Custom Info"}));
  EXPECT_EQ((std::vector<std::string>{rows[1][0], rows[1][1], rows[1][2], rows[1][4]}),
            (std::vector<std::string>{"MyDataset", "dataset", "30", "workers=1"}));
  EXPECT_EQ((std::vector<std::string>{rows[2][0], rows[2][1], rows[2][2]}),
            (std::vector<std::string>{"Stack, \"batched\"", "collate", "1"}));
  EXPECT_EQ((std::vector<std::string>{rows[3][0], rows[3][1], rows[3][2]}),
            (std::vector<std::string>{"DataLoader", "wait", "5"}));
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_GT(ns_of(rows[i][3]), 0) << "an average of stages that took time";

  json trace = read_json(out(run, "trace_view.json"));
  std::map<int64_t, std::string> thread_names;
  std::set<int64_t> range_tids;
  std::map<int64_t, int> stages_by_track;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
    if (e.value("cat", "") == "dataset") {
      ++stages_by_track[e["tid"]];
      EXPECT_TRUE(e["args"].contains("Stage")) << e.dump();
    }
  }
  ASSERT_EQ(stages_by_track.size(), 2u);  // the worker's and the main thread's
  int total = 0;
  for (const auto& [track, n] : stages_by_track) {
    total += n;
    EXPECT_EQ(thread_names[track].rfind("Dataset (", 0), 0u) << thread_names[track];
  }
  EXPECT_EQ(total, 36);
}

TEST(Dataset, NothingIsRecordedWithoutDataProcess) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  { DataStage get("MyDataset", kStageDatasetGet); }
  TRAINPROF_RANGE("work");
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run).ok);
  EXPECT_FALSE(fs::exists(out(run, "dataset.csv")));
  EXPECT_EQ(test::read_text(out(run, "trace_view.json")).find("\"dataset\""), std::string::npos);
}

TEST(Dataset, StepSelectionKeepsTheStagesOfTheChosenSteps) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.data_process = true;
  Profiler prof(o);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i <= s; ++i) DataStage get("MyDataset", kStageDatasetGet);
    prof.step();
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  ASSERT_TRUE(analyse_one(run, with_steps({2})).ok);
  EXPECT_EQ(read_csv(out(run, "dataset.csv"))[1][2], "3");
  ASSERT_TRUE(analyse_one(run).ok);
  EXPECT_EQ(read_csv(out(run, "dataset.csv"))[1][2], "6");
}

// What the LibTorch collector records for one allocator report: two slots.
core::Event memory_pair_event(uint64_t address, int64_t bytes, uint64_t total, bool second) {
  core::MemoryReport r{
      detail::now_ticks(), address, bytes, static_cast<uint8_t>(raw::EventKind::kMemory), {}};
  core::MemoryTotals t{total, 2 * total, raw::memory_device(0, -1), core::kMemoryTotalsSlot, {}};
  return second ? std::bit_cast<core::Event>(t) : std::bit_cast<core::Event>(r);
}
void report_memory(uint64_t address, int64_t bytes, uint64_t total) {
  core::record_memory(detail::now_ticks(), address, bytes, total, 2 * total, raw::memory_device(0, -1));
}
// An operator around `body`, recorded as the collector does at its end.
template <typename F>
void op(const char* name, F body) {
  uint64_t start = detail::now_ticks();
  body();
  core::record_event(core::Event{start, detail::now_ticks(), name,
                                 static_cast<uint8_t>(raw::EventKind::kOperator), 0, 0,
                                 core::kNoSequenceNumber});
}

// Operators last microseconds in real programs. Without gaps, timestamps
// only nanoseconds apart can become equal and which slice holds a report, or
// which of two slices is inside the other, is then undecidable.
void spin_one_microsecond() {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(1);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Per thread: 3000 blocks allocated inside "alloc_op" (nested in "outer"),
// one outside any operator, all but the last 10 freed inside "free_op";
// 12 000 reports per thread cross many buffer blocks.
constexpr int kBlocks = 3000;
void memory_workload(uint64_t base) {
  uint64_t total = 0;
  for (int i = 0; i < kBlocks; ++i) {
    op("outer", [&] {
      spin_one_microsecond();
      op("alloc_op", [&] {
        spin_one_microsecond();
        report_memory(base + 64 * i, 64, total += 64);
        spin_one_microsecond();
      });
    });
  }
  spin_one_microsecond();
  report_memory(base + 64 * kBlocks, 32, total += 32);
  spin_one_microsecond();  // or "free_op" may start in the report's nanosecond
  op("free_op", [&] {
    // Gaps at both ends: a free in the operator's first or last nanosecond
    // would be on its boundary (1 in 4 runs lost one free to the step).
    spin_one_microsecond();
    for (int i = 0; i < kBlocks - 10; ++i) report_memory(base + 64 * i, -64, total -= 64);
    spin_one_microsecond();
  });
}

TEST(Analysis, MemoryReportsAreAttributedMatchedAndPeakedPerStep) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  prof.step();  // step 0, the start-up, is empty
  std::thread other(memory_workload, uint64_t{1} << 40);
  memory_workload(uint64_t{2} << 40);
  other.join();
  prof.step();
  report_memory(uint64_t{3} << 40, 1 << 20, 1 << 20);  // step 2: one MiB
  prof.step();
  prof.stop();
  std::string run = prof.last_run().run_dir;
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;

  const int reports = 2 * (kBlocks + 1 + kBlocks - 10) + 1;
  CsvRows records = read_csv(out(run, "memory_record.csv"));
  ASSERT_EQ(records.size(), reports + 1u);
  EXPECT_EQ(records[0][0], "Component");
  // Every report says reserved = 2 x allocated (report_memory); Active is
  // LibTorch's allocated total. In MB to 6 places: within rounding.
  for (size_t i = 1; i < records.size(); ++i) {
    double allocated = std::stod(records[i][2]);
    EXPECT_NEAR(std::stod(records[i][3]), 2 * allocated, 1.5e-6) << i;
    EXPECT_EQ(records[i][4], records[i][2]) << i;
    EXPECT_EQ(records[i][0], "LibTorch") << i;
  }
  EXPECT_EQ((std::vector<std::string>{records.back()[2], records.back()[3], records.back()[4]}),
            (std::vector<std::string>{"1.000000", "2.000000", "1.000000"}));  // step 2's MiB
  CsvRows rows = read_csv(out(run, "operator_memory.csv"));
  ASSERT_EQ(rows.size(), 2 * (kBlocks + 1) + 1 + 1u);
  std::map<std::pair<std::string, bool>, int> by_op;  // (name, released) -> rows
  for (size_t i = 1; i < rows.size(); ++i) {
    bool released = !rows[i][3].empty();
    ++by_op[{rows[i][0], released}];
    if (released) {
      EXPECT_EQ(ns_of(rows[i][5]), ns_of(rows[i][3]) - ns_of(rows[i][2])) << i;
      EXPECT_NEAR(std::stod(rows[i][11]), 2 * std::stod(rows[i][10]), 1.5e-6) << i;  // release reserved
      EXPECT_EQ(rows[i][12], rows[i][10]) << i;  // release active: LibTorch reports none, allocated stands
    }
    EXPECT_NEAR(std::stod(rows[i][8]), 2 * std::stod(rows[i][7]), 1.5e-6) << i;  // allocation reserved
    EXPECT_EQ(rows[i][9], rows[i][7]) << i;                                      // allocation active
    EXPECT_EQ(rows[i][14], "CPU") << i;
  }
  EXPECT_EQ((by_op[{"alloc_op", true}]), 2 * (kBlocks - 10));
  EXPECT_EQ((by_op[{"alloc_op", false}]), 2 * 10);
  EXPECT_EQ((by_op[{"", false}]), 2 + 1);
  EXPECT_EQ(by_op.size(), 3u) << [&] {
    std::string names;
    for (const auto& [k, n] : by_op)
      names += k.first + (k.second ? "/released " : " ") + std::to_string(n) + "; ";
    return names;
  }();
  EXPECT_EQ(rows[1][1], "0.062");  // 64 bytes in KB

  json info = read_json(out(run, "profiler_info.json"));
  const json& memory = info["analysis"]["memory"];
  EXPECT_EQ(memory["frees"], 2 * (kBlocks - 10));
  EXPECT_EQ(memory["frees_matched"], 2 * (kBlocks - 10));
  // Step 1's peak is one thread's 3000 blocks + 32 bytes; step 2's the MiB
  // (0 is the start-up, 3 the tail: not steps).
  ASSERT_EQ(memory["steps"].size(), 2u);
  EXPECT_EQ(memory["steps"][0]["Peak Memory(bytes)"], 64 * kBlocks + 32);
  EXPECT_EQ(memory["steps"][1]["Peak Memory(bytes)"], 1 << 20);

  int instants = 0, counters = 0;
  json trace = read_json(out(run, "trace_view.json"));  // must outlive the loop
  for (const json& e : trace["traceEvents"]) {
    if (e.value("name", "") == "[memory]") {
      ++instants;
      EXPECT_EQ(e["s"], "t");
      EXPECT_EQ(e["args"]["Device Id"], -1);
      EXPECT_EQ(e["args"]["Total Reserved"].get<int64_t>(), 2 * e["args"]["Total Allocated"].get<int64_t>());
    }
    counters += e.value("name", "") == "Memory (CPU)" && e.value("ph", "") == "C";
  }
  EXPECT_EQ(instants, reports);
  EXPECT_EQ(counters, reports);

  // --steps narrows the memory outputs to the window.
  ASSERT_TRUE(analyse_one(run, with_steps({2})).ok);
  EXPECT_EQ(read_csv(out(run, "memory_record.csv")).size(), 2u);
  EXPECT_EQ(read_csv(out(run, "operator_memory.csv")).size(), 2u);
}

// torch.profiler's memory columns: a call's own reports (self) and those of
// the calls inside it; a report outside every call on its thread is
// "[memory]", and step 1's MiB (inside no operator) is its step's.
TEST(KeyAverages, MemoryIsSummedPerCallAndIntoTheCallsAroundIt) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  std::thread other(memory_workload, uint64_t{1} << 40);
  other.join();
  memory_workload(uint64_t{2} << 40);
  prof.step();
  report_memory(uint64_t{3} << 40, 1 << 20, 1 << 20);
  prof.step();
  prof.stop();
  KeyAverages k = key_averages(prof.last_run().run_dir);
  ASSERT_TRUE(k.error.empty()) << k.error;
  std::map<std::string, KeyAverage> rows;
  for (const KeyAverage& row : k.rows) rows[row.name] = row;
  const int64_t allocated = 2 * kBlocks * 64, freed = 2 * (kBlocks - 10) * 64;
  EXPECT_EQ(rows["alloc_op"].count, 2u * kBlocks);
  EXPECT_EQ(rows["alloc_op"].self_cpu_memory, allocated);
  EXPECT_EQ(rows["alloc_op"].cpu_memory, allocated);
  EXPECT_EQ(rows["outer"].self_cpu_memory, 0);
  EXPECT_EQ(rows["outer"].cpu_memory, allocated);
  EXPECT_EQ(rows["free_op"].self_cpu_memory, -freed);
  // The main thread's 32 bytes outside its operators are step 0's, step 1's
  // MiB step 1's; the other thread's 32 bytes are "[memory]".
  EXPECT_EQ(rows["ProfilerStep*"].count, 3u);  // and the one stop() closes
  EXPECT_EQ(rows["ProfilerStep*"].self_cpu_memory, 32 + (1 << 20));
  EXPECT_EQ(rows["ProfilerStep*"].cpu_memory, kBlocks * 64 + 32 - (kBlocks - 10) * 64 + (1 << 20));
  EXPECT_EQ(rows["[memory]"].count, 1u);
  EXPECT_EQ(rows["[memory]"].cpu_memory, 32);
  EXPECT_EQ(rows["[memory]"].total_ns, 0u);
  for (const auto& [name, row] : rows) EXPECT_EQ(row.device_memory, 0) << name;  // all CPU
  // Without the steps, what they held alone is "[memory]".
  rows.clear();
  for (const KeyAverage& row : key_averages(prof.last_run().run_dir, {.include_steps = false}).rows) {
    rows[row.name] = row;
  }
  EXPECT_EQ(rows.count("ProfilerStep*"), 0u);
  EXPECT_EQ(rows["[memory]"].count, 3u);
  EXPECT_EQ(rows["[memory]"].cpu_memory, 32 + 32 + (1 << 20));
  EXPECT_EQ(rows["alloc_op"].self_cpu_memory, allocated);
}

// As torch.profiler's events: a call that is the only child of a call of
// the same name is part of it (its time, memory and children its parent's);
// with a second child it stays a call.
TEST(CallEvents, AnOnlyChildOfTheSameNameIsPartOfItsParent) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  uint64_t total = 0;
  op("twin", [&] {
    spin_one_microsecond();
    op("twin", [&] {
      spin_one_microsecond();
      report_memory(uint64_t{4} << 40, 64, total += 64);
      spin_one_microsecond();
      op("leaf", [&] {
        spin_one_microsecond();  // strictly inside the leaf: a report at its very start may tie with it
        report_memory((uint64_t{4} << 40) + 64, 32, total += 32);
      });
      spin_one_microsecond();
    });
    spin_one_microsecond();
  });
  spin_one_microsecond();
  op("pair", [&] {
    spin_one_microsecond();
    op("pair", spin_one_microsecond);
    spin_one_microsecond();
    op("pair", spin_one_microsecond);
    spin_one_microsecond();
  });
  prof.stop();
  CallEvents e = call_events(prof.last_run().run_dir, {.include_steps = false});
  ASSERT_TRUE(e.error.empty()) << e.error;
  std::map<std::string, std::vector<const CallEvent*>> by_name;
  for (const CallEvent& c : e.calls) by_name[e.keys[c.key].name].push_back(&c);
  ASSERT_EQ(by_name["twin"].size(), 1u);
  ASSERT_EQ(by_name["pair"].size(), 3u);
  ASSERT_EQ(by_name["leaf"].size(), 1u);
  const CallEvent& twin = *by_name["twin"][0];
  const CallEvent& leaf = *by_name["leaf"][0];
  EXPECT_EQ(&e.calls[leaf.parent], &twin);
  EXPECT_EQ(&e.calls[twin.first_child], &leaf);
  EXPECT_EQ(leaf.next_sibling, kNoCallEvent);
  EXPECT_EQ(twin.self_ns, twin.end_ns - twin.start_ns - (leaf.end_ns - leaf.start_ns));
  EXPECT_EQ(twin.self_cpu_memory, 64);
  EXPECT_EQ(twin.cpu_memory, 96);
  EXPECT_EQ(twin.parent, kNoCallEvent);
  KeyAverages k = key_averages(prof.last_run().run_dir, {.include_steps = false});
  ASSERT_TRUE(k.error.empty()) << k.error;
  std::map<std::string, KeyAverage> rows;
  for (const KeyAverage& row : k.rows) rows[row.name] = row;
  EXPECT_EQ(rows["twin"].count, 1u);
  EXPECT_EQ(rows["twin"].cpu_memory, 96);
  EXPECT_EQ(rows["twin"].self_ns, twin.self_ns);
  EXPECT_EQ(rows["pair"].count, 3u);
}

// events(): every call once, in start order, linked to its parent and
// children on its thread; self times and memory add up along the links.
TEST(CallEvents, EveryCallLinkedToItsParentAndChildren) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  record_nested_ranges(3, 200);
  memory_workload(uint64_t{2} << 40);
  prof.stop();
  CallEvents e = call_events(prof.last_run().run_dir);
  ASSERT_TRUE(e.error.empty()) << e.error;
  std::map<std::string, int> count;
  for (const CallEvent& c : e.calls) ++count[e.keys[c.key].name];
  EXPECT_EQ(count["outer"], 3 * 200 + kBlocks);
  EXPECT_EQ(count["leaf"], 3 * 200);
  EXPECT_EQ(count["alloc_op"], kBlocks);
  EXPECT_EQ(count["ProfilerStep#0"], 1);
  EXPECT_EQ(count["[memory]"], 0);                           // the main thread's step holds its report
  EXPECT_EQ(e.keys[e.calls[0].key].name, "ProfilerStep#0");  // it starts first, the longest
  for (size_t i = 0; i < e.calls.size(); ++i) {
    const CallEvent& c = e.calls[i];
    const std::string& name = e.keys[c.key].name;
    SCOPED_TRACE(name + " #" + std::to_string(i));
    if (i > 0) {
      ASSERT_LE(e.calls[i - 1].start_ns, c.start_ns);
    }
    uint64_t children_ns = 0;
    int64_t children_memory = 0;
    for (uint32_t k = c.first_child; k != kNoCallEvent; k = e.calls[k].next_sibling) {
      const CallEvent& child = e.calls[k];
      ASSERT_EQ(child.parent, i);
      ASSERT_EQ(e.keys[child.key].tid, e.keys[c.key].tid);
      ASSERT_GE(child.start_ns, c.start_ns);
      ASSERT_LE(child.end_ns, c.end_ns);
      children_ns += child.end_ns - child.start_ns;
      children_memory += child.cpu_memory;
    }
    ASSERT_EQ(c.self_ns, c.end_ns - c.start_ns - children_ns);
    ASSERT_EQ(c.cpu_memory, c.self_cpu_memory + children_memory);
    if (name == "leaf") {
      ASSERT_EQ(e.keys[e.calls[c.parent].key].name, "inner1");
    }
    if (name == "outer" && c.first_child != kNoCallEvent &&
        e.keys[e.calls[c.first_child].key].name == "inner1") {
      ASSERT_EQ(e.keys[e.calls[e.calls[c.first_child].next_sibling].key].name, "inner2");
    }
    if (name == "alloc_op") {
      ASSERT_EQ(c.self_cpu_memory, 64);
    }
  }
  EXPECT_GT(e.origin_ns, 0u);
  EXPECT_TRUE(e.kernels.empty());
  EXPECT_FALSE(call_events(dir.path() + "/no_such_run").error.empty());
}

TEST(Analysis, MalformedMemoryEventDiscardsItsChunkOnly) {
  TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  Profiler prof(o);
  report_memory(0x1000, 64, 64);
  prof.stop();
  std::string run = prof.last_run().run_dir;
  // A chunk whose CRC is valid but whose memory event lacks its last field.
  core::Event pair[2] = {memory_pair_event(0x2000, 64, 128, false), memory_pair_event(0x2000, 64, 128, true)};
  core::RawEncoder encoder;
  ASSERT_EQ(encoder.events(1234, pair, 2), 1u);
  const std::vector<uint8_t>& encoded = encoder.output();
  std::string chunk(encoded.begin(), encoded.end() - 1);
  // It continues the file's chunk sequence (else it is a duplicate of chunk 0).
  std::string raw_path = run + "/raw/host.tpraw";
  uint32_t sequence = static_cast<uint32_t>(test::raw_chunks(test::read_text(raw_path)).size());
  std::memcpy(&chunk[raw::kChunkHeaderSize], &sequence, sizeof(sequence));
  uint32_t payload_size = static_cast<uint32_t>(chunk.size() - raw::kChunkHeaderSize);
  std::memcpy(&chunk[offsetof(raw::ChunkHeader, payload_size)], &payload_size, sizeof(payload_size));
  test::reseal_chunk(chunk, 0);
  {
    std::ofstream f(raw_path, std::ios::binary | std::ios::app);
    f.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  bool reported = false;
  for (const std::string& w : r.warnings) reported |= w.find("malformed memory event") != std::string::npos;
  EXPECT_TRUE(reported);
  EXPECT_EQ(read_csv(out(run, "memory_record.csv")).size(), 2u);  // the valid report only
}

bool any_warning_has(const RunAnalysis& r, const std::string& text) {
  return std::any_of(r.warnings.begin(), r.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

// String damage that checksums cannot see (a bug, or bytes changed by hand
// and resealed): the events it leaves unnamed are warned about and counted
// in the output's profiler_info.json.
TEST(Analysis, StringDamageIsWarnedAboutAndCounted) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 3);
  std::string raw_path = run + "/raw/host.tpraw";
  const std::string bytes = test::read_text(raw_path);
  std::vector<test::RawChunk> chunks = test::raw_chunks(bytes);
  auto first_of = [&](raw::ChunkType type) {
    return *std::find_if(chunks.begin(), chunks.end(), [&](const test::RawChunk& c) {
      return c.header.type == static_cast<uint16_t>(type);
    });
  };
  auto raw_strings = [&] { return read_json(out(run, "profiler_info.json"))["analysis"]["raw_strings"]; };

  // A string table one record short: its last string is not read.
  std::string damaged = bytes;
  test::RawChunk table = first_of(raw::ChunkType::kStrings);
  test::set_record_count(damaged, table, table.header.record_count - 1);
  test::write_bytes(raw_path, damaged);
  RunAnalysis r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(any_warning_has(r, "at offset " + std::to_string(table.offset) + ": string table: "));
  EXPECT_TRUE(any_warning_has(r, "event(s) name string ids that no string table defines"));
  EXPECT_EQ(raw_strings()["chunks_with_unread_bytes"], 1);
  EXPECT_GE(raw_strings()["events_with_undefined_ids"].get<uint64_t>(), 1u);

  // One event naming an id no table defines.
  test::RawChunk events = first_of(raw::ChunkType::kEvents);
  test::write_bytes(raw_path, test::with_first_event_named(bytes, events, uint64_t{1} << 31));
  r = analyse_one(run);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(any_warning_has(r, "at offset " + std::to_string(events.offset) +
                                     ": 1 event(s) name string ids that no string table defines"));
  EXPECT_EQ(raw_strings()["events_with_undefined_ids"], 1);
  EXPECT_EQ(raw_strings()["chunks_with_unread_bytes"], 0);
}

// ---------------------------------------------------------------------------
// Windows (analysis/run_loader.h): the analysis holds a few windows of slices
// at a time, and its outputs are the same whatever their number.

// An operator as the LibTorch collector records it: with input shapes, and a
// sequence number that links a forward op (thread 1) to its autograd node.
void linked_op(const char* name, const char* inputs, uint32_t sequence_nr, bool backward) {
  uint64_t start = detail::now_ticks();  // short: placed by the second pass, not held
  core::record_event(
      core::Event{start, detail::now_ticks(), name, static_cast<uint8_t>(raw::EventKind::kOperator),
                  static_cast<uint8_t>(backward ? raw::kOperatorBackward : 0), 1, sequence_nr});
  core::record_event(
      core::Event{start, 0, inputs, static_cast<uint8_t>(raw::EventKind::kOperatorInputs), 0, 0, 0});
}

// A run with every kind of event, whose slices outnumber what the scan keeps
// whole (4 Ki), so that most are placed by the second pass; a range around
// the run, an async range and ranges left open across step() cross windows.
std::string record_windowed_run(const std::string& dir, bool steps) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  auto train = std::make_optional<trainprof::Range>("train");
  uint64_t epoch = range_start("epoch");
  uint64_t total = 0;
  for (int s = 0; s < 40; ++s) {
    auto work = [s](uint64_t base) {
      for (int i = 0; i < 1000; ++i) {
        TRAINPROF_RANGE("layer");
        { TRAINPROF_RANGE("conv"); }
        if (i % 100 == 0) op("alloc_op", [&] { report_memory(base + 64 * (s * 1000 + i), 64, 64); });
      }
    };
    uint32_t sequence_nr = static_cast<uint32_t>(s);
    linked_op("aten::mm", "[[8,4],[4,2]]\x1f[\"float\",\"float\"]", sequence_nr, false);
    linked_op("aten::mm", "[[16,4],[4,2]]\x1f[\"float\",\"float\"]", sequence_nr + 1000, false);
    std::thread other(work, uint64_t{1} << 40);
    work(uint64_t{2} << 40);
    other.join();
    mark("checkpoint");
    counter("loss", 1.0 / (s + 1));
    report_memory(uint64_t{3} << 40, s % 2 == 0 ? 4096 : -4096, total = s % 2 == 0 ? 4096 : 0);
    auto across = std::make_optional<trainprof::Range>("across_step");
    if (steps) prof.step();
    spin_one_microsecond();
    across.reset();
    linked_op("MmBackward0", "[[8,2]]\x1f[\"float\"]", sequence_nr, true);
  }
  range_end(epoch);
  train.reset();
  prof.stop();
  return prof.last_run().run_dir;
}

constexpr const char* kOutputFiles[] = {"trace_view.json",     "op_statistic.csv",  "operator_details.csv",
                                        "step_trace_time.csv", "memory_record.csv", "operator_memory.csv",
                                        "critical_path.csv"};

// Every output of `run` analysed with `options`, by file name.
std::map<std::string, std::string> outputs_with(const std::string& run, AnalyseOptions options,
                                                uint64_t window_slices, uint64_t* windows) {
  options.window_slices = window_slices;
  RunAnalysis r = analyse_one(run, options);
  EXPECT_TRUE(r.ok) << r.error;
  std::map<std::string, std::string> files;
  for (const char* name : kOutputFiles) {
    if (fs::exists(out(run, name))) files[name] = test::read_text(out(run, name));
  }
  json info = read_json(out(run, "profiler_info.json"));
  *windows = info["analysis"]["windows"].get<uint64_t>();
  files["slices"] = info["analysis"]["slices"].dump();
  files["what_if"] = info["analysis"]["what_if"].dump();
  return files;
}

// The outputs of one window and of many, compared file by file.
void expect_same_outputs_in_windows(const std::string& run, const AnalyseOptions& options = {}) {
  uint64_t one = 0, many = 0;
  std::map<std::string, std::string> whole = outputs_with(run, options, 0, &one);
  std::map<std::string, std::string> windowed = outputs_with(run, options, 2000, &many);
  EXPECT_EQ(one, 1u);
  EXPECT_GT(many, 10u);
  ASSERT_EQ(whole.size(), windowed.size());
  for (const auto& [name, text] : whole) {
    EXPECT_FALSE(text.empty()) << name;
    EXPECT_TRUE(text == windowed[name]) << name << " differs between 1 window and " << many;
  }
}

TEST(Windows, OutputsOfManyWindowsAreThoseOfOne) {
  TempDir dir;
  std::string run = record_windowed_run(dir.path(), true);
  expect_same_outputs_in_windows(run);
  // Every slice counted once: 40 steps x (2 threads x (1000 x 2 ranges + 10
  // operators) + 3 linked operators + the range across step()), 41 steps
  // (stop() ends the last), "train".
  json info = read_json(out(run, "profiler_info.json"));
  EXPECT_EQ(info["analysis"]["slices"], 40 * (2 * 2010 + 3 + 1) + 41 + 1);
  CsvRows steps = read_csv(out(run, "step_trace_time.csv"));
  EXPECT_EQ(steps.size(), 1 + 39u);  // 1-39: 0 is the start-up, 40 the tail
  // Operators keep their shapes (read after them, so re-keyed in the second
  // pass), and each autograd node its forward op.
  std::string text = test::read_text(out(run, "operator_details.csv"));
  EXPECT_NE(text.find("[[16,4],[4,2]]"), std::string::npos);
  EXPECT_NE(text.find("[[8,2]]"), std::string::npos);
  std::string trace = test::read_text(out(run, "trace_view.json"));
  size_t flows = 0;
  for (size_t at = trace.find("\"fwdbwd\""); at != std::string::npos; at = trace.find("\"fwdbwd\"", at + 1))
    ++flows;
  EXPECT_EQ(flows, 2 * 2 * 40u);  // "cat" and "name" of a start and an end per link
}

TEST(Windows, ARunInOneStepIsCutByTime) {
  TempDir dir;
  expect_same_outputs_in_windows(record_windowed_run(dir.path(), false));
}

TEST(Windows, StepSelectionAndTraceLimitAreTheSameInWindows) {
  TempDir dir;
  std::string run = record_windowed_run(dir.path(), true);
  expect_same_outputs_in_windows(run, with_steps({10, 11, 12, 13, 14}));
  expect_same_outputs_in_windows(run, limited_to(2 << 20));
}

// Every file of the run's output, by name; profiler_info.json without what
// says when the analysis ran, how long it took and on how many threads.
std::map<std::string, std::string> every_output(const std::string& run) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(fs::path(run) / "PROFILER_OUTPUT")) {
    std::string name = entry.path().filename().string();
    files[name] = test::read_text(entry.path().string());
  }
  json info = json::parse(files["profiler_info.json"]);
  for (const char* varies : {"analysed_at_ns", "analysis_seconds", "analysis_threads"}) {
    EXPECT_TRUE(info["analysis"].contains(varies)) << varies;
    info["analysis"].erase(varies);
  }
  files["profiler_info.json"] = info.dump();
  return files;
}

// The run analysed on 1, 2, 3 and 8 threads, in one window and in many, with
// every output on (the database too): every byte the same as on one thread.
TEST(Threads, OutputsAreTheSameOnAnyNumberOfThreads) {
  TempDir dir;
  std::string run = record_windowed_run(dir.path(), true);
  AnalyseOptions options;
  options.export_db = true;
  for (uint64_t window_slices : {uint64_t{0}, uint64_t{2000}}) {
    std::map<std::string, std::string> first;  // of one thread
    for (int threads : {1, 2, 3, 8}) {
      options.window_slices = window_slices;
      options.threads = threads;
      RunAnalysis r = analyse_one(run, options);
      ASSERT_TRUE(r.ok) << r.error;
      json info = read_json(out(run, "profiler_info.json"));
      EXPECT_EQ(info["analysis"]["analysis_threads"], threads);
      std::map<std::string, std::string> files = every_output(run);
      if (first.empty()) {
        first = files;
        for (const char* name : {"trace_view.json", "trace_view.pftrace", "trainprof.db", "critical_path.csv",
                                 "memory_record.csv", "op_statistic.csv", "step_trace_time.csv"})
          EXPECT_TRUE(first.count(name) && !first[name].empty()) << name;
        continue;
      }
      ASSERT_EQ(files.size(), first.size()) << threads << " threads";
      for (const auto& [name, bytes] : first) {
        EXPECT_TRUE(files[name] == bytes)
            << name << " differs on " << threads << " threads, windows of " << window_slices << " slices";
      }
    }
  }
}

// A run analysed with the default options takes the cores it may run on.
TEST(Threads, TheDefaultIsEveryUsableCore) {
  TempDir dir;
  std::string run = record_windowed_run(dir.path(), true);
  ASSERT_TRUE(analyse_one(run).ok);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(read_json(out(run, "profiler_info.json"))["analysis"]["analysis_threads"], CPU_COUNT(&set));
}

}  // namespace
}  // namespace trainprof

namespace trainprof {
namespace {

std::string sql(const std::string& db, const std::string& query) {
  return test::sqlite3_query(TRAINPROF_TEST_SQLITE3, db, query);
}

// A run with ranges on two threads and five steps, analysed with both export types.
std::string analysed_with_database(const std::string& dir) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  for (int s = 0; s < 5; ++s) {
    TRAINPROF_RANGE("work");
    std::thread helper([] { TRAINPROF_RANGE("helper"); });
    helper.join();
    trainprof::Range r("step_" + std::to_string(s));
    // Well inside the step: begun in the very nanosecond step() ends it, the
    // range would start between two steps' windows (seen on an idle machine).
    spin_one_microsecond();
    prof.step();
  }
  prof.stop();
  std::string run = prof.last_run().run_dir;
  AnalyseOptions both;
  both.export_db = true;
  EXPECT_TRUE(analyse_one(run, both).ok);
  return run;
}

TEST(Database, AnswersWhatTheTextTablesSay) {
  TempDir dir;
  std::string run = analysed_with_database(dir.path());
  std::string db = out(run, "trainprof.db");
  EXPECT_EQ(sql(db, "PRAGMA integrity_check;"), "ok\n");
  EXPECT_EQ(sql(db, "PRAGMA foreign_key_check;"), "");  // every reference holds
  // Per name: the calls and total time of op_statistic.csv, from the slices.
  auto ops = by_name(read_csv(out(run, "op_statistic.csv")));
  ASSERT_TRUE(ops.count("work") && ops.count("helper"));
  for (const std::string name : {"work", "helper"}) {
    std::string answer = sql(db,
                             "SELECT COUNT(*) || ',' || SUM(end_ns - start_ns) FROM slices JOIN strings "
                             "ON strings.id = slices.name_id WHERE strings.value = '" +
                                 name + "';");
    EXPECT_EQ(answer, ops[name][2] + "," + std::to_string(ns_of(ops[name][3])) + "\n") << name;
    EXPECT_EQ(
        sql(db, "SELECT count || ',' || total_ns FROM operator_statistics WHERE name = '" + name + "';"),
        answer);
  }
  // Steps and their breakdown, as step_trace_time.csv.
  CsvRows steps = read_csv(out(run, "step_trace_time.csv"));
  ASSERT_EQ(steps.size(), 5u);  // steps 1-4: 0 is the start-up, 5 the tail
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_EQ(sql(db, "SELECT computing_ns || ',' || free_ns FROM steps WHERE step = " + steps[i][0] + ";"),
              std::to_string(ns_of(steps[i][1])) + "," + std::to_string(ns_of(steps[i][5])) + "\n")
        << steps[i][0];
  }
  // A range is in the step it started in; the helper thread has its own tid.
  EXPECT_EQ(sql(db, "SELECT step FROM slices JOIN strings ON strings.id = name_id WHERE value = 'step_3';"),
            "3\n");
  EXPECT_EQ(sql(db,
                "SELECT COUNT(DISTINCT tid) FROM slices JOIN strings ON strings.id = name_id "
                "WHERE value IN ('work', 'helper');"),
            "6\n");  // the main thread and five helper threads
  EXPECT_EQ(sql(db, "SELECT value FROM run_info WHERE key = 'stop_reason';"), "stop\n");
  // The start-up and the tail are step slices (kind 2) outside the steps
  // table, and no step is an autograd node.
  EXPECT_EQ(sql(db, "SELECT COUNT(*) FROM slices WHERE kind = 2 AND step IS NULL;"), "2\n");
  EXPECT_EQ(sql(db, "SELECT COUNT(*) FROM slices WHERE kind = 2 AND backward = 1;"), "0\n");
}

// Found by fuzzing (fuzz/analyse_fuzz.cc): damaged raw data that numbers two
// steps alike failed the whole analysis on the steps table's key, and the
// failed database leaked its connection. Now the first step is kept.
TEST(Database, DamagedDataWithDuplicateStepNumbersIsAnalysed) {
  TempDir dir;
  std::string run = dir.path() + "/host_1_trainprof";
  fs::create_directories(run + "/raw");
  fs::copy_file(std::string(TRAINPROF_TEST_DATA_DIR) + "/duplicate_step_numbers.tpraw",
                run + "/raw/host.tpraw");
  AnalyseOptions both;
  both.export_db = true;
  RunAnalysis r = analyse_one(run, both);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(sql(out(run, "trainprof.db"), "PRAGMA integrity_check;"), "ok\n");
  EXPECT_NE(sql(out(run, "trainprof.db"), "SELECT COUNT(*) FROM steps;"), "0\n");
}

TEST(Database, DbAloneWritesNoTextAndReplacesAPlantedLinkWithoutFollowingIt) {
  TempDir dir;
  std::string run = record_steps(dir.path(), 3);
  ASSERT_TRUE(analyse_one(run).ok);  // text: trace_view.json and the CSVs
  TempDir elsewhere;
  std::string target = elsewhere.path() + "/victim";
  std::ofstream(target) << "keep";
  ASSERT_EQ(symlink(target.c_str(), out(run, "trainprof.db").c_str()), 0);
  fs::remove(out(run, "op_statistic.csv"));
  AnalyseOptions db_only;
  db_only.export_text = false;
  db_only.export_db = true;
  ASSERT_TRUE(analyse_one(run, db_only).ok);
  EXPECT_FALSE(fs::exists(out(run, "op_statistic.csv")));  // no text written
  EXPECT_FALSE(fs::is_symlink(out(run, "trainprof.db")));
  EXPECT_EQ(test::read_text(target), "keep");
  EXPECT_EQ(sql(out(run, "trainprof.db"), "SELECT COUNT(*) FROM steps;"),
            "2\n");  // 1 and 2: 0 is the start-up, 3 (ended by stop()) the tail
  EXPECT_TRUE(fs::exists(out(run, "profiler_info.json")));
}

// NCCL renamed its kernels across releases (a rename once broke another
// tool's communication analysis silently): every name it has used is
// communication, demangled or not; other kernels are not.
TEST(GpuKernels, NcclKernelsAreKnownByTheNameOfEveryRelease) {
  for (const char* name :
       {"ncclAllReduceRingLLKernel_sum_f32(ncclColl)",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        "ncclSymkDevKernel_AllReduce_AGxLL_R(ncclSymkDevWorkArgs4K)", "void ncclKernel<1, 2>(ncclDevComm*)",
        "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"}) {
    EXPECT_TRUE(analysis::is_nccl_kernel(name)) << name;
  }
  for (const char* name : {"void at::native::vectorized_elementwise_kernel<4, float>(int, float*)",
                           "ampere_sgemm_128x64_nn", "_Z6kernelv", "my_nccl_wrapper(int)", ""}) {
    EXPECT_FALSE(analysis::is_nccl_kernel(name)) << name;
  }
}

}  // namespace
}  // namespace trainprof
