// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/analysis_hook.h"

#include <atomic>

namespace trainprof::core {
namespace {

// Set during the library's static initialisation, read after it: atomic so
// that a profiler made by another library's initialisation sees it whole.
std::atomic<AnalyseFunction>& registered() {
  static std::atomic<AnalyseFunction> analyse{nullptr};
  return analyse;
}

std::atomic<ClusterFunction>& registered_cluster() {
  static std::atomic<ClusterFunction> cluster{nullptr};
  return cluster;
}

}  // namespace

void register_cluster(ClusterFunction cluster) {
  registered_cluster().store(cluster, std::memory_order_release);
}

ClusterReport cluster_through_hook(const std::string& path) {
  ClusterFunction cluster = registered_cluster().load(std::memory_order_acquire);
  if (cluster != nullptr) return cluster(path, AnalyseOptions{}, ClusterOptions{});
  ClusterReport report;
  report.error = "the cluster analysis is not part of this build: run `trainprof cluster " + path + "`";
  return report;
}

void register_analysis(AnalyseFunction analyse) {
  registered().store(analyse, std::memory_order_release);
}

AnalyseReport analyse_through_hook(const std::string& path, const AnalyseOptions& options) {
  AnalyseFunction analyse = registered().load(std::memory_order_acquire);
  if (analyse != nullptr) return analyse(path, options);
  AnalyseReport report;
  report.error = "the analysis is not part of this build: run `trainprof analyse " + path + "`";
  return report;
}

}  // namespace trainprof::core
