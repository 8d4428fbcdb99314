// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The run's memory in the format of torch's allocator snapshot
// (torch.cuda.memory._snapshot()), so that the viewer users know
// (pytorch.org/memory_viz) and torch's own tools (python -m
// torch.cuda._memory_viz trace|segments|memory|segsum) open it:
// memory_snapshot.pickle (docs/OUTPUTS.md says what maps and what does not).
//
// device_traces: one list per device, CUDA devices at their index and the
// CPU after them (as torch does for a CPU profile), each allocation an
// "alloc" event and its free "free_requested" + "free_completed", with the
// class as the allocation's "category" and the allocation site as frames;
// the latest kSnapshotBlocks allocations per device; a closing "snapshot"
// event. segments: the stretches of addresses those blocks used, holding
// the blocks alive at the end.
#ifndef TRAINPROF_EXPORTER_MEMORY_SNAPSHOT_H_
#define TRAINPROF_EXPORTER_MEMORY_SNAPSHOT_H_

#include <string>

#include "analysis/memory_breakdown.h"
#include "analysis/trace_model.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

// "" or an error naming the file.
std::string write_memory_snapshot(const analysis::TraceModel& model,
                                  const analysis::MemoryBreakdown& breakdown, const OutputPath& path);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_MEMORY_SNAPSHOT_H_
