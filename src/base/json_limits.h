// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Parsing JSON text that comes from outside the library (add_metadata_json,
// TRAINPROF_OPTIONS, files of a run): never throws, and refuses deep nesting.
#ifndef TRAINPROF_BASE_JSON_LIMITS_H_
#define TRAINPROF_BASE_JSON_LIMITS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace trainprof::base {

// Deeper documents are refused: nlohmann's parser is iterative, but dump()
// recurses once per level, so 100,000 levels would overflow a thread's stack.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text` into *out. Returns "" on success, else why it was refused
// (invalid JSON, a number out of range such as 1e999, nesting deeper than
// `max_depth`, out of memory); *out is then left null.
std::string parse_json_limited(std::string_view text, nlohmann::json* out, int max_depth = kMaxJsonDepth);

// The JSON object in the regular file `path` (a symbolic link is not
// followed), read and parsed as above; null when the file is missing or
// unreadable, or holds no JSON object.
nlohmann::json read_json_object(const std::string& path);

// `value` as JSON text (indented by `indent` spaces, -1: one line), with
// each byte of a string that is not UTF-8 written as U+FFFD: paths and names
// come from outside and need not be UTF-8, where nlohmann's dump() throws.
inline std::string json_text(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A field of a parsed outside document, `fallback` when `j` is not an
// object or the field is missing or of another type: nlohmann's value()
// throws on a field of the wrong type, and a hand-edited file must not make
// a report fail.
inline std::string string_field(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
inline double number_field(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_JSON_LIMITS_H_
