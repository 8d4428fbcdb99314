// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Host time per step as a tree of calls, the data of the report's icicle:
// read back from a run's trace_view.json (its events are in time order, one
// a line) and, where the Python package sampled stacks, the functions that
// spent the step's time outside every operator (python_outside_operators.csv).
#ifndef TRAINPROF_EXPORTER_HOST_FLAME_H_
#define TRAINPROF_EXPORTER_HOST_FLAME_H_

#include <cstddef>
#include <istream>
#include <string>
#include <vector>

#include "exporter/csv_reader.h"

namespace trainprof::exporter {

struct FlameNode {
  std::string name;
  double us = 0;                    // per step: the node's time, its children's included
  std::vector<FlameNode> children;  // the most time first
};

struct HostFlame {
  // "host time per step": a thread per child (the step's own thread first,
  // holding the whole step), below each its outermost ranges and operators,
  // and so on down; under the step's thread "Python outside operators" when
  // samples named functions.
  FlameNode root;
  size_t steps = 0;   // the steps averaged
  size_t slices = 0;  // the trace's slices read
  bool cut = false;   // stopped at `max_slices`, before the trace's end
};

// The tree of the steps in `trace_json` (up to `max_slices` slices read:
// then only the steps that ended before), each node's time the mean over
// those steps. An empty root (0 steps) when the trace has no ProfilerStep.
HostFlame read_host_flame(const std::string& trace_json, const CsvRows& python_outside,
                          size_t max_slices = 400000);
// The same from a stream of the trace's text.
HostFlame read_host_flame(std::istream& trace_json, const CsvRows& python_outside,
                          size_t max_slices = 400000);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_HOST_FLAME_H_
