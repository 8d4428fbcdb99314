// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// An MPI program that calls each operation the MPI collector wraps a known
// number of times with known sizes, profiled into argv[1]; tests/mpi_test.cc
// runs it under mpirun and checks what each rank recorded. Linked with
// libtrainprof_mpi (the PMPI layer), nothing else of the test suite: an
// ordinary user of the library.
//
// What each rank r of N calls (the expected records are in mpi_test.cc):
//   Barrier x2, Allreduce 100 doubles x3, Reduce 50 ints to root 1,
//   Bcast 10 floats from 0 x2, Allgather 3 ints, Allgatherv r+1 ints,
//   Alltoall 2 doubles to each, Alltoallv i+1 ints to rank i,
//   Reduce_scatter 2 floats each, Reduce_scatter_block 3 floats each,
//   Gather 5 ints to root N-1, Gatherv r+1 ints to 0, Scatter 4 doubles from 0,
//   Scatterv r+1 ints from 0, each I-variant once (same sizes) completed by one
//   Waitall, a ring: Send/Recv 25 ints, Isend/Irecv 9 doubles + Waitall,
//   Sendrecv 6 ints, Isend/Irecv 7 ints completed by Test loops, then
//   Comm_split by r % 2, Allreduce 4 ints on it, Comm_dup of it, Barrier on
//   the duplicate, Comm_free of both.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "trainprof/profiler.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpi_ops_child OUTPUT_DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int r = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  // Called before recording: counted in the sequence, not recorded.
  MPI_Barrier(MPI_COMM_WORLD);

  trainprof::ProfilerOptions options;
  options.output_path = argv[1];
  trainprof::Profiler profiler(options);

  std::vector<double> d(4096, 1.0), d2(4096);
  std::vector<int> i1(4096, 1), i2(4096);
  std::vector<float> f1(4096, 1.0f), f2(4096);
  std::vector<int> counts(n), displs(n), ones(n, 1);
  auto fill = [&](auto count_of) {
    int at = 0;
    for (int k = 0; k < n; ++k) {
      counts[k] = count_of(k);
      displs[k] = at;
      at += counts[k];
    }
  };

  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < 3; ++k) MPI_Allreduce(d.data(), d2.data(), 100, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(i1.data(), i2.data(), 50, MPI_INT, MPI_SUM, 1 % n, MPI_COMM_WORLD);
  for (int k = 0; k < 2; ++k) MPI_Bcast(f1.data(), 10, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Allgather(i1.data(), 3, MPI_INT, i2.data(), 3, MPI_INT, MPI_COMM_WORLD);
  fill([](int k) { return k + 1; });
  MPI_Allgatherv(i1.data(), r + 1, MPI_INT, i2.data(), counts.data(), displs.data(), MPI_INT, MPI_COMM_WORLD);
  MPI_Alltoall(d.data(), 2, MPI_DOUBLE, d2.data(), 2, MPI_DOUBLE, MPI_COMM_WORLD);
  std::vector<int> rcounts(n, r + 1), rdispls(n);
  for (int k = 0; k < n; ++k) rdispls[k] = k * (r + 1);
  MPI_Alltoallv(i1.data(), counts.data(), displs.data(), MPI_INT, i2.data(), rcounts.data(), rdispls.data(),
                MPI_INT, MPI_COMM_WORLD);
  std::vector<int> twos(n, 2);
  MPI_Reduce_scatter(f1.data(), f2.data(), twos.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce_scatter_block(f1.data(), f2.data(), 3, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Gather(i1.data(), 5, MPI_INT, i2.data(), 5, MPI_INT, n - 1, MPI_COMM_WORLD);
  MPI_Gatherv(i1.data(), r + 1, MPI_INT, i2.data(), counts.data(), displs.data(), MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Scatter(d.data(), 4, MPI_DOUBLE, d2.data(), 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Scatterv(i1.data(), counts.data(), displs.data(), MPI_INT, i2.data(), r + 1, MPI_INT, 0,
               MPI_COMM_WORLD);

  // Each I-variant once, in the same order, buffers apart, one Waitall.
  std::vector<double> nd(8192, 1.0), nd2(8192);
  std::vector<int> ni(8192, 1), ni2(8192);
  std::vector<float> nf(8192, 1.0f), nf2(8192);
  MPI_Request req[14];
  MPI_Ibarrier(MPI_COMM_WORLD, &req[0]);
  MPI_Iallreduce(nd.data(), nd2.data(), 100, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req[1]);
  MPI_Ireduce(ni.data(), ni2.data(), 50, MPI_INT, MPI_SUM, 1 % n, MPI_COMM_WORLD, &req[2]);
  MPI_Ibcast(nf.data(), 10, MPI_FLOAT, 0, MPI_COMM_WORLD, &req[3]);
  MPI_Iallgather(ni.data() + 100, 3, MPI_INT, ni2.data() + 100, 3, MPI_INT, MPI_COMM_WORLD, &req[4]);
  MPI_Iallgatherv(ni.data() + 200, r + 1, MPI_INT, ni2.data() + 200, counts.data(), displs.data(), MPI_INT,
                  MPI_COMM_WORLD, &req[5]);
  MPI_Ialltoall(nd.data() + 200, 2, MPI_DOUBLE, nd2.data() + 200, 2, MPI_DOUBLE, MPI_COMM_WORLD, &req[6]);
  MPI_Ialltoallv(ni.data() + 400, counts.data(), displs.data(), MPI_INT, ni2.data() + 400, rcounts.data(),
                 rdispls.data(), MPI_INT, MPI_COMM_WORLD, &req[7]);
  MPI_Ireduce_scatter(nf.data() + 100, nf2.data() + 100, twos.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                      &req[8]);
  MPI_Ireduce_scatter_block(nf.data() + 200, nf2.data() + 200, 3, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                            &req[9]);
  MPI_Igather(ni.data() + 600, 5, MPI_INT, ni2.data() + 600, 5, MPI_INT, n - 1, MPI_COMM_WORLD, &req[10]);
  MPI_Igatherv(ni.data() + 800, r + 1, MPI_INT, ni2.data() + 800, counts.data(), displs.data(), MPI_INT, 0,
               MPI_COMM_WORLD, &req[11]);
  MPI_Iscatter(nd.data() + 400, 4, MPI_DOUBLE, nd2.data() + 400, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req[12]);
  MPI_Iscatterv(ni.data() + 1000, counts.data(), displs.data(), MPI_INT, ni2.data() + 1000, r + 1, MPI_INT, 0,
                MPI_COMM_WORLD, &req[13]);
  MPI_Waitall(14, req, MPI_STATUSES_IGNORE);

  // A ring of point-to-point transfers.
  int right = (r + 1) % n, left = (r + n - 1) % n;
  if (r % 2 == 0) {
    MPI_Send(i1.data(), 25, MPI_INT, right, 7, MPI_COMM_WORLD);
    MPI_Recv(i2.data(), 25, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(i2.data(), 25, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(i1.data(), 25, MPI_INT, right, 7, MPI_COMM_WORLD);
  }
  MPI_Request p2p[2];
  MPI_Irecv(d2.data(), 9, MPI_DOUBLE, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, &p2p[0]);
  MPI_Isend(d.data(), 9, MPI_DOUBLE, right, 8, MPI_COMM_WORLD, &p2p[1]);
  MPI_Waitall(2, p2p, MPI_STATUSES_IGNORE);
  MPI_Sendrecv(i1.data(), 6, MPI_INT, right, 9, i2.data(), 6, MPI_INT, left, 9, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Irecv(i2.data() + 100, 7, MPI_INT, left, 10, MPI_COMM_WORLD, &p2p[0]);
  MPI_Isend(i1.data() + 100, 7, MPI_INT, right, 10, MPI_COMM_WORLD, &p2p[1]);
  for (int k = 0; k < 2; ++k) {
    int done = 0;
    while (!done) MPI_Test(&p2p[k], &done, MPI_STATUS_IGNORE);
  }

  MPI_Comm half = MPI_COMM_NULL, copy = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
  MPI_Allreduce(i1.data(), i2.data(), 4, MPI_INT, MPI_SUM, half);
  MPI_Comm_dup(half, &copy);
  MPI_Barrier(copy);
  MPI_Comm_free(&copy);
  MPI_Comm_free(&half);

  profiler.stop();
  MPI_Finalize();
  return 0;
}
