// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Data-parallel training on several MPI ranks: each rank trains the demo's CNN
// on its shard of Fashion-MNIST and the gradients are averaged with
// MPI_Allreduce every step. Linked with trainprof::mpi (the PMPI layer) and
// trainprof::torch, so operators and MPI calls are recorded; `trainprof cluster
// OUTPUT_DIR` then says who waits for whom (scripts/demo_mpi.sh runs both).
//
//   mpirun -np 4 trainprof_distributed_demo OUTPUT_DIR [STEPS=40] [--slow-rank R]
//          [--slow-ms MS=30] [--slow-data]
//
// --slow-rank R makes rank R slow every step: MS more milliseconds of
// computing (a busy loop in a "slow_rank_extra" range), or with --slow-data
// of waiting for its batch (a "wait" data stage), as a straggler would.
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fashion_mnist_data.h"
#include "fashion_mnist_net.h"
#include "trainprof/dataset.h"
#include "trainprof/trainprof.h"

namespace {

using trainprof_demo::FashionMnist;
using trainprof_demo::Net;

struct Args {
  std::string output;
  int steps = 40;
  int slow_rank = -1;
  double slow_ms = 30;
  bool slow_data = false;
};

bool parse(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->output = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--slow-rank" && i + 1 < argc) {
      a->slow_rank = std::atoi(argv[++i]);
    } else if (arg == "--slow-ms" && i + 1 < argc) {
      a->slow_ms = std::atof(argv[++i]);
    } else if (arg == "--slow-data") {
      a->slow_data = true;
    } else if (!arg.empty() && arg.find_first_not_of("0123456789") == std::string::npos) {
      a->steps = std::atoi(arg.c_str());
    } else {
      return false;
    }
  }
  return a->steps > 0 && a->slow_ms >= 0;
}

// Busy for `ms` of this thread's CPU time.
void busy(double ms) {
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  volatile double x = 1;
  do {
    for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1e3 + (now.tv_nsec - start.tv_nsec) / 1e6 < ms);
}

// Every gradient averaged over the ranks, in one allreduce of a flat buffer.
void average_gradients(Net& net, int world) {
  TRAINPROF_RANGE("allreduce_gradients");
  std::vector<torch::Tensor> grads;
  for (auto& p : net->parameters()) grads.push_back(p.grad().view(-1));
  torch::Tensor flat = torch::cat(grads);
  MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr<float>(), static_cast<int>(flat.numel()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  flat.div_(world);
  int64_t at = 0;
  for (auto& p : net->parameters()) {
    int64_t n = p.grad().numel();
    p.grad().view(-1).copy_(flat.slice(0, at, at + n));
    at += n;
  }
}

int run(const Args& a, int rank, int world) {
  torch::manual_seed(0);  // every rank starts from the same weights
  torch::set_num_threads(1);
  FashionMnist train(true);
  int64_t n = static_cast<int64_t>(*train.size());
  Net net;
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  trainprof::ProfilerOptions options;
  options.output_path = a.output;
  options.data_process = true;
  trainprof::Profiler prof(options);  // records from here; each rank's run under OUTPUT_DIR
  bool slow = rank == a.slow_rank;
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < a.steps; ++step) {
    std::vector<torch::Tensor> xs, ys;
    {
      trainprof::DataStage wait("shard", trainprof::kStageLoaderWait);
      if (slow && a.slow_data)
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(a.slow_ms * 1000)));
      // This rank's shard: every world-th sample.
      for (int64_t k = 0; k < 64; ++k) {
        auto e = train.get(static_cast<size_t>(((step * 64 + k) * world + rank) % n));
        xs.push_back(e.data);
        ys.push_back(e.target);
      }
    }
    torch::Tensor loss;
    {
      TRAINPROF_RANGE("forward_backward");
      optimizer.zero_grad();
      loss = torch::nn::functional::cross_entropy(net->forward(torch::stack(xs)), torch::stack(ys));
      loss.backward();
      if (slow && !a.slow_data) {
        TRAINPROF_RANGE("slow_rank_extra");
        busy(a.slow_ms);
      }
    }
    average_gradients(net, world);
    optimizer.step();
    prof.step();
    if (rank == 0 && (step + 1) % 10 == 0)
      std::printf("  step %3d  loss %.4f\n", step + 1, loss.item<double>());
  }
  prof.stop();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("%d ranks trained %d steps in %.1f s; runs under %s\n", world, a.steps, seconds,
                a.output.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Args a;
  if (!parse(argc, argv, &a)) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: mpirun -np N trainprof_distributed_demo OUTPUT_DIR [STEPS] [--slow-rank R] "
                   "[--slow-ms MS] [--slow-data]\n");
    }
    MPI_Finalize();
    return 2;
  }
  int status = 1;
  try {
    status = run(a, rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_demo (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
