// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The LibTorch collector against LibTorch's own profiler, on a real (small)
// training loop.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/collector.h"
#include "exporter/csv_reader.h"
#include "raw/varint.h"
#include "test_util.h"
#include "trainprof/torch_data.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

using nlohmann::json;
using OpCounts = std::map<std::string, int>;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(4 * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2);
    return fc(x.flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

// The same deterministic loop for both profilers.
class Training {
 public:
  Training() {
    torch::manual_seed(0);
    torch::set_num_threads(1);
    net_ = Net();
    optimizer_ =
        std::make_unique<torch::optim::SGD>(net_->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    x_ = torch::randn({8, 1, 14, 14});
    y_ = torch::randint(0, 10, {8});
  }
  void step() {
    optimizer_->zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    loss.backward();
    optimizer_->step();
  }
  Net& net() { return net_; }
  const torch::Tensor& x() const { return x_; }

 private:
  Net net_{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  torch::Tensor x_, y_;
};

constexpr int kSteps = 3;

bool is_aten(const std::string& name) {
  return name.rfind("aten::", 0) == 0;
}

json analysed_trace(const std::string& run) {
  AnalyseReport report = analyse(run);
  EXPECT_TRUE(report.ok()) << (report.runs.empty() ? "" : report.runs[0].error);
  return json::parse(test::read_text(run + "/PROFILER_OUTPUT/trace_view.json"));
}

// aten:: cpu_op calls inside each ProfilerStep#N window.
std::vector<OpCounts> counts_per_step(const json& trace) {
  std::vector<std::pair<double, double>> windows;
  for (const json& e : trace["traceEvents"]) {
    std::string name = e.value("name", "");
    if (e.value("ph", "") == "X" && name.rfind("ProfilerStep#", 0) == 0) {
      size_t n = std::stoul(name.substr(13));
      if (windows.size() <= n) windows.resize(n + 1);
      windows[n] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    }
  }
  std::vector<OpCounts> counts(windows.size());
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "cpu_op" || !is_aten(e["name"])) continue;
    double ts = e["ts"].get<double>();
    for (size_t s = 0; s < windows.size(); ++s) {
      if (ts >= windows[s].first && ts < windows[s].second) ++counts[s][e["name"]];
    }
  }
  return counts;
}

TEST(TorchCollector, OperatorCallsPerStepEqualLibTorchProfiler) {
  test::TempDir dir;
  std::vector<OpCounts> ours;
  {
    Training training;
    ProfilerOptions o;
    o.output_path = dir.path();
    Profiler prof(o);
    for (int s = 0; s < kSteps; ++s) {
      training.step();
      prof.step();
    }
    prof.stop();
    ours = counts_per_step(analysed_trace(prof.last_run().run_dir));
  }
  ASSERT_GE(ours.size(), static_cast<size_t>(kSteps));

  Training training;
  for (int s = 0; s < kSteps; ++s) {
    using namespace torch::autograd::profiler;
    enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
    training.step();
    OpCounts theirs;
    for (const auto& thread_events : disableProfilerLegacy()) {
      for (const LegacyEvent& e : thread_events) {
        if (e.kind() == EventKind::PushRange && is_aten(e.name())) ++theirs[e.name()];
      }
    }
    ASSERT_FALSE(theirs.empty());
    EXPECT_EQ(ours[s], theirs) << "step " << s;
  }
}

// The first cpu_op named `name`.
json first_op(const json& trace, const std::string& name) {
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "cpu_op" && e.value("name", "") == name) return e;
  }
  return json();
}

// Profiles `work` with the options `configure` sets; returns the run
// directory.
std::string profile(const test::TempDir& dir, const std::function<void(ProfilerOptions&)>& configure,
                    const std::function<void()>& work) {
  ProfilerOptions o;
  o.output_path = dir.path();
  if (configure) configure(o);
  Profiler prof(o);
  work();
  prof.stop();
  return prof.last_run().run_dir;
}

std::string profile_one_step(const test::TempDir& dir, Training& training,
                             const std::function<void(ProfilerOptions&)>& configure = {}) {
  return profile(dir, configure, [&] { training.step(); });
}

std::vector<int64_t> dims(const torch::Tensor& t) {
  return t.sizes().vec();
}

