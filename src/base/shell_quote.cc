// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/shell_quote.h"

#include <string_view>

namespace trainprof::base {
namespace {

bool plain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  bool needs_quotes = word.empty();
  for (char c : word) needs_quotes = needs_quotes || !plain(c);
  if (!needs_quotes) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";  // end the quote, an escaped quote, quote again
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace trainprof::base
