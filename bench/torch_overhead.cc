// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What profiling costs a real LibTorch training step and per operator: the
// demo's CNN (batch 64, Fashion-MNIST-sized inputs) and a loop of tiny
// operators, one process, configurations interleaved round by round so that
// they share the machine's state:
//   none            no profiler
//   bare_callback   a global RecordFunction callback that does nothing: the
//                   floor LibTorch itself imposes on any operator profiler
//   bare_full       the same asking for inputs, plus a memory reporter that
//                   does nothing: LibTorch's floor for shapes + memory
//   trainprof       trainprof recording operators (Activity::CPU, Level0)
//   torch           LibTorch's profiler (the Kineto-state profiler that
//                   torch.profiler drives), CPU activity
//   trainprof_full  trainprof with record_shapes + profile_memory
//   torch_full      LibTorch's profiler with report_input_shapes + profile_memory
//   trainprof_stack trainprof with with_stack (a native unwind per outermost op)
//
//   build/bin/trainprof_torch_overhead [--rounds R] [--steps S] [--batch B]
//
// Time is the training thread's CPU time (CLOCK_THREAD_CPUTIME_ID): wall
// time on this VM varies by more than the profilers add. Each configuration's
// added time is, per round, the median of its samples minus the median of
// the round's unprofiled samples; then the median over rounds (so a drift of
// the machine between rounds cancels). Two workloads:
//   1. the demo's training step (a small batch, --batch 4, makes the
//      per-operator cost, which is what profilers add, a larger share);
//   2. a loop of tiny operators (x.add_(1) on a one-element tensor), where
//      the cost per operator stands out of the noise: ns per operator.
// Then the ratios the issue asks for, and the floor's share of torch's
// cost. Figures go to docs/PERFORMANCE.md with this command line.
#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../examples/fashion_mnist_net.h"
#include "trainprof/trainprof.h"

namespace {

namespace fs = std::filesystem;

class TrainingStep {
 public:
  explicit TrainingStep(int64_t batch)
      : optimizer_(net_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)) {
    x_ = torch::randn({batch, 1, 28, 28});
    y_ = torch::randint(0, 10, {batch});
  }
  void run() {
    optimizer_.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    loss.backward();
    optimizer_.step();
  }

 private:
  trainprof_demo::Net net_;
  torch::optim::SGD optimizer_;
  torch::Tensor x_, y_;
};

// One configuration: starts its profiler, steps, stops it. `step_marker`
// runs around each step (the profilers' step marks).
struct Config {
  const char* name;
  std::function<void()> start;
  std::function<void()> step_marker;
  std::function<void()> stop;
};

std::unique_ptr<at::ObserverContext> noop_start(const at::RecordFunction&) {
  return nullptr;
}
void noop_end(const at::RecordFunction&, at::ObserverContext*) {}

// A memory reporter that drops every report: what LibTorch's allocators cost
// once a profiler asks for memory (they then track every block's size).
class NoopMemoryReporter final : public torch::profiler::impl::ProfilerStateBase {
 public:
  NoopMemoryReporter()
      : ProfilerStateBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)) {}
  void reportMemoryUsage(void*, int64_t, int64_t, int64_t, c10::Device) override {}
  bool memoryProfilingEnabled() const override { return true; }
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
};

// CPU time of the training thread: what profiling adds to the step's own
// work, without the time this 2-core VM's other tenants take from it.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A global callback on the scopes trainprof records, ending in noop_end.
at::CallbackHandle add_operator_callback(at::RecordFunctionCallback::StartCallback start, bool inputs) {
  at::RecordFunctionCallback cb(start, &noop_end);
  cb.needsInputs(inputs);
  cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
  return at::addGlobalCallback(cb);
}

// Times of one workload under each configuration.
struct Measured {
  std::map<std::string, double> median_ms;  // per sample, all rounds
  std::map<std::string, double> added_ms;   // median over rounds of (config - none)
  double ratio(const char* a, const char* b) const {
    return added_ms.at(b) > 0 ? added_ms.at(a) / added_ms.at(b) : 0.0;
  }
};

// Runs `work` `samples` times per configuration per round, configurations
// interleaved round by round; each configuration's added time is, per round,
// the median of its samples minus the median of the round's unprofiled
// ones, then the median over rounds (a drift of the machine between rounds
// cancels).
Measured measure(const std::vector<Config>& configs, int rounds, int samples,
                 const std::function<void()>& work) {
  std::map<std::string, std::vector<double>> all, added_per_round;
  for (int r = 0; r < rounds; ++r) {
    std::map<std::string, double> round_median;
    for (const Config& c : configs) {
      std::vector<double> times;
      c.start();
      for (int s = 0; s < samples; ++s) {
        double t0 = thread_cpu_ms();
        work();
        c.step_marker();
        double ms = thread_cpu_ms() - t0;
        if (s >= 3) times.push_back(ms);  // the first samples of a profiler warm it up
      }
      c.stop();
      all[c.name].insert(all[c.name].end(), times.begin(), times.end());
      round_median[c.name] = median(times);
    }
    for (const Config& c : configs)
      added_per_round[c.name].push_back(round_median[c.name] - round_median["none"]);
    std::fprintf(stderr, "round %d of %d done\n", r + 1, rounds);
  }
  Measured m;
  for (const Config& c : configs) {
    m.median_ms[c.name] = median(all[c.name]);
    m.added_ms[c.name] = median(added_per_round[c.name]);
  }
  return m;
}

