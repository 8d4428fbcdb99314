// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof::query_cluster_database: a query on a cluster's trainprof.db with
// its parts joined (`trainprof sql`).
#include <sqlite3.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/close_names.h"
#include "exporter/cluster_database.h"
#include "exporter/text_format.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

// The database itself, or the one a directory holds: its own, a cluster's
// (cluster_analysis_output/) or an analysed run's (PROFILER_OUTPUT/). Empty,
// with `error` saying what to give, when a directory holds none.
std::string database_at(const std::string& path, std::string* error) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const char* below :
       {"trainprof.db", "cluster_analysis_output/trainprof.db", "PROFILER_OUTPUT/trainprof.db"}) {
    fs::path candidate = fs::path(path) / below;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  std::string what =
      fs::exists(fs::path(path) / "raw", ec) || fs::exists(fs::path(path) / "PROFILER_OUTPUT", ec)
          ? "a run analysed without its database: `trainprof analyse RUN --export-type db` writes "
            "RUN/PROFILER_OUTPUT/trainprof.db"
      : find_run_directories(path).empty()
          ? "give a trainprof.db, a cluster directory or an analysed run directory"
          : "a directory of runs: `trainprof cluster PATH` writes their database, "
            "PATH/cluster_analysis_output/trainprof.db";
  *error = "no trainprof.db in '" + path + "' (" + what + ")";
  return "";
}

// The tables of `db`, for a query that names another.
std::vector<std::string> table_names(sqlite3* db) {
  std::vector<std::string> names;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') UNION "
                         "SELECT name FROM sqlite_temp_master WHERE type IN ('table', 'view') ORDER BY name",
                         -1, &s, nullptr) == SQLITE_OK) {
    while (sqlite3_step(s) == SQLITE_ROW)
      names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  }
  sqlite3_finalize(s);
  return names;
}

// SQLite's message, with the tables a missing one may have meant.
std::string query_error(sqlite3* db) {
  std::string message = sqlite3_errmsg(db);
  const std::string missing = "no such table: ";
  if (message.starts_with(missing)) {
    std::string table = message.substr(missing.size());
    if (auto dot = table.rfind('.'); dot != std::string::npos) table = table.substr(dot + 1);
    std::vector<std::string> tables = table_names(db);
    message += base::did_you_mean(table, tables);
    std::string all;
    for (const std::string& t : tables) all += (all.empty() ? "" : ", ") + t;
    message += "; the tables are: " + all;
  }
  return message;
}

}  // namespace

std::string query_row_csv(const QueryRow& row) {
  std::string line;
  for (size_t c = 0; c < row.size(); ++c) {
    if (c > 0) line += ',';
    if (row[c]) exporter::append_csv_field(line, *row[c]);
  }
  return line;
}

std::string query_cluster_database(const std::string& path, const std::string& sql,
                                   const std::function<void(const QueryRow& row)>& on_row) {
  std::string error;
  const std::string file = database_at(path, &error);
  if (!error.empty()) return error;
  sqlite3* db = nullptr;
  error = exporter::open_cluster_database(file, &db);
  sqlite3_stmt* s = nullptr;
  const char* rest = nullptr;
  if (error.empty() && sqlite3_prepare_v2(db, sql.c_str(), -1, &s, &rest) != SQLITE_OK)
    error = "cannot run the query on " + file + ": " + query_error(db);
  // One statement that reads: a second one would be left unrun without a
  // word, and a write has no place in a pass's output.
  if (error.empty() && s == nullptr) error = "the query holds no statement";
  if (error.empty() && rest != nullptr &&
      std::string_view(rest).find_first_not_of(" \t\r\n;") != std::string_view::npos)
    error = "one statement at a time: the query holds more than one";
  if (error.empty() && sqlite3_stmt_readonly(s) == 0)
    error = "only a statement that reads (SELECT, WITH, EXPLAIN) is run: " + file + " is read-only";
  if (error.empty()) {
    const int columns = sqlite3_column_count(s);
    QueryRow row(static_cast<size_t>(columns));
    for (int c = 0; c < columns; ++c) row[static_cast<size_t>(c)] = sqlite3_column_name(s, c);
    on_row(row);
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      for (int c = 0; c < columns; ++c) {
        const unsigned char* text = sqlite3_column_text(s, c);
        row[static_cast<size_t>(c)] =
            text != nullptr ? std::optional<std::string>(reinterpret_cast<const char*>(text)) : std::nullopt;
      }
      on_row(row);
    }
    if (rc != SQLITE_DONE) error = "the query on " + file + " failed: " + sqlite3_errmsg(db);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return error;
}

}  // namespace trainprof
