// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/log.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

namespace trainprof::base {
namespace {

void write_line(std::string_view line) {
  // One write() so lines from several threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

// TRAINPROF_LOG_LEVEL, its case ignored ("warn" for warning); another value
// is said once, and info used.
LogLevel level_from_env() {
  const char* v = std::getenv("TRAINPROF_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return LogLevel::kInfo;
  std::string name(v);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "error") return LogLevel::kError;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  write_line("[trainprof] [WARNING] TRAINPROF_LOG_LEVEL=" + std::string(v) +
             " is not a level (error, warning, info, debug); info is used\n");
  return LogLevel::kInfo;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
  }
  return "?";
}

}  // namespace

void log(LogLevel level, std::string_view message) {
  static const LogLevel threshold = level_from_env();
  if (level > threshold) return;
  std::string line = "[trainprof] [";
  line += level_name(level);
  line += "] ";
  line += message;
  line += '\n';
  write_line(line);
}

}  // namespace trainprof::base
