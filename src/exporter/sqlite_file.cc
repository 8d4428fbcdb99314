// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/sqlite_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/safe_file.h"

namespace trainprof::exporter {

SqliteFile::SqliteFile(const OutputPath& path, const char* schema) : path_(path) {
  // The output directory is private (0700) and the name fresh: SQLite opens
  // the file we made, never one planted under a name it would create.
  int fd = base::create_temporary_at(path.dir_fd, path.name, &tmp_name_);
  if (fd < 0) {
    error_ = "cannot create " + path.display() + ": " + std::strerror(errno);
    return;
  }
  ::close(fd);
  std::string tmp_path = path.dir + "/" + tmp_name_;
  // One thread uses the connection: no mutex around each call (7 % of the
  // time of a 24-million-row table).
  if (sqlite3_open_v2(tmp_path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    error_ = "cannot open " + path.display() +
             " as a database: " + (db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory");
    return;
  }
  // One writer, a file that is renamed into place only when complete: no
  // journal and no syncs are needed for it to be whole or absent.
  exec(
      "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE; "
      "PRAGMA page_size=65536; PRAGMA cache_size=-65536;");
  exec("BEGIN");
  exec(schema);
}

SqliteFile::~SqliteFile() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
  if (!finished_ && !tmp_name_.empty()) unlinkat(path_.dir_fd, tmp_name_.c_str(), 0);
}

bool SqliteFile::exec(const char* sql) {
  if (!error_.empty() || db_ == nullptr) return false;
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    error_ =
        std::string("cannot write the database: ") + (message != nullptr ? message : sqlite3_errmsg(db_));
    sqlite3_free(message);
    return false;
  }
  return true;
}

std::string SqliteFile::finish(const char* indexes) {
  exec(indexes);
  exec("COMMIT");
  // Closed whatever happened (every statement is finalized by now).
  if (db_ != nullptr && sqlite3_close_v2(db_) != SQLITE_OK && error_.empty())
    error_ = "cannot close " + path_.display();
  db_ = nullptr;
  if (error_.empty() && renameat(path_.dir_fd, tmp_name_.c_str(), path_.dir_fd, path_.name.c_str()) != 0)
    error_ = "cannot rename the database into place as " + path_.display() + ": " + std::strerror(errno);
  if (error_.empty()) finished_ = true;
  return error_;
}

Statement::Statement(sqlite3* db, const char* sql, std::string* error) {
  if (error->empty() && db != nullptr && sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK)
    *error = std::string("cannot prepare '") + sql + "': " + sqlite3_errmsg(db);
}

bool Statement::step(sqlite3* db, std::string* error) {
  if (s_ == nullptr || !error->empty()) return false;
  int rc = sqlite3_step(s_);
  sqlite3_reset(s_);
  if (rc != SQLITE_DONE) {
    *error = std::string("cannot write the database: ") + sqlite3_errmsg(db);
    return false;
  }
  return true;
}

}  // namespace trainprof::exporter
