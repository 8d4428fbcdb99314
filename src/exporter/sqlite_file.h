// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A SQLite database written the safe way, and its prepared statements: what
// trainprof.db of a run (database.h) and of a cluster (cluster_database.h)
// share.
//
// The file is made fresh under a random name in the output directory
// (O_EXCL, no symlink followed; base/safe_file.h), which SQLite then opens
// by name without ever creating one; everything goes in one transaction with
// no journal, and finish() renames the file into place once whole, so a
// reader never opens half a database and a failed analysis leaves the
// previous one.
#ifndef TRAINPROF_EXPORTER_SQLITE_FILE_H_
#define TRAINPROF_EXPORTER_SQLITE_FILE_H_

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "exporter/output_file.h"

namespace trainprof::exporter {

class SqliteFile {
 public:
  // Creates and opens the temporary file, then begins the transaction and
  // runs `schema`; a failure is kept in error().
  SqliteFile(const OutputPath& path, const char* schema);
  ~SqliteFile();  // closes, and removes the temporary file unless finished
  SqliteFile(const SqliteFile&) = delete;
  SqliteFile& operator=(const SqliteFile&) = delete;

  sqlite3* db() const { return db_; }
  // The first error ("" while none); statements record theirs here.
  std::string& error() { return error_; }
  // Runs `sql` unless an error came before; false when it fails.
  bool exec(const char* sql);
  // Runs `indexes` (made after the rows: faster than keeping them up to
  // date), commits, closes and renames the file into place. Every
  // statement must be finalized by then. Returns "" or the first error.
  std::string finish(const char* indexes);

 private:
  OutputPath path_;
  std::string tmp_name_;
  sqlite3* db_ = nullptr;
  std::string error_;
  bool finished_ = false;
};

// A prepared statement, finalized at the end of its scope. A statement that
// could not be prepared, or any step after an error, does nothing.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql, std::string* error);
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v) {
    if (s_ != nullptr) sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Statement& bind(int i, double v) {
    if (s_ != nullptr) sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Statement& bind(int i, std::string_view v) {
    if (s_ != nullptr) sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // Text, or NULL when empty (what was not recorded).
  Statement& bind_text_or_null(int i, std::string_view v) {
    if (v.empty()) return bind_null(i);
    if (s_ != nullptr) sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind_null(int i) {
    if (s_ != nullptr) sqlite3_bind_null(s_, i);
    return *this;
  }
  // `v`, or NULL when it is not `known` (what does not apply to a row).
  Statement& bind_or_null(int i, bool known, int64_t v) { return known ? bind(i, v) : bind_null(i); }
  // Runs it once and resets it; false (and `error`) when it failed.
  bool step(sqlite3* db, std::string* error);

 private:
  sqlite3_stmt* s_ = nullptr;
};

// SQLite's integers are signed: counts and times beyond INT64_MAX saturate.
inline int64_t i64(uint64_t v) {
  return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX));
}

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_SQLITE_FILE_H_