TEST(TorchCollector, RecordShapesGivesTheTensorsRealShapes) {
  test::TempDir dir;
  Training training;
  std::string run = profile_one_step(dir, training, [](ProfilerOptions& o) { o.record_shapes = true; });
  json trace = analysed_trace(run);

  json conv = first_op(trace, "aten::conv2d");
  ASSERT_TRUE(conv.is_object());
  const json& conv_dims = conv["args"]["Input Dims"];
  EXPECT_EQ(conv_dims[0].get<std::vector<int64_t>>(), dims(training.x()));
  EXPECT_EQ(conv_dims[1].get<std::vector<int64_t>>(), dims(training.net()->conv->weight));
  EXPECT_EQ(conv_dims[2].get<std::vector<int64_t>>(), dims(training.net()->conv->bias));
  EXPECT_EQ(conv["args"]["Input type"][0], "float");
  EXPECT_GE(conv["args"]["Sequence number"].get<int64_t>(), 0);

  // LibTorch's C++ Linear is addmm(bias, input, weight.t()).
  json linear = first_op(trace, "aten::addmm");
  ASSERT_TRUE(linear.is_object());
  const json& linear_dims = linear["args"]["Input Dims"];
  EXPECT_EQ(linear_dims[0].get<std::vector<int64_t>>(), dims(training.net()->fc->bias));
  EXPECT_EQ(linear_dims[1].get<std::vector<int64_t>>(), (std::vector<int64_t>{8, 4 * 7 * 7}));
  EXPECT_EQ(linear_dims[2].get<std::vector<int64_t>>(), dims(training.net()->fc->weight.t()));

  // operator_details.csv has a row per (name, input shapes).
  std::string details = test::read_text(run + "/PROFILER_OUTPUT/operator_details.csv");
  EXPECT_NE(details.find("aten::conv2d,\"[[8,1,14,14],[4,1,3,3],[4],"), std::string::npos) << details;
}

TEST(TorchCollector, BackwardNodesCarryTheirForwardSequenceNumber) {
  test::TempDir dir;
  Training training;
  json trace = analysed_trace(profile_one_step(dir, training));
  json forward = first_op(trace, "aten::addmm");  // the linear layer's forward
  json backward = first_op(trace, "AddmmBackward0");
  ASSERT_TRUE(forward.is_object());
  ASSERT_TRUE(backward.is_object());
  EXPECT_EQ(backward["args"]["Sequence number"], forward["args"]["Sequence number"]);
  EXPECT_NE(backward["args"]["Fwd thread id"].get<int64_t>(), 0);
}

// Every fwdbwd flow goes from a forward op to an autograd node with the same
// sequence number; the linear layer's AddmmBackward0 is linked to its addmm.
TEST(TorchCollector, BackwardNodesAreLinkedToTheirForwardOpsByFlows) {
  test::TempDir dir;
  Training training;
  json trace = analysed_trace(profile_one_step(dir, training));
  json forward = first_op(trace, "aten::addmm");
  json backward = first_op(trace, "AddmmBackward0");
  ASSERT_TRUE(forward.is_object());
  ASSERT_TRUE(backward.is_object());
  EXPECT_EQ(forward["args"]["Fwd thread id"], 0);  // Kineto: set on autograd nodes only

  // (tid, ts) -> the cpu_op that starts there, for both ends of each flow.
  std::map<std::pair<int64_t, double>, json> op_at;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "cpu_op")
      op_at.emplace(std::make_pair(e["tid"].get<int64_t>(), e["ts"].get<double>()), e);
  }
  std::map<int64_t, json> starts, ends;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "fwdbwd") continue;
    (e["ph"] == "s" ? starts : ends)[e["id"].get<int64_t>()] = e;
  }
  ASSERT_FALSE(ends.empty());
  bool addmm_linked = false;
  for (const auto& [id, f] : ends) {
    ASSERT_EQ(starts.count(id), 1u) << "flow " << id << " has no start";
    const json& s = starts[id];
    EXPECT_EQ(f["bp"], "e");
    auto from = op_at.find({s["tid"].get<int64_t>(), s["ts"].get<double>()});
    auto to = op_at.find({f["tid"].get<int64_t>(), f["ts"].get<double>()});
    ASSERT_NE(from, op_at.end()) << "flow " << id << " starts at no operator";
    ASSERT_NE(to, op_at.end()) << "flow " << id << " ends at no operator";
    EXPECT_EQ(from->second["args"]["Sequence number"], to->second["args"]["Sequence number"]);
    EXPECT_NE(to->second["args"]["Fwd thread id"], 0) << to->second.dump();
    if (to->second["name"] == "AddmmBackward0") {
      addmm_linked = true;
      EXPECT_EQ(from->second["name"], "aten::addmm");
      EXPECT_EQ(s["ts"], forward["ts"]);
    }
  }
  EXPECT_TRUE(addmm_linked);
}

// FLOPs of every counted operator equal LibTorch's own profiler's, and the
// REFERENCE formulas for the conv and linear layers.
TEST(TorchCollector, FlopsEqualLibTorchProfilerAndTheFormulas) {
  test::TempDir dir;
  std::map<std::string, uint64_t> ours;
  Training profiled;
  std::string run = profile_one_step(dir, profiled, [](ProfilerOptions& o) { o.with_flops = true; });
  json trace = analysed_trace(run);
  std::string stats = test::read_text(run + "/PROFILER_OUTPUT/op_statistic.csv");
  ASSERT_NE(stats.find("Total FLOPs"), std::string::npos);
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "cpu_op" && e["args"].contains("FLOPs")) {
      ours[e["name"]] += e["args"]["FLOPs"].get<uint64_t>();
    }
  }
  // conv2d: 2 x N x Hout x Wout x Kh x Kw x Cin x Cout / groups; addmm: 2 x M x K x N.
  EXPECT_EQ(first_op(trace, "aten::conv2d")["args"]["FLOPs"], 2 * 8 * 14 * 14 * 3 * 3 * 1 * 4);
  EXPECT_EQ(first_op(trace, "aten::addmm")["args"]["FLOPs"], 2 * 8 * (4 * 7 * 7) * 10);

  Training training;
  using namespace torch::autograd::profiler;
  enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                             /*report_input_shapes=*/true,
                                                             /*profile_memory=*/false, /*with_stack=*/false,
                                                             /*with_flops=*/true));
  training.step();
  std::map<std::string, uint64_t> theirs;
  for (auto& thread_events : disableProfilerLegacy()) {
    for (LegacyEvent& e : thread_events) {
      if (e.kind() == EventKind::PushRange && e.flops() > 0) theirs[e.name()] += e.flops();
    }
  }
  // The step's conv2d, addmm and the mm of the backward pass, at least.
  EXPECT_GE(theirs.size(), 3u);
  EXPECT_EQ(ours, theirs);
}

