// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// printf into a std::string: the reports and findings are lines of numbers, and
// the format attribute has the compiler check every call's arguments (a
// variadic template would lose that).
#ifndef TRAINPROF_BASE_STRING_FORMAT_H_
#define TRAINPROF_BASE_STRING_FORMAT_H_

#include <string>

namespace trainprof::base {

// The formatted text, whatever its length.
[[gnu::format(printf, 1, 2)]] std::string format(const char* format, ...);

// Appends the formatted text to `out`.
[[gnu::format(printf, 2, 3)]] void append_format(std::string& out, const char* format, ...);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_STRING_FORMAT_H_
