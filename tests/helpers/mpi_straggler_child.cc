// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A data-parallel training loop in miniature with one slow rank, for the
// cluster analysis tests (tests/mpi_test.cc):
//
//   mpi_straggler_child OUTPUT_DIR SLOW_RANK compute|sleepy|data|die|none STEPS [ring]
//
// Each step a rank waits for its batch (a "wait" data stage), computes (a
// busy loop in a range) and all-reduces its gradients. SLOW_RANK computes
// 6x longer (compute) or waits 12 ms for data (data) in every step, or dies
// by SIGKILL halfway (die: after a pause that lets its data be flushed);
// with `sleepy` every rank's compute is a sleep in the range instead (20 ms,
// SLOW_RANK's 60 ms), long enough that other load on the machine (a late
// wake-up is a fraction of a millisecond) hardly moves the step;
// with `none` (or SLOW_RANK -1) all ranks do the same work. With `ring`,
// each step also passes 64 KiB to the next rank and from the previous one,
// blocking (MPI_Sendrecv) and nonblocking (MPI_Isend, MPI_Irecv, MPI_Waitall),
// as pipeline stages pass activations. With `late`, rank r starts recording
// at step r (a profile started mid-epoch, a dynamic config read at
// different times). With `waited`, rank 0 also sends 64 bytes to rank 1
// each step, which rank 1 receives 5 ms after the send is over: the
// receive is posted last (its whole time was waiting, no transit to measure).
#include <mpi.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "busy.h"
#include "trainprof/dataset.h"
#include "trainprof/profiler.h"
#include "trainprof/range.h"

using trainprof::test::compute;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 5) {
    std::fprintf(stderr, "usage: mpi_straggler_child OUTPUT_DIR SLOW_RANK compute|sleepy|data|none STEPS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int slow_rank = std::atoi(argv[2]);
  bool slow = rank == slow_rank;
  bool sleepy = std::strcmp(argv[3], "sleepy") == 0;
  bool slow_compute = slow && (std::strcmp(argv[3], "compute") == 0 || sleepy);
  bool slow_data = slow && std::strcmp(argv[3], "data") == 0;
  bool dies = slow && std::strcmp(argv[3], "die") == 0;
  int steps = std::atoi(argv[4]);
  bool ring = argc > 5 && std::strcmp(argv[5], "ring") == 0;
  bool late = argc > 5 && std::strcmp(argv[5], "late") == 0;
  bool waited = argc > 5 && std::strcmp(argv[5], "waited") == 0;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  std::vector<char> outgoing(64 * 1024, 1), incoming(64 * 1024);

  trainprof::ProfilerOptions options;
  options.output_path = argv[1];
  options.data_process = true;
  options.flush_interval_ms = 20;
  options.start_profile = !late || rank == 0;
  trainprof::Profiler profiler(options);  // starts recording, unless late
  // On a loaded machine the ranks start up to hundreds of milliseconds
  // apart: the first recorded allreduce would hold that skew and could name
  // a rank that merely started late the straggler. A barrier the profiler
  // does not see (PMPI) lines them up first.
  PMPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> gradients(1000, 1.0), summed(1000);
  for (int step = 0; step < steps; ++step) {
    if (late && step == rank && rank > 0) profiler.start();
    if (dies && step == steps / 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few flushes
      raise(SIGKILL);
    }
    {
      trainprof::DataStage wait("loader", trainprof::kStageLoaderWait);
      std::this_thread::sleep_for(std::chrono::microseconds(slow_data ? 12000 : 300));
    }
    {
      TRAINPROF_RANGE("forward_backward");
      if (sleepy) {
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_compute ? 60 : 20));
      } else {
        compute(slow_compute ? 12.0 : 2.0);
      }
    }
    MPI_Allreduce(gradients.data(), summed.data(), 1000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (waited && rank == 0) {
      MPI_Send(outgoing.data(), 64, MPI_CHAR, 1, 9, MPI_COMM_WORLD);
      // "Your send is over", through PMPI: a message the profiler does not
      // see, so that a loaded machine that delays rank 0 cannot make the
      // receive start first.
      char over = 1;
      PMPI_Send(&over, 1, MPI_CHAR, 1, 10, MPI_COMM_WORLD);
    } else if (waited && rank == 1) {
      char over = 0;
      PMPI_Recv(&over, 1, MPI_CHAR, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      // And far more than the clocks' alignment error later.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      MPI_Recv(incoming.data(), 64, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (ring) {
      int size = static_cast<int>(outgoing.size());
      MPI_Sendrecv(outgoing.data(), size, MPI_CHAR, next, 7, incoming.data(), size, MPI_CHAR, previous, 7,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Request requests[2];
      MPI_Irecv(incoming.data(), size, MPI_CHAR, previous, 8, MPI_COMM_WORLD, &requests[0]);
      MPI_Isend(outgoing.data(), size / 2, MPI_CHAR, next, 8, MPI_COMM_WORLD, &requests[1]);
      MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    }
    if (profiler.started()) profiler.step();
  }
  profiler.stop();
  MPI_Finalize();
  return 0;
}