// More distinct signatures than the per-thread table starts with (64 slots,
// grown at half full): every call keeps its own shapes.
TEST(TorchCollector, RecordShapesKeepsEveryDistinctSignature) {
  test::TempDir dir;
  constexpr int64_t kShapes = 300;
  auto mul = [](int64_t n) { torch::ones({n, 2}).mul(torch::ones({n, 2})); };  // one aten::mul
  std::string run = profile(
      dir, [](ProfilerOptions& o) { o.record_shapes = true; },
      [&] {
        for (int64_t n = 1; n <= kShapes; ++n) mul(n);
        for (int64_t n = 1; n <= kShapes; ++n) mul(n);  // the same again: from the table
      });
  json trace = analysed_trace(run);
  std::map<int64_t, int> calls_by_rows;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "cpu_op" || e.value("name", "") != "aten::mul") continue;
    const json& input = e["args"]["Input Dims"][0];
    ASSERT_EQ(input.size(), 2u) << e.dump();
    EXPECT_EQ(input[1], 2) << e.dump();
    EXPECT_EQ(e["args"]["Input Dims"][1], input) << e.dump();
    ++calls_by_rows[input[0].get<int64_t>()];
  }
  ASSERT_EQ(calls_by_rows.size(), static_cast<size_t>(kShapes));
  for (const auto& [rows, calls] : calls_by_rows) {
    EXPECT_GE(rows, 1);
    EXPECT_LE(rows, kShapes);
    EXPECT_EQ(calls, 2) << "shape [" << rows << ",2]";
  }
}

// Recursion gives each depth its own native stack: the per-thread table of
// stacks grows past its first size and every operator keeps its own.
__attribute__((noinline)) void mul_at_depth(int depth) {
  if (depth > 0) {
    mul_at_depth(depth - 1);
    asm volatile("");  // not a tail call: one frame per level
    return;
  }
  torch::ones({2}).mul(3);
}

TEST(TorchCollector, WithStackKeepsEveryDistinctStack) {
  test::TempDir dir;
  constexpr int kDepths = 40;  // below the 48 frames kept
  std::string run = profile(
      dir, [](ProfilerOptions& o) { o.with_stack = true; },
      [&] {
        for (int d = 0; d < kDepths; ++d) mul_at_depth(d);
      });
  json trace = analysed_trace(run);
  std::set<size_t> recursion_lengths;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "cpu_op" || e.value("name", "") != "aten::mul") continue;
    std::string stack = e["args"].value("Call stack", "");
    size_t frames = 0;
    for (size_t at = stack.find("mul_at_depth"); at != std::string::npos;
         at = stack.find("mul_at_depth", at + 1))
      ++frames;
    recursion_lengths.insert(frames);
  }
  // Depth d shows d + 1 frames of mul_at_depth: 40 different stacks.
  EXPECT_EQ(recursion_lengths.size(), static_cast<size_t>(kDepths));
  EXPECT_EQ(*recursion_lengths.begin(), 1u);
  EXPECT_EQ(*recursion_lengths.rbegin(), static_cast<size_t>(kDepths));
}

// A front end's context (the Python package: its call stack and nn.Module
// path) replaces the native stack: each outermost operator asks the
// providers, nested operators share the answer; neither asks LibTorch for the
// inputs, so no shapes appear.
const char* g_front_end_stack = nullptr;
const char* g_front_end_module = nullptr;

TEST(TorchCollector, FrontEndContextGivesCallStackAndModuleHierarchy) {
  g_front_end_stack = detail::intern("train.py(12): step;train.py(30): <module>");
  g_front_end_module = detail::intern("TOP(Net)::conv1(Conv2d)");
  detail::set_context_providers([]() noexcept { return g_front_end_stack; },
                                []() noexcept { return g_front_end_module; });
  struct Reset {
    ~Reset() { detail::set_context_providers(nullptr, nullptr); }
  } reset;
  test::TempDir dir;
  Training training;
  std::string run = profile_one_step(dir, training, [](ProfilerOptions& o) {
    o.with_stack = true;
    o.with_modules = true;
  });
  json trace = analysed_trace(run);
  for (const char* name : {"aten::conv2d", "aten::convolution"}) {
    json op = first_op(trace, name);
    ASSERT_TRUE(op.is_object()) << name;
    EXPECT_EQ(op["args"].value("Call stack", ""), g_front_end_stack) << op.dump();
    EXPECT_EQ(op["args"].value("Module Hierarchy", ""), g_front_end_module) << op.dump();
    EXPECT_FALSE(op["args"].contains("Input Dims")) << op.dump();
  }
  bool found = false;
  for (const auto& row : exporter::read_csv_file(run + "/PROFILER_OUTPUT/operator_details.csv")) {
    if (row.size() == 10 && row[0] == "aten::conv2d") {
      found = true;
      EXPECT_EQ(row[2], g_front_end_stack);
      EXPECT_EQ(row[9], g_front_end_module);
    }
  }
  EXPECT_TRUE(found);
}

