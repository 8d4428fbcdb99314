// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The demo: a CNN trained on Fashion-MNIST with LibTorch, profiled by trainprof
// with a schedule, analysed as each recorded cycle closes, and summarised at
// the end.
//
//   fashion_mnist_demo [OUTPUT_DIR] [STEPS] [WAIT,WARMUP,ACTIVE,REPEAT[,SKIP_FIRST]]
//
// The schedule defaults to 1,1,3,2,10: two recorded cycles after 10 steps;
// REPEAT 0 records a cycle every WAIT + WARMUP + ACTIVE steps until the end.
//
// Data: Debian's dataset-fashion-mnist (gzip IDX files under
// /usr/share/datasets/fashion-mnist/, or $FASHION_MNIST_DIR). Linking
// trainprof::torch is all it takes for LibTorch's operators to be recorded.
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "fashion_mnist_net.h"
#include "trainprof/torch_data.h"
#include "trainprof/trainprof.h"

namespace {

namespace fs = std::filesystem;
using trainprof_demo::FashionMnist;
using trainprof_demo::Net;

double accuracy(Net& net, FashionMnist& test, size_t n) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (size_t i = 0; i < n; i += 500) {
    std::vector<torch::Tensor> xs, ys;
    for (size_t j = i; j < std::min(n, i + 500); ++j) {
      auto e = test.get(j);
      xs.push_back(e.data);
      ys.push_back(e.target);
    }
    correct += net->forward(torch::stack(xs)).argmax(1).eq(torch::stack(ys)).sum().item<int64_t>();
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
}

// Complete cycles that fit in `steps` (a cycle stopped early adds one more run).
int expected_cycles(const trainprof::Schedule& s, int steps) {
  int length = s.wait + s.warmup + s.active;
  int fit = std::max(0, steps - s.skip_first) / std::max(1, length);
  return s.repeat > 0 ? std::min(fit, s.repeat) : fit;
}

// "W,U,A,R" or "W,U,A,R,S" -> Schedule; nullopt when malformed.
std::optional<trainprof::Schedule> parse_schedule(const std::string& text) {
  std::vector<int> v;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string field = text.substr(start, comma - start);
    if (field.empty() || field.size() > 6 || field.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    v.push_back(std::stoi(field));
    start = comma + 1;
  }
  if (v.size() != 4 && v.size() != 5) return std::nullopt;
  trainprof::Schedule s{
      .wait = v[0], .warmup = v[1], .active = v[2], .repeat = v[3], .skip_first = v.size() == 5 ? v[4] : 0};
  try {
    s.validate();
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  return s;
}

int run(const std::string& output, int steps, const trainprof::Schedule& schedule) {
  torch::manual_seed(0);
  torch::set_num_threads(1);  // two cores: one for training, one for the loader workers
  using torch::data::transforms::Stack;
  FashionMnist test_set(false);
  // The wrappers time each sample (worker threads), each batch's collation
  // and each wait of this loop for a batch: dataset.csv and Dataset tracks.
  auto train_set = trainprof::ProfiledDataset<FashionMnist>(FashionMnist(true), "FashionMnist")
                       .map(trainprof::ProfiledBatchTransform<Stack<>>(Stack<>(), "Stack"));
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(train_set), torch::data::DataLoaderOptions().batch_size(64).workers(2));
  Net net;
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  trainprof::ProfilerOptions options;
  options.output_path = output;
  options.record_shapes = true;
  options.with_flops = true;
  options.profile_memory = true;
  options.data_process = true;
  options.schedule = schedule;
  options.on_trace_ready = trainprof::trace_handler(output);  // analyses each cycle as it closes
  trainprof::Profiler prof(options);

  std::printf(
      "training a CNN on Fashion-MNIST for %d steps (batch 64); profiling: skip %d, then %s of wait %d, "
      "warmup %d, active %d\n",
      steps, schedule.skip_first,
      schedule.repeat == 0 ? "cycles until the end" : (std::to_string(schedule.repeat) + " cycle(s)").c_str(),
      schedule.wait, schedule.warmup, schedule.active);
  auto t0 = std::chrono::steady_clock::now();
  int step = 0;
  double running = 0;
  while (step < steps) {
    for (auto& batch : trainprof::ProfiledLoader(*loader)) {
      if (step >= steps) break;
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      running += loss.item<double>();
      prof.step();
      if (++step % 50 == 0) {
        std::printf("  step %4d  loss %.4f\n", step, running / 50);
        running = 0;
      }
    }
  }
  prof.stop();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained %d steps in %.1f s; test accuracy on 2000 images: %.1f%%\n\n", steps, seconds,
              accuracy(net, test_set, 2000));

  // Every cycle's summary when there are a few; the first and the last of many.
  std::vector<std::string> runs = trainprof::find_run_directories(output);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > 3 && i > 0 && i + 1 < runs.size()) continue;
    if (runs.size() > 3 && i + 1 == runs.size()) {
      std::printf("(%zu more cycle(s): ./build/bin/trainprof summary DIR)\n\n", runs.size() - 2);
    }
    std::fputs(trainprof::summarize_run(runs[i]).c_str(), stdout);
    std::printf("\n");
  }
  int expected = expected_cycles(schedule, steps);
  std::printf("%zu recorded cycle(s) under %s (open trace_view.json in https://ui.perfetto.dev)\n",
              runs.size(), output.c_str());
  return static_cast<int>(runs.size()) >= expected && !runs.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines interleave with the profiler's log
  std::string output = argc > 1 ? argv[1] : (fs::current_path() / "trainprof_demo_output").string();
  int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  std::optional<trainprof::Schedule> schedule =
      argc > 3 ? parse_schedule(argv[3])
               : trainprof::Schedule{.wait = 1, .warmup = 1, .active = 3, .repeat = 2, .skip_first = 10};
  if (!schedule) {
    std::fprintf(stderr,
                 "fashion_mnist_demo: SCHEDULE must be WAIT,WARMUP,ACTIVE,REPEAT[,SKIP_FIRST] (ACTIVE >= 1), "
                 "e.g. 1,1,3,0 for a cycle every 5 steps\n");
    return 2;
  }
  if (expected_cycles(*schedule, steps) < 1) {
    std::fprintf(stderr, "fashion_mnist_demo: %d STEPS hold no whole cycle of this schedule\n", steps);
    return 2;
  }
  try {
    return run(output, steps, *schedule);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist_demo: %s\n", e.what());
    return 1;
  }
}
