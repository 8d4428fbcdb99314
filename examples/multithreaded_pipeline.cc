// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A multi-threaded "training" loop, profiled.
//
// Until the LibTorch demo exists this is the main job: two loader threads
// prepare batches (real work: filling and normalising float tensors), the main
// thread runs forward / backward / optimizer (real work: small matrix
// products), and trainprof records it with a schedule; trace_handler analyses
// each recorded cycle as it closes. `trainprof summary DIR` then shows where
// the time went (scripts/demo.sh does both).
//
//   trainprof_example_threads [output_dir] [steps]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  std::string out = argc > 1 ? argv[1] : "./trainprof_output";
  int steps = argc > 2 ? std::atoi(argv[2]) : 12;

  std::vector<std::string> runs;
  trainprof::ProfilerOptions options;
  options.schedule = trainprof::Schedule{.wait = 1, .warmup = 1, .active = 3, .repeat = 2, .skip_first = 1};
  auto handler = trainprof::trace_handler(out, {}, /*analyse=*/true);
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
    std::printf("step %2d  loss %.5f  (%s)\n", step, loss,
                std::string(trainprof::to_string(prof.current_action())).c_str());
    prof.step();
  }
  prof.stop();
  stop = true;
  queue.close();
  for (auto& t : loaders) t.join();

  std::printf("\n%zu recorded and analysed cycle(s) under %s\n", runs.size(), out.c_str());
  return runs.empty() ? 1 : 0;
}
