// Copyright trainprof authors. What profiling costs a real LibTorch training
// step: the demo's CNN (batch 64, Fashion-MNIST-sized inputs), one process,
// configurations interleaved round by round so that they share the machine's
// state:
//   none            no profiler
//   bare_callback   a global RecordFunction callback that does nothing: the
//                   floor LibTorch itself imposes on any operator profiler
//   trainprof       trainprof recording operators (Activity::CPU, Level0)
//   torch           LibTorch's profiler (the Kineto-state profiler that
//                   torch.profiler drives), CPU activity
//   trainprof_full  trainprof with record_shapes + profile_memory
//   torch_full      LibTorch's profiler with report_input_shapes + profile_memory
//   trainprof_stack trainprof with with_stack (a native unwind per outermost op)
//
//   build/bin/trainprof_torch_overhead [--rounds R] [--steps S] [--batch B]
//
// Step time is the training thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
// wall time on this VM varies by more than the profilers add. Prints the
// median step time of each configuration and the time each adds
// to an unprofiled step: per round, the median of its steps minus the
// median of the round's unprofiled steps; then the median over rounds (so a
// drift of the machine between rounds cancels). Then the ratios the issue
// asks for. A small batch (--batch 4) makes the per-operator cost, which is
// what profilers add, a larger share of the step. Figures go to
// docs/PERFORMANCE.md with this command line.
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <algorithm>
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
  auto trainprof_config = [&](bool full, bool stack = false) {
    return [&, full, stack] {
      trainprof::ProfilerOptions o;
      o.output_path = out.string();
      o.record_shapes = full;
      o.profile_memory = full;
      o.with_stack = stack;
      prof = std::make_unique<trainprof::Profiler>(o);
    };
  };
  auto torch_config = [](bool full) {
    return [full] {
      using namespace torch::profiler::impl;
      ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/full, /*profile_memory=*/full);
      std::set<ActivityType> activities{ActivityType::CPU};
      torch::autograd::profiler::prepareProfiler(config, activities);
      torch::autograd::profiler::enableProfiler(config, activities);
    };
  };
  auto torch_stop = [] { torch::autograd::profiler::disableProfiler(); };
  auto torch_step = [] { RECORD_USER_SCOPE("ProfilerStep#"); };
  at::CallbackHandle bare = at::INVALID_CALLBACK_HANDLE;
  std::vector<Config> configs = {
      {"none", [] {}, [] {}, [] {}},
      {"bare_callback",
       [&] {
         at::RecordFunctionCallback cb(&noop_start, &noop_end);
         cb.scopes(
             {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
         bare = at::addGlobalCallback(cb);
       },
       [] {}, [&] { at::removeCallback(bare); }},
      {"trainprof", trainprof_config(false), [&] { prof->step(); }, [&] { prof->stop(); }},
      {"torch", torch_config(false), torch_step, torch_stop},
      {"trainprof_full", trainprof_config(true), [&] { prof->step(); }, [&] { prof->stop(); }},
      {"torch_full", torch_config(true), torch_step, torch_stop},
      {"trainprof_stack", trainprof_config(false, true), [&] { prof->step(); }, [&] { prof->stop(); }},
  };

  TrainingStep training(batch);
  for (int i = 0; i < 10; ++i) training.run();  // warm the allocator and caches
  std::map<std::string, std::vector<double>> step_ms, added_per_round;
  for (int r = 0; r < rounds; ++r) {
    std::map<std::string, double> round_median;
    for (const Config& c : configs) {
      std::vector<double> times;
      c.start();
      for (int s = 0; s < steps; ++s) {
        double t0 = thread_cpu_ms();
        training.run();
        c.step_marker();
        double ms = thread_cpu_ms() - t0;
        if (s >= 3) times.push_back(ms);  // the first steps of a profiler warm it up
      }
      c.stop();
      prof.reset();
      step_ms[c.name].insert(step_ms[c.name].end(), times.begin(), times.end());
      round_median[c.name] = median(times);
    }
    for (const Config& c : configs)
      added_per_round[c.name].push_back(round_median[c.name] - round_median["none"]);
    std::fprintf(stderr, "round %d of %d done\n", r + 1, rounds);
  }
  fs::remove_all(out);

  std::printf("trainprof %s, LibTorch %s: demo CNN step, batch %d, 1 intra-op thread, %d rounds x %d steps\n",
              std::string(trainprof::version()).c_str(), TORCH_VERSION, batch, rounds, steps);
  std::printf("%-16s %12s %12s\n", "configuration", "step CPU ms", "added (ms)");
  std::map<std::string, double> added;
  for (const Config& c : configs) {
    added[c.name] = median(added_per_round[c.name]);
    std::printf("%-16s %12.3f %12.3f\n", c.name, median(step_ms[c.name]), added[c.name]);
  }
  auto ratio = [&](const char* a, const char* b) { return added[b] > 0 ? added[a] / added[b] : 0.0; };
  std::printf("trainprof added / torch added (operators):             %.2f (target <= 0.33)\n",
              ratio("trainprof", "torch"));
  std::printf("trainprof added / torch added (shapes + memory):       %.2f (target <= 0.33)\n",
              ratio("trainprof_full", "torch_full"));
  std::printf("trainprof added / bare callback added (operators):     %.2f (target <= 1.5)\n",
              ratio("trainprof", "bare_callback"));
  return 0;
}
