// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The processes of `trainprof cluster --mpi` exchange bytes with MPI's
// all-to-all (include/trainprof/cluster_exchange.h).
#ifndef TRAINPROF_TOOLS_MPI_EXCHANGE_H_
#define TRAINPROF_TOOLS_MPI_EXCHANGE_H_

#include <memory>
#include <string>

#include "trainprof/cluster_exchange.h"

namespace trainprof::cli {

// MPI initialised (unless the program did already) on MPI_COMM_WORLD, and
// finalised when the exchange goes. nullptr, with `*error` saying why, when
// this trainprof was built without MPI. MPI ends the job on any failure of
// its own (its default error handler), as ClusterExchange asks.
std::unique_ptr<ClusterExchange> make_mpi_exchange(std::string* error);
// Whether make_mpi_exchange can make one (this trainprof was built with MPI).
bool mpi_exchange_built();

}  // namespace trainprof::cli

#endif  // TRAINPROF_TOOLS_MPI_EXCHANGE_H_