void print_table(const std::vector<Config>& configs, const Measured& m, const char* time_label,
                 const char* added_label, double scale) {
  std::printf("%-16s %12s %12s\n", "configuration", time_label, added_label);
  for (const Config& c : configs)
    std::printf("%-16s %12.3f %12.3f\n", c.name, m.median_ms.at(c.name) * scale,
                m.added_ms.at(c.name) * scale);
}

// How many operators (RecordFunction ranges) one call of `work` runs.
std::atomic<int64_t> g_counted{0};
std::unique_ptr<at::ObserverContext> count_start(const at::RecordFunction&) {
  g_counted.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}
double operators_per_call(const std::function<void()>& work) {
  at::CallbackHandle h = add_operator_callback(&count_start, /*inputs=*/false);
  g_counted = 0;
  for (int i = 0; i < 100; ++i) work();
  at::removeCallback(h);
  return static_cast<double>(g_counted.load()) / 100;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, steps = 40, batch = 64;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--batch") == 0) batch = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[++i]);
  }
  torch::manual_seed(0);
  torch::set_num_threads(1);  // one core per step: less noise on a 2-core VM
  fs::path out = fs::temp_directory_path() / ("trainprof_overhead_" + std::to_string(getpid()));

  std::unique_ptr<trainprof::Profiler> prof;
  auto trainprof_config = [&](const char* name, bool full, bool stack) {
    return Config{name,
                  [&, full, stack] {
                    trainprof::ProfilerOptions o;
                    o.output_path = out.string();
                    o.record_shapes = full;
                    o.profile_memory = full;
                    o.with_stack = stack;
                    prof = std::make_unique<trainprof::Profiler>(o);
                  },
                  [&] { prof->step(); },
                  [&] {
                    prof->stop();
                    prof.reset();
                  }};
  };
  auto torch_config = [](const char* name, bool full) {
    return Config{name,
                  [full] {
                    using namespace torch::profiler::impl;
                    ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/full,
                                          /*profile_memory=*/full);
                    std::set<ActivityType> activities{ActivityType::CPU};
                    torch::autograd::profiler::prepareProfiler(config, activities);
                    torch::autograd::profiler::enableProfiler(config, activities);
                  },
                  [] { RECORD_USER_SCOPE("ProfilerStep#"); },
                  [] { torch::autograd::profiler::disableProfiler(); }};
  };
  // The floor: a callback that does nothing; `full` also asks for inputs and
  // installs a memory reporter that drops every report.
  at::CallbackHandle bare = at::INVALID_CALLBACK_HANDLE;
  auto bare_config = [&](const char* name, bool full) {
    return Config{name,
                  [&, full] {
                    bare = add_operator_callback(&noop_start, full);
                    if (full) {
                      c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE,
                                                       std::make_shared<NoopMemoryReporter>());
                    }
                  },
                  [] {},
                  [&, full] {
                    if (full) c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
                    at::removeCallback(bare);
                  }};
  };
  std::vector<Config> configs = {
      {"none", [] {}, [] {}, [] {}},    bare_config("bare_callback", false),
      bare_config("bare_full", true),   trainprof_config("trainprof", false, false),
      torch_config("torch", false),     trainprof_config("trainprof_full", true, false),
      torch_config("torch_full", true), trainprof_config("trainprof_stack", false, true),
  };

  // Part 1: the demo's training step.
  TrainingStep training(batch);
  for (int i = 0; i < 10; ++i) training.run();  // warm the allocator and caches
  Measured step = measure(configs, rounds, steps, [&] { training.run(); });
  std::printf("trainprof %s, LibTorch %s: demo CNN step, batch %d, 1 intra-op thread, %d rounds x %d steps\n",
              std::string(trainprof::version()).c_str(), TORCH_VERSION, batch, rounds, steps);
  print_table(configs, step, "step CPU ms", "added ms", 1.0);

  // Part 2: the cost per operator, where the step's own work does not
  // drown it: a loop of in-place adds of a one-element tensor (each one is
  // several LibTorch operators: counted with a callback).
  torch::Tensor x = torch::ones({1});
  constexpr int kAddsPerSample = 1000;
  auto adds = [&] {
    for (int i = 0; i < kAddsPerSample; ++i) x.add_(1);
  };
  double ops = operators_per_call([&] { x.add_(1); });
  Measured op = measure(configs, rounds, steps, adds);
  std::printf("\nper LibTorch operator (x.add_(1) on a 1-element tensor = %.0f operators, %d per sample)\n",
              ops, kAddsPerSample);
  print_table(configs, op, "ns / op", "added ns", 1e6 / (kAddsPerSample * ops));

  fs::remove_all(out);
  for (const auto& [label, m] : {std::pair{"demo step", &step}, std::pair{"per operator", &op}}) {
    std::printf("\n%s:\n", label);
    std::printf("  trainprof added / torch added (operators):        %.2f (target <= 0.33)\n",
                m->ratio("trainprof", "torch"));
    std::printf("  trainprof added / torch added (shapes + memory):  %.2f (target <= 0.33)\n",
                m->ratio("trainprof_full", "torch_full"));
    std::printf("  trainprof added / bare callback added:            %.2f (target <= 1.5)\n",
                m->ratio("trainprof", "bare_callback"));
    std::printf("  trainprof added / bare floor added (shapes + memory): %.2f\n",
                m->ratio("trainprof_full", "bare_full"));
    std::printf("  bare callback added / torch added (the floor):    %.2f\n",
                m->ratio("bare_callback", "torch"));
    std::printf("  bare floor added / torch added (shapes + memory): %.2f\n",
                m->ratio("bare_full", "torch_full"));
  }
  return 0;
}
