// Copyright trainprof authors.
#include "base/log.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace trainprof::base {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("TRAINPROF_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
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
  // One write() so lines from several threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace trainprof::base
