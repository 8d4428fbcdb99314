// Copyright trainprof authors. A multi-threaded "training" loop, profiled.
//
// Until the LibTorch demo exists this is the main job: two loader threads
// prepare batches (real work: filling and normalising float tensors), the main
// thread runs forward / backward / optimizer (real work: small matrix
// products), and trainprof records it with a schedule. At the end it prints,
// for each recorded cycle, where the time went and where the data is.
//
//   trainprof_example_threads [output_dir] [steps]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "raw/raw_reader.h"
#include "trainprof/trainprof.h"

namespace {

constexpr int kBatch = 64;
constexpr int kFeatures = 256;
constexpr int kHidden = 128;

using Matrix = std::vector<float>;

// out[m x n] = a[m x k] * b[k x n]
void matmul(const Matrix& a, const Matrix& b, Matrix& out, int m, int k, int n) {
  TRAINPROF_RANGE("matmul");
  std::fill(out.begin(), out.end(), 0.0f);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) {
      float av = a[i * k + p];
      for (int j = 0; j < n; ++j) out[i * n + j] += av * b[p * n + j];
    }
}

class BatchQueue {
 public:
  void push(Matrix batch) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return q_.size() < 4 || closed_; });
    q_.push_back(std::move(batch));
    cv_.notify_all();
  }
  bool pop(Matrix* out) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !q_.empty() || closed_; });
    if (q_.empty()) return false;
    *out = std::move(q_.front());
    q_.pop_front();
    cv_.notify_all();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Matrix> q_;
  bool closed_ = false;
};

void loader(int id, BatchQueue* queue, const std::atomic<bool>* stop) {
  trainprof::set_thread_name("loader-" + std::to_string(id));
  std::mt19937 rng(id);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  while (!*stop) {
    Matrix batch(kBatch * kFeatures);
    {
      TRAINPROF_RANGE("dataset.get");
      for (float& v : batch) v = noise(rng);
    }
    {
      TRAINPROF_RANGE("transform.normalize");
      float mean = 0;
      for (float v : batch) mean += v;
      mean /= static_cast<float>(batch.size());
      for (float& v : batch) v -= mean;
    }
    queue->push(std::move(batch));
  }
}

void print_summary(const std::string& run_dir) {
  std::string error;
  auto files = trainprof::raw::read_run_directory(run_dir, &error);
  if (!files) {
    std::printf("  cannot read %s: %s\n", run_dir.c_str(), error.c_str());
    return;
  }
  const trainprof::raw::RawFile& f = files->front();
  struct Total { uint64_t ns = 0; uint64_t count = 0; };
  std::map<std::string, Total> totals;
  std::vector<std::pair<uint64_t, uint64_t>> steps;  // step, duration
  for (const auto& e : f.events) {
    if (e.kind == trainprof::raw::EventKind::kRange) {
      Total& t = totals[f.name(e.name_id)];
      t.ns += e.t1_ns - e.t0_ns;
      ++t.count;
    } else if (e.kind == trainprof::raw::EventKind::kStep) {
      steps.emplace_back(e.b, e.t1_ns - e.t0_ns);
    }
  }
  std::vector<std::pair<std::string, Total>> sorted(totals.begin(), totals.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.ns > b.second.ns; });
  std::printf("  run: %s\n  events: %zu, dropped: %llu\n", run_dir.c_str(), f.events.size(),
              static_cast<unsigned long long>(f.reported_events_dropped));
  std::sort(steps.begin(), steps.end());
  for (auto& [step, ns] : steps) std::printf("  ProfilerStep#%llu: %.3f ms\n", (unsigned long long)step, ns / 1e6);
  std::printf("  %-24s %10s %12s %10s\n", "range (all threads)", "calls", "total ms", "avg us");
  for (size_t i = 0; i < sorted.size() && i < 8; ++i) {
    const auto& [name, t] = sorted[i];
    std::printf("  %-24s %10llu %12.3f %10.2f\n", name.c_str(), (unsigned long long)t.count, t.ns / 1e6,
                t.ns / 1e3 / static_cast<double>(t.count));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = argc > 1 ? argv[1] : "./trainprof_output";
  int steps = argc > 2 ? std::atoi(argv[2]) : 12;

  std::vector<std::string> runs;
  trainprof::ProfilerOptions options;
  options.schedule = trainprof::Schedule{.wait = 1, .warmup = 1, .active = 3, .repeat = 2, .skip_first = 1};
  auto handler = trainprof::trace_handler(out, {}, /*analyse=*/false);
  options.on_trace_ready = [&runs, handler](trainprof::Profiler& p) {
    handler(p);
    runs.push_back(p.last_run().run_dir);
  };
  options.output_path = out;
  trainprof::Profiler prof(options);
  prof.add_metadata("example", "multithreaded_pipeline");

  BatchQueue queue;
  std::atomic<bool> stop{false};
  std::vector<std::thread> loaders;
  for (int i = 0; i < 2; ++i) loaders.emplace_back(loader, i, &queue, &stop);

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> init(-0.05f, 0.05f);
  Matrix w1(kFeatures * kHidden), w2(kHidden * kHidden), h1(kBatch * kHidden), h2(kBatch * kHidden);
  for (float& v : w1) v = init(rng);
  for (float& v : w2) v = init(rng);
  trainprof::set_thread_name("train-main");
  for (int step = 0; step < steps; ++step) {
    Matrix batch;
    {
      TRAINPROF_RANGE("dataloader.wait");
      queue.pop(&batch);
    }
    float loss = 0;
    {
      TRAINPROF_RANGE("forward");
      matmul(batch, w1, h1, kBatch, kFeatures, kHidden);
      for (float& v : h1) v = std::max(v, 0.0f);
      matmul(h1, w2, h2, kBatch, kHidden, kHidden);
      for (float v : h2) loss += v * v;
      loss /= static_cast<float>(h2.size());
    }
    {
      TRAINPROF_RANGE("backward");
      matmul(h1, w2, h2, kBatch, kHidden, kHidden);
      matmul(batch, w1, h1, kBatch, kFeatures, kHidden);
    }
    {
      TRAINPROF_RANGE("optimizer.step");
      for (size_t i = 0; i < w2.size(); ++i) w2[i] -= 1e-3f * h2[i % h2.size()];
    }
    trainprof::counter("loss", loss);
    std::printf("step %2d  loss %.5f  (%s)\n", step, loss, std::string(trainprof::to_string(prof.current_action())).c_str());
    prof.step();
  }
  prof.stop();
  stop = true;
  queue.close();
  for (auto& t : loaders) t.join();

  std::printf("\n%zu recorded cycle(s):\n", runs.size());
  for (const std::string& run : runs) print_summary(run);
  std::printf("\nraw data and profiler_info.json are under %s\n", out.c_str());
  return runs.empty() ? 1 : 0;
}