// with_stack: each operator carries the native frames of the code that
// called into LibTorch, symbolized at analysis time (LibTorch's own frames
// dropped), in the timeline and in operator_details.csv.
TEST(TorchCollector, WithStackShowsTheCallingCode) {
  test::TempDir dir;
  Training training;
  std::string run = profile_one_step(dir, training, [](ProfilerOptions& o) { o.with_stack = true; });
  json trace = analysed_trace(run);
  json conv = first_op(trace, "aten::conv2d");
  ASSERT_TRUE(conv.is_object());
  ASSERT_TRUE(conv["args"].contains("Call stack")) << conv.dump();
  std::string stack = conv["args"]["Call stack"];
  // (NetImpl::forward is inlined into Training::step in optimised builds.)
  EXPECT_NE(stack.find("Training::step"), std::string::npos) << stack;
  EXPECT_NE(stack.find("(trainprof_torch_tests)"), std::string::npos) << stack;
  EXPECT_EQ(stack.find("libtorch"), std::string::npos) << stack;
  // Nested operators share the call site of the outermost one.
  json convolution = first_op(trace, "aten::convolution");
  ASSERT_TRUE(convolution.is_object());
  EXPECT_EQ(convolution["args"]["Call stack"], stack);

  bool found = false;
  for (const auto& row : exporter::read_csv_file(run + "/PROFILER_OUTPUT/operator_details.csv")) {
    if (row.size() > 2 && row[0] == "aten::conv2d") {
      found = true;
      EXPECT_NE(row[2].find("Training::step"), std::string::npos) << row[2];
    }
  }
  EXPECT_TRUE(found);
}

// sample_operators = 10: about one aten::add call in 10 is recorded (2000
// calls: 200 expected, 13 the standard deviation), and op_statistic.csv's
// count is the recorded calls x 10, which the summary says.
TEST(TorchCollector, SampleOperatorsRecordsAFractionAndScalesTheStatistics) {
  test::TempDir dir;
  torch::Tensor a = torch::ones({4}), b = torch::ones({4});
  ProfilerOptions o;
  o.output_path = dir.path();
  o.sample_operators = 10;
  Profiler prof(o);
  for (int i = 0; i < 2000; ++i) a = torch::add(a, b);
  prof.step();
  prof.stop();
  std::string run = prof.last_run().run_dir;
  json trace = analysed_trace(run);
  int recorded = 0;
  for (const json& e : trace["traceEvents"])
    recorded += e.value("cat", "") == "cpu_op" && e["name"] == "aten::add";
  EXPECT_GE(recorded, 100);
  EXPECT_LE(recorded, 320);
  std::string stats = test::read_text(run + "/PROFILER_OUTPUT/op_statistic.csv");
  EXPECT_NE(stats.find("\naten::add,HOST," + std::to_string(recorded * 10) + ","), std::string::npos)
      << recorded << "\n"
      << stats;
  std::string summary = summarize_run(run);
  EXPECT_NE(summary.find("operators sampled: about 1 call in 10 recorded"), std::string::npos) << summary;
}

TEST(TorchCollector, NothingIsRecordedWithProfilerLevelNone) {
  test::TempDir dir;
  Training training;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.profiler_level = ProfilerLevel::None;
  Profiler prof(o);
  training.step();
  prof.step();
  prof.stop();
  json trace = analysed_trace(prof.last_run().run_dir);
  int ops = 0, steps = 0;
  for (const json& e : trace["traceEvents"]) {
    ops += e.value("cat", "") == "cpu_op";
    steps += e.value("name", "").rfind("ProfilerStep#", 0) == 0;
  }
  EXPECT_EQ(ops, 0);
  EXPECT_GE(steps, 1);
}

TEST(TorchCollector, PreloadedIntoAnUnmodifiedLibTorchProgram) {
  test::TempDir dir;
  test::ProcessResult r = test::run_process(
      {test::helper_path("torch_plain_child")},
      {{"LD_PRELOAD", TRAINPROF_TEST_TORCH_LIB},
       {"TRAINPROF_OPTIONS", "{\"start\": true, \"output_path\": \"" + dir.path() + "\"}"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u) << r.output;
  json trace = analysed_trace(runs[0]);
  OpCounts counts;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "cpu_op") ++counts[e["name"]];
  }
  EXPECT_EQ(counts["aten::mm"], 5);
  EXPECT_EQ(counts["aten::relu"], 5);
}

