// Copyright trainprof authors.
#include "exporter/cluster_database.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "analysis/rank_indexed.h"
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
CREATE TABLE communication (rank INTEGER NOT NULL, step INTEGER, group_id INTEGER NOT NULL,
  sequence INTEGER NOT NULL, operation_id INTEGER NOT NULL, transfer INTEGER NOT NULL, peer INTEGER,
  tag INTEGER, sends INTEGER, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL,
  transit_ns INTEGER NOT NULL, bytes INTEGER NOT NULL, one_host INTEGER NOT NULL);
CREATE TABLE collectives (group_id INTEGER NOT NULL, sequence INTEGER NOT NULL, operation_id INTEGER NOT NULL,
  step INTEGER, members INTEGER NOT NULL, bytes INTEGER NOT NULL, first_start_ns INTEGER NOT NULL,
  last_start_ns INTEGER NOT NULL, last_rank INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  wait_ns INTEGER NOT NULL, PRIMARY KEY (group_id, sequence)) WITHOUT ROWID;
CREATE TABLE links (src INTEGER NOT NULL, dst INTEGER NOT NULL, kind TEXT NOT NULL, transport TEXT NOT NULL,
  bytes INTEGER NOT NULL, transit_ns INTEGER NOT NULL, operations INTEGER NOT NULL, gb_per_s REAL,
  slow INTEGER NOT NULL, only_waited INTEGER NOT NULL);
)sql";

constexpr const char* kIndexes = R"sql(
CREATE INDEX communication_by_collective ON communication(group_id, sequence);
CREATE INDEX communication_by_rank ON communication(rank, step);
CREATE INDEX collectives_by_step ON collectives(step);
)sql";

// Interned names: the strings table's ids (operations) or the groups'.
// Rows come in runs of one group and operation: the last name is checked
// before the map.
class Ids {
 public:
  int64_t of(std::string_view name, bool* fresh) {
    *fresh = false;
    if (last_id_ != 0 && analysis::same_name(name, last_)) return last_id_;
    auto [it, added] = ids_.try_emplace(std::string(name), static_cast<int64_t>(ids_.size()) + 1);
    *fresh = added;
    last_ = it->first;
    last_id_ = it->second;
    return last_id_;
  }

 private:
  std::unordered_map<std::string, int64_t> ids_;
  std::string_view last_;  // a key of ids_: nodes stay put
  int64_t last_id_ = 0;
};

struct RankTotals {
  uint64_t operations = 0, elapse_ns = 0, wait_ns = 0, transit_ns = 0, bytes = 0;
};

class Writer {
 public:
  Writer(const ClusterTables& in, const OutputPath& path) : in_(in), file_(path, kSchema) {}

  std::string write() {
    communication();
    ranks();
    steps();
    links();
    run_info();
    return file_.finish(kIndexes);
  }

 private:
  sqlite3* db() { return file_.db(); }
  std::string* error() { return &file_.error(); }

  int64_t operation_id(std::string_view name) {
    bool fresh = false;
    int64_t id = operations_.of(name, &fresh);
    if (fresh) insert_string_->bind(1, id).bind(2, name).step(db(), error());
    return id;
  }

  int64_t group_id(const CommTiming& t) {
    bool fresh = false;
    int64_t id = groups_.of(t.group, &fresh);
    if (fresh) {
      std::string ranks;
      size_t size = t.group_ranks != nullptr ? t.group_ranks->size() : 0;
      for (size_t i = 0; i < size; ++i) ranks += (i == 0 ? "" : ",") + std::to_string((*t.group_ranks)[i]);
      insert_group_->bind(1, id).bind(2, t.group).bind(3, static_cast<int64_t>(size)).bind(4, ranks);
      insert_group_->step(db(), error());
    }
    return id;
  }

