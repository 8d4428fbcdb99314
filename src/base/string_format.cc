// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/string_format.h"

#include <cstdarg>
#include <cstdio>

namespace trainprof::base {
namespace {

void append_va(std::string& out, const char* format, va_list args) {
  va_list again;
  va_copy(again, args);
  char small[256];
  int n = std::vsnprintf(small, sizeof(small), format, args);
  if (n < 0) {
    va_end(again);
    return;
  }
  if (static_cast<size_t>(n) < sizeof(small)) {
    out.append(small, static_cast<size_t>(n));
  } else {
    size_t at = out.size();
    out.resize(at + static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<size_t>(n) + 1, format, again);
    out.resize(at + static_cast<size_t>(n));
  }
  va_end(again);
}

}  // namespace

std::string format(const char* format, ...) {
  std::string out;
  va_list args;
  va_start(args, format);
  append_va(out, format, args);
  va_end(args);
  return out;
}

void append_format(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  append_va(out, format, args);
  va_end(args);
}

}  // namespace trainprof::base