// A small dataset: sample i is the vector (i, i), label i.
struct Numbers : torch::data::datasets::Dataset<Numbers> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::tensor(static_cast<int64_t>(i))};
  }
  torch::optional<size_t> size() const override { return 40; }
};

// LibTorch's data loader with 2 workers, wrapped: every sample is a dataset
// stage and every batch a collate stage on the worker threads; every wait of
// the training loop is a wait stage on the main thread.
TEST(TorchData, LoaderStagesAreTimedOnTheThreadsThatRunThem) {
  test::TempDir dir;
  ProfilerOptions o;
  o.output_path = dir.path();
  o.data_process = true;
  Profiler prof(o);
  using torch::data::transforms::Stack;
  auto data =
      ProfiledDataset<Numbers>(Numbers(), "Numbers").map(ProfiledBatchTransform<Stack<>>(Stack<>(), "Stack"));
  auto loader = torch::data::make_data_loader(std::move(data),
                                              torch::data::DataLoaderOptions().batch_size(8).workers(2));
  int batches = 0;
  int64_t label_sum = 0;
  for (auto& batch : ProfiledLoader(*loader)) {
    ++batches;
    label_sum += batch.target.sum().item<int64_t>();
  }
  prof.stop();
  EXPECT_EQ(batches, 5);
  EXPECT_EQ(label_sum, 39 * 40 / 2);  // the wrappers pass every sample through

  std::string run = prof.last_run().run_dir;
  json trace = analysed_trace(run);
  std::string csv = test::read_text(run + "/PROFILER_OUTPUT/dataset.csv");
  EXPECT_NE(csv.find("Numbers,dataset,40,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("Stack,collate,5,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("DataLoader,wait,6,"), std::string::npos) << csv;  // 5 batches, then the end

  int64_t main_track = static_cast<int64_t>(trace["traceEvents"][0]["pid"].get<int64_t>() | 0x40000000);
  int on_main = 0, on_workers = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "dataset") continue;
    bool main = e["tid"].get<int64_t>() == main_track;
    if (e["name"] == "DataLoader") {
      EXPECT_TRUE(main) << e.dump();
      ++on_main;
    } else {
      EXPECT_FALSE(main) << e.dump();
      ++on_workers;
    }
  }
  EXPECT_EQ(on_main, 6);
  EXPECT_EQ(on_workers, 45);
}

// The [memory] instants of a trace, in time order.
std::vector<json> memory_events(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("name", "") == "[memory]" && e.value("ph", "") == "i") out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a["ts"].get<double>() < b["ts"].get<double>();
  });
  return out;
}

// operator_memory.csv rows as header -> value maps.
std::vector<std::map<std::string, std::string>> csv_records(const std::string& path) {
  exporter::CsvRows rows = exporter::read_csv_file(path);
  std::vector<std::map<std::string, std::string>> out;
  for (size_t r = 1; r < rows.size(); ++r) {
    std::map<std::string, std::string> rec;
    for (size_t c = 0; c < rows[0].size() && c < rows[r].size(); ++c) rec[rows[0][c]] = rows[r][c];
    out.push_back(rec);
  }
  return out;
}

int64_t nbytes(const torch::Tensor& t) {
  return static_cast<int64_t>(t.nbytes());
}

