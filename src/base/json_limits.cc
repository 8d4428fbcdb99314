// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/json_limits.h"

#include <fcntl.h>

#include <exception>

#include "base/safe_file.h"

namespace trainprof::base {
namespace {

// The deepest nesting of arrays and objects in `text`, counting brackets
// outside strings; stops counting past `limit`. Linear and allocation-free,
// so it runs before the parser builds anything. Invalid JSON may miscount:
// the parser refuses it anyway.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, which may be a quote
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::string parse_json_limited(std::string_view text, nlohmann::json* out, int max_depth) {
  *out = nullptr;
  if (nesting_depth(text, max_depth) > max_depth) {
    return "nested deeper than " + std::to_string(max_depth) + " levels";
  }
  try {
    *out = nlohmann::json::parse(text.begin(), text.end());
    return "";
  } catch (const std::exception& e) {  // json::exception (parse_error, out_of_range: 1e999), bad_alloc
    *out = nullptr;
    return e.what();
  }
}

nlohmann::json read_json_object(const std::string& path) {
  std::string text = read_regular_file_at(AT_FDCWD, path, /*follow=*/false);
  nlohmann::json j;
  if (text.empty() || !parse_json_limited(text, &j).empty() || !j.is_object()) return nullptr;
  return j;
}

}  // namespace trainprof::base
