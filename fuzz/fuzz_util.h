// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Shared by the fuzz targets: a scratch directory for the parsers that read
// paths (a run directory, an ELF module).
#ifndef TRAINPROF_FUZZ_FUZZ_UTIL_H_
#define TRAINPROF_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace trainprof::fuzz {

// A private directory, in memory when /dev/shm is there (targets write one
// file per input), removed when the process exits.
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler below still needs it.
  static const std::string* dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    auto* d = new std::string(base + "/trainprof_fuzz_XXXXXX");
    if (mkdtemp(d->data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
}

}  // namespace trainprof::fuzz

#endif  // TRAINPROF_FUZZ_FUZZ_UTIL_H_
