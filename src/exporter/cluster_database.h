// Copyright trainprof authors. cluster_analysis_output/trainprof.db: the
// cluster pass's full tables as a SQLite database (docs/DB_SCHEMA.md,
// "Cluster"): every rank's steps, every rank's part in every collective and
// transfer with its wait, each collective matched across its group, every
// link, and each rank's waiting, indexed by collective and by rank.
//
// These are the tables the JSON outputs cannot hold at scale (about 1.1 KB
// a rank and operation there, against some 60 bytes a row here): the JSON
// keeps summaries and the slowest operations, the database the rest.
#ifndef TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_
#define TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_

#include <string>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/rank_summary.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

// What the cluster pass found, for its database.
struct ClusterTables {
  const std::vector<analysis::RankSummary>& ranks;  // by rank
  const analysis::StragglerReport& report;
  const std::vector<analysis::CommTiming>& timings;  // analysis::comm_timings' order
  const std::vector<analysis::LinkBandwidth>& links;
};

// Writes the database to `path` (made under a temporary name, renamed into
// place whole): "" or the error.
std::string write_cluster_database(const ClusterTables& tables, const OutputPath& path);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_
