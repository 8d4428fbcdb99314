// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/cluster_database.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>

#include "exporter/sqlite_file.h"

namespace trainprof::exporter {
namespace {

using analysis::CommTiming;

// The schema (docs/DB_SCHEMA.md, "Cluster"). Times are wall-clock ns on rank
// 0's clock where the ranks' clocks were aligned.
constexpr const char* kSchema = R"sql(
CREATE TABLE run_info (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE strings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE communication_groups (id INTEGER PRIMARY KEY, name TEXT NOT NULL, size INTEGER NOT NULL,
  ranks TEXT NOT NULL);
CREATE TABLE ranks (rank INTEGER PRIMARY KEY, host TEXT, runs TEXT, clock_aligned INTEGER, end_state TEXT,
  waited_ns INTEGER, others_waited_for_it_ns INTEGER, arrived_last INTEGER,
  operations INTEGER, elapse_ns INTEGER, wait_ns INTEGER, transit_ns INTEGER, bytes INTEGER);
CREATE TABLE steps (rank INTEGER NOT NULL, step INTEGER NOT NULL, start_ns INTEGER, end_ns INTEGER,
  computing_ns INTEGER, communication_not_overlapped_ns INTEGER, overlapped_ns INTEGER,
  communication_ns INTEGER, free_ns INTEGER, data_wait_ns INTEGER, in_communication_ns INTEGER,
  PRIMARY KEY (rank, step)) WITHOUT ROWID;
CREATE TABLE collectives (group_id INTEGER NOT NULL, sequence INTEGER NOT NULL, operation_id INTEGER NOT NULL,
  step INTEGER, members INTEGER NOT NULL, bytes INTEGER NOT NULL, first_start_ns INTEGER NOT NULL,
  last_start_ns INTEGER NOT NULL, last_rank INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  wait_ns INTEGER NOT NULL, PRIMARY KEY (group_id, sequence)) WITHOUT ROWID;
CREATE TABLE links (src INTEGER NOT NULL, dst INTEGER NOT NULL, kind TEXT NOT NULL, transport TEXT NOT NULL,
  bytes INTEGER NOT NULL, transit_ns INTEGER NOT NULL, operations INTEGER NOT NULL, gb_per_s REAL,
  slow INTEGER NOT NULL, only_waited INTEGER NOT NULL);
CREATE TABLE database_parts (part INTEGER PRIMARY KEY, file TEXT NOT NULL);
)sql";

// A part: which pass and part it is (and the table below).
constexpr const char* kPartSchema = R"sql(
CREATE TABLE part_info (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
)sql";

// The communication table, in trainprof.db and in each part alike.
constexpr const char* kCommunicationSchema = R"sql(
CREATE TABLE communication (rank INTEGER NOT NULL, step INTEGER, group_id INTEGER NOT NULL,
  sequence INTEGER NOT NULL, operation_id INTEGER NOT NULL, transfer INTEGER NOT NULL, peer INTEGER,
  tag INTEGER, sends INTEGER, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL,
  transit_ns INTEGER NOT NULL, bytes INTEGER NOT NULL, one_host INTEGER NOT NULL);
)sql";

constexpr const char* kCommunicationIndexes = R"sql(
CREATE INDEX communication_by_collective ON communication(group_id, sequence);
CREATE INDEX communication_by_rank ON communication(rank, step);
)sql";

constexpr const char* kInsertRow =
    "INSERT INTO communication VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

void bind_row(Statement& s, const CommunicationRow& row) {
  for (int i = 0; i < 15; ++i) {
    if ((row.nulls >> i & 1) != 0) {
      s.bind_null(i + 1);
    } else {
      s.bind(i + 1, row.values[i]);
    }
  }
}

constexpr const char* kCollectivesIndex = "CREATE INDEX collectives_by_step ON collectives(step);";

class Writer {
 public:
  Writer(const ClusterTables& in, const OutputPath& path) : in_(in), file_(path, kSchema), rows_(in.layout) {
    file_.exec(kCommunicationSchema);
  }

  std::string write() {
    names();
    communication();
    ranks();
    steps();
    links();
    run_info();
    file_.exec(kCollectivesIndex);
    return file_.finish(kCommunicationIndexes);
  }

 private:
  sqlite3* db() { return file_.db(); }
  std::string* error() { return &file_.error(); }

