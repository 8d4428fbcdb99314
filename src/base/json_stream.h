// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// JSON text written as it is made, byte for byte as nlohmann's dump() would
// write the same document (its spacing, its numbers, its string escapes
// with bytes that are not UTF-8 as U+FFFD), without building the tree: at
// a thousand ranks the communication tables are hundreds of MB, and a
// tree per table cost most of the cluster pass.
//
// nlohmann keeps an object's keys sorted (std::map): a caller writes them
// in that order (std::string's comparison), which the tests check against
// nlohmann's own dump.
#ifndef TRAINPROF_BASE_JSON_STREAM_H_
#define TRAINPROF_BASE_JSON_STREAM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainprof::base {

class JsonStream {
 public:
  // Appends to `out`. `indent`: spaces per level, -1 for one line;
  // `level`: the depth the first value is written at (a value placed
  // inside a document being written elsewhere).
  explicit JsonStream(std::string& out, int indent = -1, int level = 0);

  JsonStream& begin_object();
  JsonStream& end_object();
  JsonStream& begin_array();
  JsonStream& end_array();
  JsonStream& key(std::string_view name);

  JsonStream& number(double value);
  JsonStream& number(int64_t value);
  JsonStream& number(uint64_t value);
  JsonStream& number(int value) { return number(static_cast<int64_t>(value)); }
  JsonStream& boolean(bool value);
  JsonStream& string(std::string_view value);
  // A value already in JSON text, written as it is (made for this level).
  JsonStream& raw(std::string_view json_text);

  // `key` then a number: the common case.
  JsonStream& field(std::string_view name, double value) { return key(name).number(value); }

 private:
  void before_value();
  JsonStream& close(char bracket);
  void newline(size_t level);

  std::string& out_;
  int indent_;
  size_t base_level_;
  struct Open {
    bool object;
    bool empty;
  };
  std::vector<Open> open_;
  bool after_key_ = false;
};

// `text` as a JSON string, quotes included, as nlohmann writes it.
std::string json_quoted(std::string_view text);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_JSON_STREAM_H_
