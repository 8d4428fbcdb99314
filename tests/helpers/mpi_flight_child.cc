// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A data-parallel loop in miniature under a flight recorder on every rank, for
// the tests of incidents of all ranks (tests/mpi_test.cc):
//
//   mpi_flight_child OUTPUT_DIR hang|slow RANK STEPS
//
// Each step a rank computes a little and all-reduces. hang: RANK never
// enters the allreduce of step 29 (the 30th collective) for 12 s, while
// the others wait inside it; the recorders' hang timeout is 2 s. slow: RANK
// computes 300 ms longer in step 20, which the others wait for.
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "busy.h"
#include "trainprof/flight_recorder.h"
#include "trainprof/range.h"

using trainprof::test::compute;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 5) {
    std::fprintf(stderr, "usage: mpi_flight_child OUTPUT_DIR hang|slow RANK STEPS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bool hang = std::strcmp(argv[2], "hang") == 0;
  bool chosen = rank == std::atoi(argv[3]);
  int steps = std::atoi(argv[4]);

  trainprof::FlightRecorderOptions options;
  options.profiler.output_path = argv[1];
  options.hang_timeout_s = hang ? 2.0 : 0.0;
  // The hung step is slow too once it ends: not a second incident here. The
  // planted slow step is 150x the median; 25x keeps the scheduler's stalls
  // of four busy ranks on two cores (tens of ms) from making another.
  options.slow_step_factor = hang ? 0.0 : 25.0;
  options.dump_signal = 0;
  trainprof::FlightRecorder recorder(options);
  PMPI_Barrier(MPI_COMM_WORLD);  // lined up, unseen by the collector

  double in = 1, out = 0;
  for (int step = 0; step < steps; ++step) {
    {
      trainprof::Range r("compute");
      compute(2.0);
      if (!hang && chosen && step == 20) compute(300.0);
    }
    if (hang && chosen && step == 29) std::this_thread::sleep_for(std::chrono::seconds(12));
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    recorder.step();
  }
  recorder.stop();  // writes what was triggered, and the cluster analysis when this rank is the last
  MPI_Finalize();
  return 0;
}
