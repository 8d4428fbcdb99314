// A plain CUDA C++ program profiled by trainprof (scripts/gpu_check.sh):
// each step copies two vectors to the GPU, runs kStepKernels kernels on
// them inside a host range, and copies the result back. The GPU collector
// (Activity::GPU) records every kernel, copy and runtime call; the check
// compares kernel_details.csv with what this program launched.
//
//   vector_steps OUTPUT_DIR [STEPS]
// Prints "launched K kernels, C copies" and the run directory. Without a GPU
// it says so and exits 0 (nothing to check).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "trainprof/trainprof.h"

namespace {

constexpr int kStepKernels = 4;
constexpr int kElements = 1 << 20;

__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "vector_steps: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vector_steps OUTPUT_DIR [STEPS]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("vector_steps: no GPU: nothing to profile\n");
    return 0;
  }
  std::vector<float> host_x(kElements, 1.0f), host_y(kElements, 2.0f);
  float *x = nullptr, *y = nullptr;
  const size_t bytes = kElements * sizeof(float);
  if (!check(cudaMalloc(&x, bytes), "cudaMalloc") || !check(cudaMalloc(&y, bytes), "cudaMalloc")) return 1;
  // One unprofiled step first: module loading and the context's first use
  // are not the steps' cost.
  saxpy<<<(kElements + 255) / 256, 256>>>(1.0f, x, y, kElements);
  if (!check(cudaDeviceSynchronize(), "warm-up")) return 1;

  trainprof::ProfilerOptions options;
  options.output_path = argv[1];
  options.activities = {trainprof::Activity::CPU, trainprof::Activity::GPU};
  trainprof::Profiler profiler(options);
  int kernels = 0, copies = 0;
  for (int step = 0; step < steps; ++step) {
    check(cudaMemcpy(x, host_x.data(), bytes, cudaMemcpyHostToDevice), "copy x");
    check(cudaMemcpy(y, host_y.data(), bytes, cudaMemcpyHostToDevice), "copy y");
    copies += 2;
    {
      TRAINPROF_RANGE("saxpy steps");
      for (int k = 0; k < kStepKernels; ++k) {
        saxpy<<<(kElements + 255) / 256, 256>>>(0.5f, x, y, kElements);
        ++kernels;
      }
    }
    check(cudaMemcpy(host_y.data(), y, bytes, cudaMemcpyDeviceToHost), "copy y back");
    ++copies;
    profiler.step();
  }
  cudaDeviceSynchronize();
  profiler.stop();
  trainprof::RunSummary run = profiler.last_run();
  cudaFree(x);
  cudaFree(y);
  std::printf("launched %d kernels, %d copies\nrun %s\n", kernels, copies, run.run_dir.c_str());
  return 0;
}