  // Every name, numbered as the layout says; each group's members as its
  // highest rank says (as the timings take them).
  void names() {
    Statement string(db(), "INSERT INTO strings VALUES (?, ?)", error());
    for (size_t i = 0; i < in_.layout.operations.size(); ++i)
      string.bind(1, static_cast<int64_t>(i + 1)).bind(2, in_.layout.operations[i]).step(db(), error());
    std::unordered_map<std::string_view, const analysis::RankGroup*> last;
    for (const analysis::RankSummary& r : in_.ranks) {
      for (const analysis::RankGroup& g : r.groups) last[g.name] = &g;
    }
    Statement group(db(), "INSERT INTO communication_groups VALUES (?, ?, ?, ?)", error());
    const std::vector<int32_t> none;
    for (size_t i = 0; i < in_.layout.groups.size(); ++i) {
      auto it = last.find(in_.layout.groups[i]);
      const std::vector<int32_t>& members = it != last.end() ? it->second->world_ranks.list() : none;
      std::string ranks;
      for (size_t m = 0; m < members.size(); ++m) ranks += (m == 0 ? "" : ",") + std::to_string(members[m]);
      group.bind(1, static_cast<int64_t>(i + 1))
          .bind(2, in_.layout.groups[i])
          .bind(3, static_cast<int64_t>(members.size()))
          .bind(4, ranks)
          .step(db(), error());
    }
  }

  // Every timing of part 0's ranks; and each collective.
  void communication() {
    Statement row(db(), kInsertRow, error());
    const bool split = in_.layout.parts > 1;
    for (const CommTiming& t : in_.timings) {
      if (!error()->empty()) return;
      if (split && in_.layout.part_of(t.rank) != 0) continue;
      bind_row(row, rows_.of(t));
      row.step(db(), error());
    }
    static const std::vector<std::string> kNone;
    for (const std::string& sent : in_.more_rows != nullptr ? *in_.more_rows : kNone) {
      for (size_t at = 0; at + sizeof(CommunicationRow) <= sent.size() && error()->empty();
           at += sizeof(CommunicationRow)) {
        CommunicationRow r;
        std::memcpy(&r, sent.data() + at, sizeof(r));
        bind_row(row, r);
        row.step(db(), error());
      }
    }
    Statement collective(db(), "INSERT OR IGNORE INTO collectives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         error());
    for (const analysis::CollectiveRow& c : in_.digest.rows) {
      if (!error()->empty()) return;
      collective.bind(1, rows_.group_id(c.group))
          .bind(2, c.sequence)
          .bind(3, rows_.operation_id(c.operation))
          .bind_or_null(4, c.step >= 0, c.step)
          .bind(5, static_cast<int64_t>(c.members))
          .bind(6, i64(c.bytes))
          .bind(7, i64(c.first_start_ns))
          .bind(8, i64(c.last_start_ns))
          .bind(9, static_cast<int64_t>(c.last_rank))
          .bind(10, i64(c.end_ns))
          .bind(11, i64(c.wait_ns))
          .step(db(), error());
    }
  }

  void ranks() {
    std::map<int, const analysis::RankWaits*> waits;
    for (const analysis::RankWaits& w : in_.report.per_rank) waits[w.rank] = &w;
    Statement s(db(), "INSERT OR IGNORE INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", error());
    for (const analysis::RankSummary& r : in_.ranks) {
      std::string runs;
      for (const std::string& dir : r.run_dirs) runs += (runs.empty() ? "" : "\n") + dir;
      auto w = waits.find(r.rank);
      bool known = w != waits.end();
      auto sums = in_.digest.totals.find(r.rank);
      const analysis::RankTotals t = sums != in_.digest.totals.end() ? sums->second : analysis::RankTotals{};
      s.bind(1, static_cast<int64_t>(r.rank))
          .bind_text_or_null(2, r.host)
          .bind_text_or_null(3, runs)
          .bind(4, static_cast<int64_t>(r.clock_aligned))
          .bind(5, r.end)
          .bind_or_null(6, known, known ? i64(w->second->waited_ns) : 0)
          .bind_or_null(7, known, known ? i64(w->second->waited_for_ns) : 0)
          .bind_or_null(8, known, known ? i64(w->second->late_collectives) : 0)
          .bind(9, i64(t.operations))
          .bind(10, i64(t.elapse_ns))
          .bind(11, i64(t.wait_ns))
          .bind(12, i64(t.transit_ns))
          .bind(13, i64(t.bytes))
          .step(db(), error());
    }
  }

  void steps() {
    // OR IGNORE: merged runs of one rank that number a step alike keep the first.
    Statement s(db(), "INSERT OR IGNORE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", error());
    for (const analysis::RankSummary& r : in_.ranks) {
      for (const analysis::RankStep& step : r.steps) {
        s.bind(1, static_cast<int64_t>(r.rank))
            .bind(2, step.row.step)
            .bind(3, i64(step.start_ns))
            .bind(4, i64(step.end_ns))
            .bind(5, i64(step.row.computing_ns))
            .bind(6, i64(step.row.communication_not_overlapped_ns))
            .bind(7, i64(step.row.overlapped_ns))
            .bind(8, i64(step.row.communication_ns))
            .bind(9, i64(step.row.free_ns))
            .bind(10, i64(step.data_wait_ns))
            .bind(11, i64(step.in_comm_ns))
            .step(db(), error());
      }
    }
  }

  void links() {
    Statement s(db(), "INSERT INTO links VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", error());
    for (const analysis::LinkBandwidth& l : in_.links) {
      s.bind(1, static_cast<int64_t>(l.src))
          .bind(2, static_cast<int64_t>(l.dst))
          .bind(3, l.collective ? "collective" : "p2p")
          .bind(4, l.transport)
          .bind(5, i64(l.bytes))
          .bind(6, i64(l.transit_ns))
          .bind(7, i64(l.operations));
      if (l.only_waited) {
        s.bind_null(8);
      } else {
        s.bind(8, l.gb_per_s);
      }
      s.bind(9, static_cast<int64_t>(l.slow))
          .bind(10, static_cast<int64_t>(l.only_waited))
          .step(db(), error());
    }
  }

  void run_info() {
    const analysis::StragglerReport& r = in_.report;
    Statement s(db(), "INSERT INTO run_info VALUES (?, ?)", error());
    for (const auto& [key, value] :
         {std::pair<const char*, std::string>{"world_size", std::to_string(r.world_size)},
          {"ranks", std::to_string(in_.ranks.size())},
          {"straggler", std::to_string(r.straggler)},
          {"cause", r.cause},
          {"collectives_matched", std::to_string(r.matched)},
          {"collectives_unmatched", std::to_string(r.unmatched)},
          {"total_wait_ns", std::to_string(r.total_wait_ns)},
          {"clocks_aligned", r.clocks_aligned ? "1" : "0"},
          {"clock_error_ns", std::to_string(r.clock_error_ns)}}) {
      s.bind(1, key).bind(2, value).step(db(), error());
    }
    if (in_.layout.parts <= 1) return;
    s.bind(1, "database_pass").bind(2, in_.layout.pass).step(db(), error());
    Statement part(db(), "INSERT INTO database_parts VALUES (?, ?)", error());
    for (int p = 1; p < in_.layout.parts; ++p)
      part.bind(1, static_cast<int64_t>(p)).bind(2, database_part_name(p)).step(db(), error());
  }

  const ClusterTables& in_;
  SqliteFile file_;
  CommunicationRows rows_;
};

// The first column of `sql`'s rows as text, one vector entry each.
std::vector<std::string> text_rows(sqlite3* db, const std::string& sql, std::string* error) {
  std::vector<std::string> out;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
    *error = sqlite3_errmsg(db);
    return out;
  }
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(s, 0);
    out.emplace_back(text != nullptr ? reinterpret_cast<const char*>(text) : "");
  }
  if (rc != SQLITE_DONE) *error = sqlite3_errmsg(db);
  sqlite3_finalize(s);
  return out;
}

}  // namespace