TEST(TorchCollector, ProfileMemoryRecordsEveryAllocationWithItsOperatorAndFree) {
  test::TempDir dir;
  Training training;
  torch::Tensor a = torch::randn({16, 32}), b = torch::randn({32, 8});
  ProfilerOptions o;
  o.output_path = dir.path();
  o.profile_memory = true;
  Profiler prof(o);
  training.step();
  prof.step();
  training.step();
  std::vector<torch::Tensor> kept = {torch::empty({1000}), torch::mm(a, b)};
  // A thread of the program's own: the reporter is installed by its first operator.
  std::thread([&kept] { kept.push_back(torch::ones({256})); }).join();
  prof.step();
  prof.stop();
  const std::string run = prof.last_run().run_dir;
  json trace = analysed_trace(run);

  std::vector<json> reports = memory_events(trace);
  ASSERT_GT(reports.size(), 100u);
  // Every report is recorded: c10's running total moves by exactly each
  // report's bytes (one thread: set_num_threads(1)).
  int64_t allocations = 0, frees = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    int64_t bytes = reports[i]["args"]["Bytes"].get<int64_t>();
    (bytes > 0 ? allocations : frees) += 1;
    EXPECT_EQ(reports[i]["args"]["Device Type"], 0);  // c10::DeviceType::CPU
    EXPECT_EQ(reports[i]["args"]["Device Id"], -1);
    if (i == 0) continue;
    ASSERT_EQ(reports[i]["args"]["Total Allocated"].get<int64_t>(),
              reports[i - 1]["args"]["Total Allocated"].get<int64_t>() + bytes)
        << "report " << i;
  }
  EXPECT_GT(frees, 0);
  RecordProperty("allocations", static_cast<int>(allocations));
  RecordProperty("frees", static_cast<int>(frees));

  // What is still allocated at the end is what the program keeps alive:
  // gradients and momentum buffers (made in the first step) and `kept`.
  int64_t live = 0;
  for (const torch::Tensor& p : training.net()->parameters()) live += 2 * nbytes(p.grad());
  for (const torch::Tensor& t : kept) live += nbytes(t);
  int64_t before = reports.front()["args"]["Total Allocated"].get<int64_t>() -
                   reports.front()["args"]["Bytes"].get<int64_t>();
  EXPECT_EQ(reports.back()["args"]["Total Allocated"].get<int64_t>() - before, live);

  // Every free matched to its allocation; the kept tensors never freed and
  // attributed to the operators that made them.
  auto rows = csv_records(run + "/PROFILER_OUTPUT/operator_memory.csv");
  ASSERT_EQ(static_cast<int64_t>(rows.size()), allocations);
  int64_t released = 0;
  for (const auto& r : rows) released += !r.at("Release Time(us)").empty();
  EXPECT_EQ(released, frees);
  json info = json::parse(test::read_text(run + "/PROFILER_OUTPUT/profiler_info.json"));
  EXPECT_EQ(info["analysis"]["memory"]["frees_matched"].get<int64_t>(), frees);

  std::map<uint64_t, std::string> kept_names = {
      {reinterpret_cast<uintptr_t>(kept[0].data_ptr()), "aten::empty"},
      {reinterpret_cast<uintptr_t>(kept[1].data_ptr()), "aten::mm"}};
  int64_t other_thread_allocations = 0;
  for (const json& e : reports) {
    other_thread_allocations += e["tid"] != reports.front()["tid"] && e["args"]["Bytes"] == nbytes(kept[2]);
  }
  EXPECT_EQ(other_thread_allocations, 1);
  for (const auto& [addr, name] : kept_names) {
    auto last = std::find_if(reports.rbegin(), reports.rend(),
                             [addr](const json& e) { return e["args"]["Addr"].get<uint64_t>() == addr; });
    ASSERT_NE(last, reports.rend()) << name;
    EXPECT_GT((*last)["args"]["Bytes"].get<int64_t>(), 0) << name << " was freed";
  }
  // Size(KB) as the CSV writes it.
  auto kb = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3f", static_cast<double>(bytes) / 1024.0);
    return std::string(text);
  };
  auto unreleased = [&](const std::string& name, int64_t bytes) {
    return std::count_if(rows.begin(), rows.end(), [&](const auto& r) {
      return r.at("Name") == name && r.at("Release Time(us)").empty() && r.at("Size(KB)") == kb(bytes);
    });
  };
  EXPECT_GE(unreleased("aten::empty", nbytes(kept[0])), 1);
  EXPECT_GE(unreleased("aten::mm", nbytes(kept[1])), 1);

  // One memory_record.csv row per report; a per-step peak that covers at
  // least what is live at the end of the last step.
  auto records = csv_records(run + "/PROFILER_OUTPUT/memory_record.csv");
  ASSERT_EQ(records.size(), reports.size());
  EXPECT_EQ(records[0].at("Component"), "LibTorch");
  EXPECT_EQ(records[0].at("Device Type"), "CPU");
  const json& steps = info["analysis"]["memory"]["steps"];
  ASSERT_EQ(steps.size(), 1u);  // step 1: 0 is the start-up, 2 the empty tail
  EXPECT_EQ(steps.back()["Device Type"], "CPU");
  EXPECT_GE(steps.back()["Peak Memory(bytes)"].get<int64_t>(),
            reports.back()["args"]["Total Allocated"].get<int64_t>());
}

// LibTorch's own profiler refuses to start on a thread whose debug info
// holds another profiler state: after a session with profile_memory it must
// start again on every thread that ran operators during the session.
bool libtorch_profiler_starts() {
  using namespace torch::profiler::impl;
  ProfilerConfig config(ProfilerState::KINETO, false, /*profile_memory=*/true);
  try {
    torch::autograd::profiler::prepareProfiler(config, {ActivityType::CPU});
    torch::autograd::profiler::enableProfiler(config, {ActivityType::CPU});
  } catch (const c10::Error& e) {
    ADD_FAILURE() << e.what_without_backtrace();
    return false;
  }
  torch::ones({8}).add(1);
  torch::autograd::profiler::disableProfiler();
  return true;
}

