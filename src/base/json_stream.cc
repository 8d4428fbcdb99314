// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/json_stream.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/json_limits.h"

namespace trainprof::base {

namespace {

// Text nlohmann writes between quotes as it is: printable ASCII without a
// quote or a backslash (the keys and most names); anything else goes
// through its escaping.
bool plain(std::string_view text) {
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') return false;
  }
  return true;
}

void append_quoted(std::string& out, std::string_view text) {
  if (plain(text)) {
    out += '"';
    out += text;
    out += '"';
  } else {
    out += json_text(nlohmann::json(std::string(text)));
  }
}

}  // namespace

std::string json_quoted(std::string_view text) {
  std::string out;
  append_quoted(out, text);
  return out;
}

JsonStream::JsonStream(std::string& out, int indent, int level)
    : out_(out), indent_(indent), base_level_(static_cast<size_t>(level < 0 ? 0 : level)) {}

void JsonStream::newline(size_t level) {
  out_ += '\n';
  out_.append(level * static_cast<size_t>(indent_), ' ');
}

// A value in an array is preceded by its separator and, indented, its line.
void JsonStream::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (open_.empty() || open_.back().object) return;
  if (!open_.back().empty) out_ += ',';
  if (indent_ >= 0) newline(base_level_ + open_.size());
  open_.back().empty = false;
}

JsonStream& JsonStream::begin_object() {
  before_value();
  out_ += '{';
  open_.push_back({true, true});
  return *this;
}

JsonStream& JsonStream::begin_array() {
  before_value();
  out_ += '[';
  open_.push_back({false, true});
  return *this;
}

// Closes the innermost object or array with `bracket`.
JsonStream& JsonStream::close(char bracket) {
  bool empty = open_.back().empty;
  open_.pop_back();
  if (!empty && indent_ >= 0) newline(base_level_ + open_.size());
  out_ += bracket;
  return *this;
}

JsonStream& JsonStream::end_object() {
  return close('}');
}

JsonStream& JsonStream::end_array() {
  return close(']');
}

JsonStream& JsonStream::key(std::string_view name) {
  Open& o = open_.back();
  if (!o.empty) out_ += ',';
  if (indent_ >= 0) newline(base_level_ + open_.size());
  o.empty = false;
  append_quoted(out_, name);
  out_ += indent_ >= 0 ? ": " : ":";
  after_key_ = true;
  return *this;
}

JsonStream& JsonStream::number(double value) {
  before_value();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  // The routine nlohmann's serializer writes a double with (Grisu2, the
  // shortest text that reads back the same; ".0" on a whole number),
  // without the serializer's set-up per value.
  char text[64];
  char* end = nlohmann::detail::to_chars(text, text + sizeof(text), value);
  out_.append(text, static_cast<size_t>(end - text));
  return *this;
}

JsonStream& JsonStream::number(int64_t value) {
  before_value();
  out_ += std::to_string(value);
  return *this;
}

JsonStream& JsonStream::number(uint64_t value) {
  before_value();
  out_ += std::to_string(value);
  return *this;
}

JsonStream& JsonStream::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
  return *this;
}

JsonStream& JsonStream::string(std::string_view value) {
  before_value();
  append_quoted(out_, value);
  return *this;
}

JsonStream& JsonStream::raw(std::string_view json_text) {
  before_value();
  out_ += json_text;
  return *this;
}

}  // namespace trainprof::base
