// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How the processes of a distributed cluster pass exchange what they read
// (ClusterOptions::exchange).
//
// `mpirun -np K trainprof cluster --mpi PATH` spreads the pass over K
// processes: each reads and parses every K-th rank's summary, and process 0
// writes the outputs. They talk through this interface only, so the library
// needs no MPI: the command line's implementation is MPI's all-to-all, and
// a program embedding trainprof may bring its own (its job's communicator,
// threads in a test).
//
//   class MyExchange : public trainprof::ClusterExchange { ... };
//   MyExchange exchange(...);
//   trainprof::ClusterOptions c;
//   c.exchange = &exchange;
//   trainprof::ClusterReport report = trainprof::cluster(path, {}, c);  // on every process
//   if (exchange.index() == 0) ... report.text ...
#ifndef TRAINPROF_CLUSTER_EXCHANGE_H_
#define TRAINPROF_CLUSTER_EXCHANGE_H_

#include <string>
#include <vector>

namespace trainprof {

class ClusterExchange {
 public:
  virtual ~ClusterExchange() = default;
  // This process, 0 .. size() - 1. Process 0 writes the cluster outputs.
  virtual int index() const = 0;
  virtual int size() const = 0;
  // Every process calls it together, as often as the others: `outgoing`
  // has size() entries, outgoing[p] going to process p; the result has
  // size() entries, [p] what process p sent to this one. The pass calls it
  // the same number of times on every process whatever each one finds, so
  // that none waits for a call that never comes. An implementation that
  // cannot deliver must end the job (as MPI's default error handler does)
  // rather than return: the others would wait for it.
  virtual std::vector<std::string> all_to_all(std::vector<std::string> outgoing) = 0;
};

}  // namespace trainprof

#endif  // TRAINPROF_CLUSTER_EXCHANGE_H_