// An allocation LibTorch's CPU allocator cannot make (4 TiB: more than the
// machine can map) is written with its operator before the error reaches
// the caller, which sees LibTorch's own error; with and without
// profile_memory (the allocator tells the reporter, or the allocator watch
// notes it).
TEST(TorchCollector, AFailedAllocationIsWrittenBeforeTheErrorGoesOn) {
  for (bool memory : {true, false}) {
    SCOPED_TRACE(memory ? "profile_memory" : "operators only");
    test::TempDir dir;
    ProfilerOptions o;
    o.output_path = dir.path();
    o.profile_memory = memory;
    Profiler prof(o);
    torch::Tensor kept = torch::ones({1024});
    std::string error;
    try {
      torch::Tensor huge = torch::empty({int64_t{1} << 40});
    } catch (const c10::Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("DefaultCPUAllocator"), std::string::npos) << error;
    // On disk before stop(): read the raw file as it is now.
    raw::RawFile f = test::read_run(prof.current_run_dir());
    int failed = 0;
    std::string op;
    for (const auto& e : f.events) {
      if (e.kind == raw::EventKind::kMemory && raw::memory_failed(e.device)) {
        ++failed;
        EXPECT_EQ(raw::unzigzag(e.a), int64_t{4} << 40);
        EXPECT_EQ(e.b, 0u);
      }
      if (e.kind == raw::EventKind::kMark && f.name(static_cast<uint32_t>(e.a)) == "out of memory")
        op = f.name(e.name_id);
    }
    EXPECT_EQ(failed, 1);
    EXPECT_EQ(op, "aten::empty");
    prof.stop();
  }
}

// Under a flight recorder nothing is on disk until a dump: the failure
// writes the ring, on the failing thread, before the error reaches the
// training's handler; its analysis follows on the recorder's thread.
TEST(TorchCollector, AFailedAllocationDumpsTheFlightRecordersRingBeforeTheErrorGoesOn) {
  test::TempDir dir;
  FlightRecorderOptions o;
  o.profiler.output_path = dir.path();
  o.profiler.profile_memory = true;
  o.ring_mb = 8;
  o.slow_step_factor = 0;
  o.hang_timeout_s = 0;
  o.dump_signal = 0;
  FlightRecorder recorder(o);
  ASSERT_TRUE(recorder.recording());
  Training training;
  for (int i = 0; i < 3; ++i) {
    training.step();
    recorder.step();
  }
  torch::Tensor kept = torch::ones({1024, 1024});  // 4 MiB alive at the failure
  int caught = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<FlightDump> before_handler;
    try {
      torch::Tensor huge = torch::empty({int64_t{1} << 40});
    } catch (const c10::Error& e) {
      ++caught;
      before_handler = recorder.dumps();
      EXPECT_NE(std::string(e.what()).find("DefaultCPUAllocator"), std::string::npos)
          << "torch's error, unchanged";
    }
    if (attempt > 0) {
      EXPECT_TRUE(before_handler.size() == 1) << "a second failure within cooldown_s is not dumped again";
      continue;
    }
    ASSERT_EQ(before_handler.size(), 1u);
    const FlightDump& d = before_handler[0];
    EXPECT_EQ(d.trigger, "out_of_memory");
    EXPECT_EQ(d.reason, "an allocation of 4398046511104 bytes on CPU failed in aten::empty during step 3");
    ASSERT_FALSE(d.run_dir.empty()) << d.error;
    raw::RawFile f = test::read_run(d.run_dir);
    int failed = 0;
    bool kept_recorded = false;
    for (const auto& e : f.events) {
      if (e.kind != raw::EventKind::kMemory) continue;
      if (raw::memory_failed(e.device)) ++failed;
      if (!raw::memory_failed(e.device) && raw::unzigzag(e.a) == int64_t{4} << 20) kept_recorded = true;
    }
    EXPECT_EQ(failed, 1);
    EXPECT_TRUE(kept_recorded) << "the ring holds the allocations before the failure";
  }
  EXPECT_EQ(caught, 2);
  // The exception that ends the training, in the same step: the dump written
  // at the failure is its dump.
  FlightDump same = recorder.dump("uncaught exception: c10::Error", "exception");
  std::vector<FlightDump> dumps = recorder.dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(same.run_dir, dumps[0].run_dir);
  recorder.wait_for_dumps();
  std::string report = test::read_text(dumps[0].run_dir + "/PROFILER_OUTPUT/oom_report.txt");
  EXPECT_EQ(report.rfind("Out of memory on CPU: an allocation of 4398046511104 bytes", 0), 0u) << report;
  EXPECT_NE(report.find("4.000 MB"), std::string::npos) << report;
  json info = json::parse(test::read_text(dumps[0].run_dir + "/profiler_info.json"));
  EXPECT_EQ(info["flight_recorder"]["trigger"], "out_of_memory");
  EXPECT_EQ(info["flight_recorder"]["bytes"], uint64_t{4} << 40);
  // A step later, the exception is another step's: dumped as such.
  training.step();
  recorder.step();
  FlightDump later = recorder.dump("uncaught exception: later", "exception");
  EXPECT_NE(later.run_dir, dumps[0].run_dir);
  EXPECT_EQ(later.trigger, "exception");
}

TEST(TorchCollector, LibTorchProfilerStartsAgainAfterAMemorySession) {
  test::TempDir dir;
  Training training;
  std::promise<void> session_over;
  std::promise<bool> worker_result;
  std::promise<void> worker_ran;
  std::thread worker;
  {
    ProfilerOptions o;
    o.output_path = dir.path();
    o.profile_memory = true;
    Profiler prof(o);
    training.step();
    worker = std::thread([&] {
      torch::ones({8}).mul(2);  // installs the reporter on this thread
      worker_ran.set_value();
      session_over.get_future().wait();
      torch::ones({8}).mul(2);  // its first allocation after the session takes the reporter out
      worker_result.set_value(libtorch_profiler_starts());
    });
    worker_ran.get_future().wait();
    prof.stop();
  }
  EXPECT_TRUE(libtorch_profiler_starts()) << "on the thread that stopped the session";
  session_over.set_value();
  EXPECT_TRUE(worker_result.get_future().get()) << "on a thread that ran operators during the session";
  worker.join();
}

