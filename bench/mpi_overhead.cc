// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the PMPI layer adds to an MPI call: built twice from this file, as
// `trainprof_mpi_overhead_bare` (plain MPI) and `trainprof_mpi_overhead`
// (linked with trainprof::mpi), and run by bench/mpi_overhead.sh under mpirun,
// which prints the per-call difference.
//
//   mpirun -np 2 trainprof_mpi_overhead[_bare] [ITERATIONS] [record]
//
// Rank 0 prints one line per operation: "name ns_per_call". With `record`
// (the layered build only) a run records while the calls are timed, into a
// temporary directory removed afterwards.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#ifdef TRAINPROF_LAYERED
#include <unistd.h>

#include <filesystem>

#include "trainprof/profiler.h"
#endif

namespace {

template <typename Call>
double ns_per_call(int iterations, Call call) {
  for (int i = 0; i < iterations / 10; ++i) call();  // warm
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) call();
  double seconds = MPI_Wtime() - t0;
  double slowest = 0;
  MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return slowest * 1e9 / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iterations = argc > 1 ? std::atoi(argv[1]) : 20000;
  bool record = argc > 2 && std::strcmp(argv[2], "record") == 0;
#ifdef TRAINPROF_LAYERED
  std::string dir = "/tmp/trainprof_mpi_overhead_" + std::to_string(getpid());
  std::unique_ptr<trainprof::Profiler> profiler;
  if (record) {
    trainprof::ProfilerOptions options;
    options.output_path = dir;
    profiler = std::make_unique<trainprof::Profiler>(options);
  }
#else
  if (record && rank == 0) std::fprintf(stderr, "the bare build cannot record\n");
#endif
  double in = 1, out = 0;
  int peer = rank ^ 1;
  bool paired = peer < size;
  double barrier = ns_per_call(iterations, [] { MPI_Barrier(MPI_COMM_WORLD); });
  double allreduce =
      ns_per_call(iterations, [&] { MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); });
  // A ping-pong: each iteration is one send and one receive per rank.
  double pingpong = ns_per_call(iterations, [&] {
    if (!paired) return;
    if (rank % 2 == 0) {
      MPI_Send(&in, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(&out, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(&out, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&in, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD);
    }
  });
  double nonblocking = ns_per_call(iterations, [&] {
    MPI_Request request;
    MPI_Iallreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  });
#ifdef TRAINPROF_LAYERED
  if (profiler) {
    profiler->stop();
    profiler.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
#endif
  if (rank == 0) {
    std::printf(
        "MPI_Barrier %.1f\nMPI_Allreduce(8 B) %.1f\nMPI_Send+MPI_Recv(8 B) %.1f\nMPI_Iallreduce+MPI_Wait(8 "
        "B) %.1f\n",
        barrier, allreduce, pingpong, nonblocking);
  }
  MPI_Finalize();
  return 0;
}