std::string database_part_name(int part) {
  return std::string(kClusterDatabaseName) + ".part" + std::to_string(part);
}

DatabaseLayout one_database(const std::vector<const analysis::RankSummary*>& ranks) {
  std::set<std::string_view> groups, operations;
  for (const analysis::RankSummary* rank : ranks) {
    const analysis::RankSummary& r = *rank;
    for (const analysis::RankGroup& g : r.groups) groups.insert(g.name);
    for (const analysis::RankCollective& c : r.collectives) operations.insert(c.operation);
    for (const analysis::RankTransfer& t : r.transfers) operations.insert(t.operation);
  }
  DatabaseLayout layout;
  layout.groups.assign(groups.begin(), groups.end());
  layout.operations.assign(operations.begin(), operations.end());
  return layout;
}

CommunicationRows::CommunicationRows(const DatabaseLayout& layout) {
  for (size_t i = 0; i < layout.groups.size(); ++i) groups_[layout.groups[i]] = static_cast<int64_t>(i + 1);
  for (size_t i = 0; i < layout.operations.size(); ++i)
    operations_[layout.operations[i]] = static_cast<int64_t>(i + 1);
}

// Rows come in runs of one group and operation: the last name answers
// before the map.
int64_t CommunicationRows::id(std::string_view name, const std::unordered_map<std::string_view, int64_t>& ids,
                              std::pair<std::string_view, int64_t>* last) {
  if (last->second != 0 && analysis::same_name(name, last->first)) return last->second;
  auto it = ids.find(name);
  if (it == ids.end()) return 0;
  *last = {name, it->second};
  return it->second;
}

int64_t CommunicationRows::group_id(std::string_view name) {
  return id(name, groups_, &last_group_);
}

int64_t CommunicationRows::operation_id(std::string_view name) {
  return id(name, operations_, &last_operation_);
}

