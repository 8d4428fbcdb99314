// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Shared helpers for the tests.
#ifndef TRAINPROF_TESTS_TEST_UTIL_H_
#define TRAINPROF_TESTS_TEST_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "raw/raw_reader.h"

namespace trainprof::test {

// A fresh directory under $TMPDIR, removed (recursively) at the end of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Run directories (*_trainprof) directly under `parent`, sorted by name.
std::vector<std::string> run_dirs(const std::string& parent);

// Reads the single raw file of `run_dir`; fails the test when unreadable.
raw::RawFile read_run(const std::string& run_dir);

// Waits until the raw files under `run_dir`/raw hold `bytes` in all (what a
// recording process has flushed), polling; false after `timeout_ms`. Tests
// that kill a recorder wait on this, not on a fixed sleep that a loaded
// machine can outlast.
bool wait_for_raw_bytes(const std::string& run_dir, uint64_t bytes, int timeout_ms = 60000);

std::string read_text(const std::string& path);
// Replaces the file at `path` with `bytes`.
void write_bytes(const std::string& path, const std::string& bytes);

// Path of a helper program built beside the tests.
std::string helper_path(const std::string& name);

struct ProcessResult {
  int exit_code = -1;   // when it exited
  int term_signal = 0;  // when a signal ended it
  std::string output;   // stdout + stderr
};
// Runs argv with extra environment variables; waits for it.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {});

// The answer of the sqlite3 program at `sqlite3` to `query` on `db` (rows
// as lines, columns separated by ','); fails the test when sqlite3 does.
std::string sqlite3_query(const std::string& sqlite3, const std::string& db, const std::string& query);

// A child whose first stdout line has been read while it keeps running.
struct Child {
  int pid = -1;
  int out = -1;
  std::string first_line;
};
Child spawn(const std::vector<std::string>& argv);
// Waits for the child; returns the waitpid status.
int wait_status(Child& c);

// The chunks of raw file bytes, found by walking their headers from the
// file header (for tests that cut, copy and move whole chunks).
struct RawChunk {
  size_t offset;
  size_t size;  // header + payload
  raw::ChunkHeader header;
};
std::vector<RawChunk> raw_chunks(const std::string& bytes);
// Recomputes the CRC of the chunk at `offset` after its bytes were changed.
void reseal_chunk(std::string& bytes, size_t offset);
// The chunk `c` of `bytes` claiming `count` records, resealed (the damage
// only a bug or a hand can make: the checksum holds).
void set_record_count(std::string& bytes, const RawChunk& c, uint32_t count);
// `bytes` with the first event of the version 2 EVENTS chunk `c` naming
// string id `id`, resealed.
std::string with_first_event_named(const std::string& bytes, const RawChunk& c, uint64_t id);

// Counts of events by name (kinds with a name).
std::map<std::string, size_t> count_by_name(const raw::RawFile& file);

}  // namespace trainprof::test

#endif  // TRAINPROF_TESTS_TEST_UTIL_H_
