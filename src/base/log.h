// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Diagnostics on stderr, prefixed "[trainprof]".
//
// The profiler reports misuse and failures here instead of throwing into the
// training loop. TRAINPROF_LOG_LEVEL=error|warning|info|debug sets the level
// (default: info).
#ifndef TRAINPROF_BASE_LOG_H_
#define TRAINPROF_BASE_LOG_H_

#include <string_view>

namespace trainprof::base {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

void log(LogLevel level, std::string_view message);
inline void log_error(std::string_view m) {
  log(LogLevel::kError, m);
}
inline void log_warning(std::string_view m) {
  log(LogLevel::kWarning, m);
}
inline void log_info(std::string_view m) {
  log(LogLevel::kInfo, m);
}
inline void log_debug(std::string_view m) {
  log(LogLevel::kDebug, m);
}

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_LOG_H_
