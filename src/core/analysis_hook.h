// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How collection reaches the analysis without depending on it: the pipeline
// layer registers its entry point when the library loads, as collectors
// register theirs (core/collector.h), and a profiler that analyses its closed
// runs calls through it.
#ifndef TRAINPROF_CORE_ANALYSIS_HOOK_H_
#define TRAINPROF_CORE_ANALYSIS_HOOK_H_

#include <string>

#include "trainprof/analyse.h"

namespace trainprof::core {

using AnalyseFunction = AnalyseReport (*)(const std::string& path, const AnalyseOptions& options);

// Called once, by the pipeline layer's static initialisation.
void register_analysis(AnalyseFunction analyse);

// The registered analysis of `path`; without one, a report whose error says
// the analysis is not part of this build.
AnalyseReport analyse_through_hook(const std::string& path, const AnalyseOptions& options);

// The same for the cluster pass (trainprof::cluster), which a flight
// recorder runs on the dumps of all ranks.
using ClusterFunction = ClusterReport (*)(const std::string& path, const AnalyseOptions& options,
                                          const ClusterOptions& cluster_options);
void register_cluster(ClusterFunction cluster);
ClusterReport cluster_through_hook(const std::string& path);

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_ANALYSIS_HOOK_H_
