// Copyright trainprof authors. trainprof::query_cluster_database: a query
// on a cluster's trainprof.db with its parts joined (`trainprof sql`).
#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "exporter/cluster_database.h"
#include "trainprof/analyse.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

// The database itself, or the one a directory (or its cluster output) holds.
std::string database_at(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const char* below : {"trainprof.db", "cluster_analysis_output/trainprof.db"}) {
    fs::path candidate = fs::path(path) / below;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return (fs::path(path) / "cluster_analysis_output/trainprof.db").string();
}

}  // namespace

std::string query_cluster_database(const std::string& path, const std::string& sql,
                                   const std::function<void(const QueryRow& row)>& on_row) {
  const std::string file = database_at(path);
  sqlite3* db = nullptr;
  std::string error = exporter::open_cluster_database(file, &db);
  sqlite3_stmt* s = nullptr;
  if (error.empty() && sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
    error = "cannot run the query on " + file + ": " + sqlite3_errmsg(db);
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