CommunicationRow CommunicationRows::of(const CommTiming& t) {
  CommunicationRow row{};
  auto set = [&row](int column, bool known, int64_t v) {
    row.values[column - 1] = known ? v : 0;
    if (!known) row.nulls |= 1u << (column - 1);
  };
  set(1, true, t.rank);
  set(2, t.step >= 0, t.step);
  set(3, true, group_id(t.group));
  set(4, true, t.sequence);
  set(5, true, operation_id(t.operation));
  set(6, true, t.transfer);
  set(7, t.transfer && t.peer >= 0, t.peer);
  set(8, t.transfer && t.tag >= 0, t.tag);
  set(9, t.transfer, t.sends);
  set(10, true, i64(t.start_ns));
  set(11, true, i64(t.end_ns));
  set(12, true, i64(t.wait_ns));
  set(13, true, i64(t.transit_ns()));
  set(14, true, i64(t.bytes));
  set(15, true, t.one_host);
  return row;
}

std::string write_cluster_database(const ClusterTables& tables, const OutputPath& path) {
  return Writer(tables, path).write();
}

std::string write_cluster_database_part(const std::function<bool(CommunicationRow* row)>& next_row,
                                        uint64_t rows, int part, const std::string& pass,
                                        const OutputPath& path) {
  SqliteFile file(path, kPartSchema);
  file.exec(kCommunicationSchema);
  {
    Statement info(file.db(), "INSERT INTO part_info VALUES (?, ?)", &file.error());
    info.bind(1, "pass").bind(2, pass).step(file.db(), &file.error());
    info.bind(1, "part").bind(2, std::to_string(part)).step(file.db(), &file.error());
    info.bind(1, "rows").bind(2, std::to_string(rows)).step(file.db(), &file.error());
    Statement insert(file.db(), kInsertRow, &file.error());
    CommunicationRow row;
    while (file.error().empty() && next_row(&row)) {
      bind_row(insert, row);
      insert.step(file.db(), &file.error());
    }
  }
  return file.finish(kCommunicationIndexes);
}

std::string open_cluster_database(const std::string& path, sqlite3** db) {
  *db = nullptr;
  if (sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
    return "cannot open " + path + ": " + (*db != nullptr ? sqlite3_errmsg(*db) : "out of memory");
  std::string error;
  // A database of one file (a run's, an earlier pass's) has no parts to join.
  if (text_rows(*db, "SELECT name FROM sqlite_master WHERE name = 'database_parts'", &error).empty())
    return error.empty() ? "" : "cannot read " + path + ": " + error;
  std::vector<std::string> parts = text_rows(*db, "SELECT file FROM database_parts ORDER BY part", &error);
  std::vector<std::string> pass =
      text_rows(*db, "SELECT value FROM run_info WHERE key = 'database_pass'", &error);
  if (!error.empty()) return path + " is not a cluster trainprof.db: " + error;
  if (parts.empty()) return "";
  if (pass.size() != 1) return path + " names its parts but not its pass";
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::string view = "CREATE TEMP VIEW communication AS SELECT * FROM main.communication";
  for (size_t i = 0; i < parts.size(); ++i) {
    // Only the names a pass writes are opened, beside the database (an
    // attached file opens read-only, as the database did).
    const int part = static_cast<int>(i) + 1;
    if (part >= kMaxDatabaseParts || parts[i] != database_part_name(part))
      return path + " names an unexpected part '" + parts[i] + "'";
    const std::string schema = "part" + std::to_string(part);
    const std::string part_path = (dir / parts[i]).string();
    sqlite3_stmt* attach = nullptr;
    if (sqlite3_prepare_v2(*db, "ATTACH DATABASE ? AS ?", -1, &attach, nullptr) == SQLITE_OK) {
      sqlite3_bind_text(attach, 1, part_path.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(attach, 2, schema.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(attach) != SQLITE_DONE) error = sqlite3_errmsg(*db);
    } else {
      error = sqlite3_errmsg(*db);
    }
    sqlite3_finalize(attach);
    std::vector<std::string> found;
    if (error.empty())
      found = text_rows(*db, "SELECT value FROM " + schema + ".part_info WHERE key = 'pass'", &error);
    if (!error.empty()) return "cannot read " + part_path + " (part of " + path + "): " + error;
    if (found.size() != 1 || found[0] != pass[0])
      return part_path + " is a part of another cluster pass than " + path + ": run the cluster pass again";
    view += " UNION ALL SELECT * FROM " + schema + ".communication";
  }
  if (sqlite3_exec(*db, view.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return "cannot join the parts of " + path + ": " + sqlite3_errmsg(*db);
  return "";
}

}  // namespace trainprof::exporter