  // Every timing; and each collective, whose members' timings come
  // together ((group, sequence, rank) order), once all of them are seen.
  void communication() {
    insert_string_ = std::make_unique<Statement>(db(), "INSERT INTO strings VALUES (?, ?)", error());
    insert_group_ =
        std::make_unique<Statement>(db(), "INSERT INTO communication_groups VALUES (?, ?, ?, ?)", error());
    Statement row(db(), "INSERT INTO communication VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  error());
    Statement collective(db(), "INSERT OR IGNORE INTO collectives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         error());
    const std::vector<CommTiming>& timings = in_.timings;
    for (size_t i = 0; i < timings.size() && error()->empty(); ++i) {
      const CommTiming& t = timings[i];
      int64_t group = group_id(t), operation = operation_id(t.operation);
      row.bind(1, static_cast<int64_t>(t.rank))
          .bind_or_null(2, t.step >= 0, t.step)
          .bind(3, group)
          .bind(4, t.sequence)
          .bind(5, operation)
          .bind(6, static_cast<int64_t>(t.transfer))
          .bind_or_null(7, t.transfer && t.peer >= 0, t.peer)
          .bind_or_null(8, t.transfer && t.tag >= 0, t.tag)
          .bind_or_null(9, t.transfer, t.sends)
          .bind(10, i64(t.start_ns))
          .bind(11, i64(t.end_ns))
          .bind(12, i64(t.wait_ns))
          .bind(13, i64(t.transit_ns()))
          .bind(14, i64(t.bytes))
          .bind(15, static_cast<int64_t>(t.one_host))
          .step(db(), error());
      RankTotals& totals = totals_[t.rank];
      ++totals.operations;
      totals.elapse_ns += t.elapse_ns();
      totals.wait_ns += t.wait_ns;
      totals.transit_ns += t.transit_ns();
      totals.bytes += t.bytes;
      if (t.transfer) continue;
      // The collective's last arrival: by start, then rank (analysis::match_collective's order).
      if (first_ == nullptr || !analysis::same_name(first_->group, t.group) ||
          first_->sequence != t.sequence) {
        first_ = &t;
        last_ = &t;
        members_ = 0;
        end_ = 0;
        wait_ = 0;
        first_start_ = t.start_ns;
        bytes_ = 0;
      }
      ++members_;
      if (t.start_ns >= last_->start_ns) last_ = &t;
      first_start_ = std::min(first_start_, t.start_ns);
      end_ = std::max(end_, t.end_ns);
      wait_ += t.wait_ns;
      bytes_ = std::max(bytes_, t.bytes);
      bool ends = i + 1 == timings.size() || timings[i + 1].transfer ||
                  !analysis::same_name(timings[i + 1].group, t.group) ||
                  timings[i + 1].sequence != t.sequence;
      if (!ends) continue;
      collective.bind(1, group)
          .bind(2, t.sequence)
          .bind(3, operation_id(first_->operation))
          .bind_or_null(4, last_->step >= 0, last_->step)
          .bind(5, static_cast<int64_t>(members_))
          .bind(6, i64(bytes_))
          .bind(7, i64(first_start_))
          .bind(8, i64(last_->start_ns))
          .bind(9, static_cast<int64_t>(last_->rank))
          .bind(10, i64(end_))
          .bind(11, i64(wait_))
          .step(db(), error());
    }
    insert_string_.reset();
    insert_group_.reset();
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
      const RankTotals& t = totals_[r.rank];
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
  }

  const ClusterTables& in_;
  SqliteFile file_;
  std::unique_ptr<Statement> insert_string_, insert_group_;
  Ids operations_, groups_;
  analysis::RankIndexed<RankTotals> totals_;  // a hash per row cost 4 % of the table's time
  // The collective being read: its first timing, its last arrival so far.
  const CommTiming* first_ = nullptr;
  const CommTiming* last_ = nullptr;
  uint64_t members_ = 0, end_ = 0, wait_ = 0, first_start_ = 0, bytes_ = 0;
};

}  // namespace

std::string write_cluster_database(const ClusterTables& tables, const OutputPath& path) {
  return Writer(tables, path).write();
}

}  // namespace trainprof::exporter
