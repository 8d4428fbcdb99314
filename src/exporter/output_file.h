// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A buffered output file written under a temporary name and renamed into place
// on commit() (exchanged with an earlier output, then that is removed), so a
// reader never sees a half-written output and a failed analysis leaves the
// previous one intact. Both names are relative to the output directory's
// descriptor, and the temporary name is fresh (base/safe_file.h): a planted
// symlink is never written through.
#ifndef TRAINPROF_EXPORTER_OUTPUT_FILE_H_
#define TRAINPROF_EXPORTER_OUTPUT_FILE_H_

#include <cstdint>
#include <string>

namespace trainprof::exporter {

// Where an output goes: `name` in the directory open as `dir_fd`; `dir` is
// that directory's path, for messages.
struct OutputPath {
  int dir_fd = -1;
  std::string dir;
  std::string name;
  std::string display() const { return dir + "/" + name; }
};

class OutputFile {
 public:
  explicit OutputFile(OutputPath where);
  ~OutputFile();  // removes the temporary file unless committed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Appends `buffer` (and clears it) once it holds at least `threshold` bytes.
  void drain(std::string& buffer, size_t threshold = 1 << 20);
  // Bytes written so far (drained).
  uint64_t offset() const { return offset_; }
  // Cuts the file back to `offset` bytes.
  void truncate(uint64_t offset);
  // Flushes, closes and renames into place. Returns false (see error()).
  bool commit(std::string& buffer);

 private:
  void fail(const std::string& what);

  OutputPath where_;
  std::string tmp_name_;
  int fd_ = -1;
  uint64_t offset_ = 0;
  bool committed_ = false;
  std::string error_;
};

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_OUTPUT_FILE_H_
