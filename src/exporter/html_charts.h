// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The report's charts, as inline SVG that scales to its box: each draws the
// rows of an analysis output as they are, and names each mark's figure on
// hover (a <title>), so the page's numbers can be checked against the files.
#ifndef TRAINPROF_EXPORTER_HTML_CHARTS_H_
#define TRAINPROF_EXPORTER_HTML_CHARTS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exporter/csv_reader.h"
#include "exporter/host_flame.h"

namespace trainprof::exporter::html {

// The parts a step's time is made of in step_trace_time.csv, in the order
// they stack.
inline constexpr int kStepParts = 4;
extern const char* const kStepPartNames[kStepParts];

// Each step's length (the sum of its parts, µs), in the CSV's order.
std::vector<double> step_lengths(const CsvRows& steps);

// The advisor's findings (an "advice" array): each its title, its saving as
// a bar against the median step, and its evidence and change.
std::string findings(const nlohmann::json& advice);

// Every step's parts stacked, in ms, with an axis.
std::string step_breakdown_chart(const CsvRows& steps);

// One step's critical path (critical_path.csv's header and the step's rows)
// as a strip along the step's time, coloured by kind.
std::string critical_path_strip(const CsvRows& rows);

// What the memory held at its peak, by class (memory_breakdown.csv's header
// and the peak's `class` rows), as one bar split by class.
std::string memory_at_peak(const CsvRows& class_rows);

// An icicle of the host time per step: the root at the top, a click zooms.
std::string icicle(const HostFlame& flame);

// One metric's heat map of cluster_step_trace_time.csv's rank rows: at most
// 128 rows (ranks binned) x 64 columns (steps binned), each cell its bin's
// most, so a slow rank shows however many there are.
std::string heat_map(const CsvRows& rows, const char* metric, bool shown);

// The straggler's `metric` per step (bars, its late steps darker) against
// the other ranks' median (a mark per step), from cluster_step_trace_time.csv.
std::string late_steps_chart(const CsvRows& rows, int64_t straggler, const std::vector<int64_t>& late_steps,
                             const std::string& metric);

}  // namespace trainprof::exporter::html

#endif  // TRAINPROF_EXPORTER_HTML_CHARTS_H_
