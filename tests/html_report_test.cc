// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The report's parts that hold arithmetic: the host time tree read back
// from a trace, the tables' ms and the embedded trace's base64.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "exporter/host_flame.h"
#include "exporter/html_charts.h"
#include "exporter/html_page.h"
#include "test_util.h"

namespace trainprof {
namespace {

using exporter::FlameNode;
using exporter::HostFlame;

const FlameNode* child(const FlameNode& n, const std::string& name) {
  for (const FlameNode& c : n.children) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Two steps of 100 and 60 µs on the main thread; a worker thread's range
// crosses the first step's end, then a data stage of it; an operator nests
// another.
const char* kTrace = R"({
"traceEvents":[
{"ph":"M","name":"thread_name","pid":7,"tid":7,"args":{"name":"main thread 7"}},
{"ph":"M","name":"thread_name","pid":7,"tid":9,"args":{"name":"thread 9"}},
{"ph":"X","cat":"cpu_op","name":"before","pid":7,"tid":7,"ts":0.000,"dur":5.000},
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":7,"tid":7,"ts":10.000,"dur":100.000},
{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":7,"tid":7,"ts":12.000,"dur":50.000},
{"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":7,"tid":7,"ts":14.000,"dur":40.000},
{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":20.000,"dur":40.000},
{"ph":"X","cat":"user_annotation","name":"load","pid":7,"tid":9,"ts":90.000,"dur":40.000},
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":7,"tid":7,"ts":110.000,"dur":60.000},
{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":7,"tid":7,"ts":112.000,"dur":30.000},
{"ph":"X","cat":"dataset","name":"load","pid":7,"tid":9,"ts":150.000,"dur":10.000}
]}
)";

std::string write_trace(const std::string& dir) {
  std::string path = dir + "/trace_view.json";
  std::ofstream(path) << kTrace;
  return path;
}

TEST(HostFlame, EachCallsTimeIsItsMeanPerStepUnderItsCaller) {
  test::TempDir dir;
  exporter::CsvRows python = {{"Step", "Function", "File", "Line", "Input", "Time(us)"},
                              {"1", "log", "train.py", "40", "no", "20.000"},
                              {"2", "log", "train.py", "40", "no", "10.000"},
                              {"9", "other", "train.py", "50", "no", "99.000"}};  // a step not read
  HostFlame flame = exporter::read_host_flame(write_trace(dir.path()), python);
  EXPECT_EQ(flame.steps, 2u);
  EXPECT_FALSE(flame.cut);
  ASSERT_EQ(flame.root.children.size(), 2u);
  const FlameNode& main = flame.root.children[0];  // the most time first
  EXPECT_EQ(main.name, "main thread 7");
  EXPECT_DOUBLE_EQ(main.us, (100 + 60) / 2.0);  // the whole step
  const FlameNode* linear = child(main, "aten::linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_DOUBLE_EQ(linear->us, (50 + 30) / 2.0);
  const FlameNode* addmm = child(*linear, "aten::addmm");
  ASSERT_NE(addmm, nullptr);
  EXPECT_DOUBLE_EQ(addmm->us, 40 / 2.0);
  EXPECT_EQ(child(main, "before"), nullptr);  // before the first step
  EXPECT_EQ(child(main, "gemm"), nullptr);    // device work is not host time
  // The worker's range is cut at the step's end: 20 of its 40 µs, then 10.
  const FlameNode& worker = flame.root.children[1];
  EXPECT_EQ(worker.name, "thread 9");
  EXPECT_DOUBLE_EQ(worker.us, (20 + 10) / 2.0);
  EXPECT_DOUBLE_EQ(child(worker, "load")->us, (20 + 10) / 2.0);
  EXPECT_DOUBLE_EQ(flame.root.us, main.us + worker.us);
  // Python's samples outside operators, of the steps read only.
  const FlameNode* outside = child(main, "Python outside operators");
  ASSERT_NE(outside, nullptr);
  EXPECT_DOUBLE_EQ(outside->us, (20 + 10) / 2.0);
  EXPECT_DOUBLE_EQ(child(*outside, "log (train.py:40)")->us, 15.0);
}

TEST(HostFlame, ASliceLimitKeepsOnlyTheWholeSteps) {
  test::TempDir dir;
  // Reading stops inside step 2: only step 1 counts.
  HostFlame flame = exporter::read_host_flame(write_trace(dir.path()), {}, 6);
  EXPECT_TRUE(flame.cut);
  EXPECT_EQ(flame.steps, 1u);
  EXPECT_DOUBLE_EQ(flame.root.children[0].us, 100.0);
  EXPECT_DOUBLE_EQ(child(flame.root.children[0], "aten::linear")->us, 50.0);
}

TEST(HostFlame, ATraceWithoutStepsOrFileIsEmpty) {
  test::TempDir dir;
  EXPECT_EQ(exporter::read_host_flame(dir.path() + "/absent.json", {}).steps, 0u);
  std::ofstream(dir.path() + "/t.json")
      << "{\"traceEvents\":[\n{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\","
         "\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":2}\n]}\n";
  HostFlame flame = exporter::read_host_flame(dir.path() + "/t.json", {});
  EXPECT_EQ(flame.steps, 0u);
  EXPECT_TRUE(flame.root.children.empty());
  EXPECT_EQ(exporter::html::icicle(flame), "");
}

TEST(HostFlame, AnEditedTraceIsReadWithoutThrowing) {
  // Fields of another type, a cut line, numbers out of range: each slice
  // that cannot be read is left out, the rest is read.
  std::istringstream trace(
      "{\"traceEvents\":[\n"
      "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":\"x\",\"tid\":1,\"args\":{\"name\":5}},\n"
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"pid\":1,\"tid\":1,"
      "\"ts\":0,\"dur\":10},\n"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":7,\"pid\":[1],\"tid\":1,\"ts\":1,\"dur\":2},\n"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":\"3\",\"dur\":2},\n"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"b\",\"pid\":1,\"tid\":1,\"ts\":4,\"dur\":1e999},\n"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"c\",\"pid\":1,\"tid\":1,\"ts\":5,\"du\n"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"d\",\"pid\":1,\"tid\":1,\"ts\":6,\"dur\":3}\n]}\n");
  HostFlame flame = exporter::read_host_flame(trace, {});
  EXPECT_EQ(flame.steps, 1u);
  ASSERT_GE(flame.root.children.size(), 1u);  // a pid of another type reads as 0: a thread of its own
  EXPECT_DOUBLE_EQ(flame.root.children[0].us, 10.0);
  EXPECT_NE(child(flame.root.children[0], "d"), nullptr);
  EXPECT_EQ(child(flame.root.children[0], "a"), nullptr);
}

TEST(HtmlPage, TimesAreShownInMsAndTheCsvTextIsKept) {
  using exporter::html::ms;
  EXPECT_EQ(ms(42), "0.042");
  EXPECT_EQ(ms(3217.4), "3.217");
  EXPECT_EQ(ms(12345), "12.35");
  EXPECT_EQ(ms(412700), "412.7");
  EXPECT_EQ(ms(2500000), "2500");
  exporter::html::TableView view;
  view.step_origins = {{"1", 1000.0}, {"2", 5000.0}};
  std::string html = exporter::html::table({{"Step", "Name", "Start Time(us)", "Duration(us)", "Count"},
                                            {"1", "a<b", "1500.500", "12.000", "3"},
                                            {"2", "c", "5250.000", "7.5", "1"}},
                                           "t", view);
  EXPECT_NE(html.find("<th data-csv=\"Start Time(us)\">Start Time (ms from step start)</th>"),
            std::string::npos);
  EXPECT_NE(html.find("<th data-csv=\"Duration(us)\">Duration (ms)</th>"), std::string::npos);
  EXPECT_NE(html.find("<td data-v=\"1500.500\">0.500</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td data-v=\"5250.000\">0.250</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td class=\"t\">a&lt;b</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>3</td>"), std::string::npos);  // no unit: as written
}

TEST(HtmlPage, Base64MatchesRfc4648) {
  using exporter::html::base64;
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\xff\x00\x80", 3)), "/wCA");
}

}  // namespace
}  // namespace trainprof
