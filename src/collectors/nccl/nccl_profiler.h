// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// NCCL's collectives timed on the GPU, through NCCL's profiler plugin interface
// (nccl_abi.h).
//
// libtrainprof exports "ncclProfiler_v4": a job that sets
// NCCL_PROFILER_PLUGIN to libtrainprof's path (the Python package does it
// when it is imported before NCCL starts, unless the variable is set) has
// NCCL report each collective and point-to-point operation here. While a
// session records, each one whose kernel ran is written as a COMM event
// (docs/FORMAT.md) with kCommOnDevice: from the first of its channels'
// start on the GPU to the last one's end (the GPU's globaltimer, which the
// driver keeps on the host's CLOCK_REALTIME, mapped to the host's clock),
// its operation ("AllReduce"), the bytes for this rank, the communicator as
// its group ("nccl:" and NCCL's communicator hash, the same on every rank),
// NCCL's sequence number (the same on every rank for the same collective),
// and the peer. The cluster analysis matches them across ranks by (group,
// sequence) as it does MPI and Gloo calls. Operations whose kernel NCCL did
// not time are counted, not written (profiler_info.json, "collectors":
// {"nccl": ...}): the host's own c10d call is recorded anyway.
#ifndef TRAINPROF_COLLECTORS_NCCL_NCCL_PROFILER_H_
#define TRAINPROF_COLLECTORS_NCCL_NCCL_PROFILER_H_

#include <cstdint>

#include "collectors/nccl/nccl_abi.h"

extern "C" {
// The plugin NCCL looks up by this name.
extern trainprof::nccl::ProfilerV4 ncclProfiler_v4;
}

namespace trainprof::nccl {

// The bytes of one element of NCCL's datatype by its name ("ncclFloat32":
// 4); 0 for a name it does not know.
uint64_t datatype_bytes(const char* name);

// What the plugin saw since the process started.
struct PluginStats {
  uint64_t communicators = 0;   // init() calls
  uint64_t written = 0;         // operations written as COMM events
  uint64_t untimed = 0;         // operations without their kernel's times
  uint64_t foreign_parent = 0;  // kernel events whose parent was not ours
};
PluginStats plugin_stats();

}  // namespace trainprof::nccl

#endif  // TRAINPROF_COLLECTORS_NCCL_NCCL_PROFILER_H_
