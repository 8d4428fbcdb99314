// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// cluster_analysis_output/trainprof.db: the cluster pass's full tables as a
// SQLite database (docs/DB_SCHEMA.md, "Cluster"): every rank's steps, every
// rank's part in every collective and transfer with its wait, each collective
// matched across its group, every link, and each rank's waiting, indexed by
// collective and by rank.
//
// These are the tables the JSON outputs cannot hold at scale (about 1.1 KB
// a rank and operation there, against some 60 bytes a row here): the JSON
// keeps summaries and the slowest operations, the database the rest.
#ifndef TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_
#define TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/cluster.h"
#include "analysis/comm_digest.h"
#include "analysis/rank_summary.h"
#include "exporter/output_file.h"

namespace trainprof::exporter {

// At scale a pass spread over processes splits the communication table's
// rows over part files beside trainprof.db, written at once by as many
// processes (SQLite has one writer per file: 24 M rows took 55 s in one).
// trainprof.db names them in its database_parts table; every file carries
// the pass's name, so a part left by another pass is refused when opened.
// open_cluster_database (and `trainprof sql`) attaches them and shows one
// `communication` over all of them.
inline constexpr int kMaxDatabaseParts = 8;  // with trainprof.db: SQLite attaches 10 at most by default
inline constexpr const char* kClusterDatabaseName = "trainprof.db";
// The file of part `part` (1 to kMaxDatabaseParts - 1; part 0 is trainprof.db).
std::string database_part_name(int part);

// How the database's rows are split, and the ids its names take.
struct DatabaseLayout {
  int parts = 1;      // 1: every row in trainprof.db
  int processes = 1;  // a rank's rows are in part (rank % processes) % parts
  std::string pass;   // names the pass in each file (with parts only)
  // Every group's and operation's name, sorted: a name's id is its place, from 1.
  std::vector<std::string> groups, operations;

  int part_of(int rank) const { return (rank % processes) % parts; }
};
// One file's layout: the names of every group and operation in `ranks`.
DatabaseLayout one_database(const std::vector<const analysis::RankSummary*>& ranks);

// What the cluster pass found, for its database.
struct ClusterTables {
  // By rank: their facts, steps and groups (their calls are not read).
  const std::vector<analysis::RankSummary>& ranks;
  const analysis::StragglerReport& report;
  // The communication table's rows: every rank's timings, or at least
  // those of part 0's ranks (the others' are left to their parts).
  const std::vector<analysis::CommTiming>& timings;
  const analysis::CommDigest& digest;  // finished: the collectives and each rank's totals
  const std::vector<analysis::LinkBandwidth>& links;
  const DatabaseLayout& layout;  // trainprof.db takes the rows of part 0
  // More of part 0's rows, as other processes sent them (CommunicationRow's
  // back to back); nullptr: none.
  const std::vector<std::string>* more_rows = nullptr;
};

// Writes trainprof.db to `path` (made under a temporary name, renamed into
// place whole): "" or the error.
std::string write_cluster_database(const ClusterTables& tables, const OutputPath& path);

// One row of the communication table, as it travels to its part's writer.
struct CommunicationRow {
  int64_t values[15];
  uint32_t nulls;  // bit i: column i + 1 is NULL
  uint32_t unused;
};
static_assert(sizeof(CommunicationRow) == 128);
// `t`'s row, its names' ids looked up in `layout`'s (0 where not there).
class CommunicationRows {
 public:
  explicit CommunicationRows(const DatabaseLayout& layout);
  CommunicationRow of(const analysis::CommTiming& t);
  int64_t group_id(std::string_view name);
  int64_t operation_id(std::string_view name);

 private:
  int64_t id(std::string_view name, const std::unordered_map<std::string_view, int64_t>& ids,
             std::pair<std::string_view, int64_t>* last);
  std::unordered_map<std::string_view, int64_t> groups_, operations_;  // views of the layout's names
  std::pair<std::string_view, int64_t> last_group_, last_operation_;
};

// Writes part `part` of the pass named `pass`: the `rows` rows `next_row`
// gives (false: no more) in its communication table.
std::string write_cluster_database_part(const std::function<bool(CommunicationRow* row)>& next_row,
                                        uint64_t rows, int part, const std::string& pass,
                                        const OutputPath& path);

// Opens a cluster trainprof.db read-only with its parts attached, and a
// temporary view `communication` over its own rows and theirs (queries by
// rank or by collective still use each file's index); a database without
// parts (or any other SQLite file) opens as it is. *db is set even on
// failure (sqlite3_close it); returns "" or what is wrong: a part missing,
// damaged, or of another pass.
std::string open_cluster_database(const std::string& path, sqlite3** db);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CLUSTER_DATABASE_H_