// Whether any RecordFunction callback would run for an operator on this
// thread (LibTorch's profiler is off here: only trainprof's could).
bool operator_callbacks_active() {
  at::RecordFunction probe(at::RecordScope::FUNCTION);
  return probe.isActive();
}

// Once a session with profile_memory is over, no callback of trainprof runs
// for any operator, even while another thread still holds the memory
// reporter; that thread lets it go at its next allocation.
TEST(TorchCollector, NoCallbackRunsAfterAMemorySessionEnds) {
  test::TempDir dir;
  std::promise<void> stopped;
  std::promise<bool> worker_result;
  std::thread worker;
  {
    ProfilerOptions o;
    o.output_path = dir.path();
    o.profile_memory = true;
    Profiler prof(o);
    std::promise<void> ran;
    worker = std::thread([&] {
      torch::ones({8}).mul(2);  // installs the reporter on this thread
      ran.set_value();
      stopped.get_future().wait();
      EXPECT_FALSE(operator_callbacks_active());  // no callback, reporter still held
      torch::ones({8});                           // an allocation lets it go
      worker_result.set_value(libtorch_profiler_starts());
    });
    ran.get_future().wait();
    EXPECT_TRUE(operator_callbacks_active());
    prof.stop();
  }
  EXPECT_FALSE(operator_callbacks_active());
  stopped.set_value();
  EXPECT_TRUE(worker_result.get_future().get()) << "LibTorch's profiler on the thread that held the reporter";
  worker.join();
}

bool holds_profiler_state() {
  return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr;
}

// Code that annotates itself (torch.compile's graph ranges) makes a range
// only where the thread holds a profiler state: a session that records
// operators stands there on every thread that runs one, without
// profile_memory too, then reports no memory; and gives the place back
// after the session, so that LibTorch's own profiler starts there.
TEST(TorchCollector, ASessionStandsAsAProfilerStateWithoutReportingMemory) {
  test::TempDir dir;
  Training training;
  std::promise<void> stopped;
  std::promise<bool> worker_held, worker_result;
  std::thread worker;
  std::string run;
  {
    ProfilerOptions o;
    o.output_path = dir.path();
    Profiler prof(o);
    EXPECT_TRUE(holds_profiler_state()) << "on the thread that started the session";
    training.step();
    std::promise<void> ran;
    worker = std::thread([&] {
      torch::ones({8}).mul(2);  // an operator: the state is installed here too
      worker_held.set_value(holds_profiler_state());
      ran.set_value();
      stopped.get_future().wait();
      torch::ones({8});  // its first allocation after the session lets it go
      worker_result.set_value(!holds_profiler_state() && libtorch_profiler_starts());
    });
    ran.get_future().wait();
    prof.stop();
    run = prof.last_run().run_dir;
  }
  EXPECT_FALSE(holds_profiler_state()) << "after the session, on the thread that stopped it";
  EXPECT_TRUE(libtorch_profiler_starts());
  stopped.set_value();
  EXPECT_TRUE(worker_held.get_future().get()) << "a thread that ran an operator holds it";
  EXPECT_TRUE(worker_result.get_future().get()) << "and gives it back after the session";
  worker.join();
  json trace = analysed_trace(run);
  size_t operators = 0;
  for (const json& e : trace["traceEvents"]) operators += e.value("cat", "") == "cpu_op" ? 1 : 0;
  EXPECT_GT(operators, 50u);
  EXPECT_TRUE(memory_events(trace).empty()) << "no memory report without profile_memory";
}

// The preloaded collector with profile_memory: the process exits normally
// (LibTorch's thread-local debug info is torn down before the exit handler
// that closes the run), and the memory reports are in the run.
TEST(TorchCollector, PreloadedWithProfileMemoryExitsCleanly) {
  test::TempDir dir;
  test::ProcessResult r = test::run_process(
      {test::helper_path("torch_plain_child")},
      {{"LD_PRELOAD", TRAINPROF_TEST_TORCH_LIB},
       {"TRAINPROF_OPTIONS",
        "{\"start\": true, \"profile_memory\": true, \"output_path\": \"" + dir.path() + "\"}"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.term_signal, 0) << r.output;
  EXPECT_NE(r.output.find("total 180"), std::string::npos) << r.output;
  std::vector<std::string> runs = test::run_dirs(dir.path());
  ASSERT_EQ(runs.size(), 1u) << r.output;
  raw::RawFile f = test::read_run(runs[0]);
  EXPECT_TRUE(f.closed_cleanly);
  size_t memory_events = 0;
  for (const raw::RawEvent& e : f.events) memory_events += e.kind == raw::EventKind::kMemory;
  EXPECT_GT(memory_events, 10u);
}

}  // namespace
}  // namespace trainprof
