// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// `trainprof analyse --mpi PATH`: the analysis of many ranks' runs spread over
// the processes of an MPI job.
//
//   mpirun -np K trainprof analyse --mpi PATH
//
// Each process analyses every K-th run (its rank from the launcher's
// environment: OpenMPI, MPICH/PMI, Slurm), then says so with a file under
// PATH/cluster_analysis_output/.analyse_mpi_{job}/ (PATH must be on a file
// system every process sees, as the runs' data already is). They meet
// through files and not through MPI so that the first can give up on a
// process that never ends its analysis (--mpi-wait-minutes). Then the
// cluster pass, which reads the per-rank summaries only, never raw events:
// when every process came, it is spread over them through MPI, as `trainprof
// cluster --mpi` spreads it; else (or in a trainprof built without MPI) the
// first process runs it alone and the others end.
#ifndef TRAINPROF_TOOLS_ANALYSE_MPI_H_
#define TRAINPROF_TOOLS_ANALYSE_MPI_H_

#include <string>

#include "trainprof/analyse.h"

namespace trainprof::cli {

// This process's place in its job, from the launcher's environment.
struct LaunchPlace {
  int rank = -1;
  int size = 0;
  std::string job;    // the same in every process of the job
  std::string error;  // why there is no place (not launched by mpirun or srun)
};
// `command` ("analyse", "cluster") names the command in the error that
// says how to launch it.
LaunchPlace launch_place_from_environment(const std::string& command);

// Returns the command's exit status (0: every run of this process analysed
// and, on the first process, the cluster outputs written).
int analyse_mpi(const std::string& path, AnalyseOptions options, int wait_minutes);

// Prints a cluster report as `trainprof cluster` does: warnings to stderr,
// the report, where the outputs are. False when the pass failed.
bool print_cluster_report(const ClusterReport& report);

}  // namespace trainprof::cli

#endif  // TRAINPROF_TOOLS_ANALYSE_MPI_H_
