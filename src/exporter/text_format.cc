// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/text_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace trainprof::exporter {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3f);
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return n;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default: {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        }
      }
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        out += "\xef\xbf\xbd";  // U+FFFD
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
    }
  }
  out += '"';
}

void append_csv_field(std::string& out, std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += s;
    return;
  }
  out += '"';
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

char* write_uint(char* p, uint64_t v) {
  return std::to_chars(p, p + 24, v).ptr;
}

char* write_int(char* p, int64_t v) {
  return std::to_chars(p, p + 24, v).ptr;
}

namespace {

// Recursive descent over [ value (, value)* ] with value: integer, "plain
// string" or a nested array. `depth` bounds the recursion on hostile input.
bool simple_json_value(std::string_view t, size_t& i, int depth) {
  auto skip_spaces = [&] {
    while (i < t.size() && t[i] == ' ') ++i;
  };
  skip_spaces();
  if (i >= t.size()) return false;
  if (t[i] == '[') {
    if (depth > 16) return false;
    ++i;
    skip_spaces();
    if (i < t.size() && t[i] == ']') return ++i, true;
    while (true) {
      if (!simple_json_value(t, i, depth + 1)) return false;
      skip_spaces();
      if (i >= t.size()) return false;
      if (t[i] == ']') return ++i, true;
      if (t[i++] != ',') return false;
    }
  }
  if (t[i] == '"') {
    for (++i; i < t.size() && t[i] != '"'; ++i) {
      if (t[i] == '\\' || static_cast<unsigned char>(t[i]) < 0x20) return false;
    }
    return i++ < t.size();
  }
  size_t start = i;
  if (t[i] == '-') ++i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  return i > start && t[i - 1] != '-';
}

}  // namespace

bool is_simple_json_array(std::string_view text) {
  size_t i = 0;
  return !text.empty() && text.front() == '[' && simple_json_value(text, i, 0) && i == text.size();
}

char* write_us(char* p, int64_t ns) {
  if (ns < 0) {
    *p++ = '-';
    ns = -ns;
  }
  p = write_uint(p, static_cast<uint64_t>(ns) / 1000);
  uint64_t frac = static_cast<uint64_t>(ns) % 1000;
  p[0] = '.';
  p[1] = static_cast<char>('0' + frac / 100);
  p[2] = static_cast<char>('0' + frac / 10 % 10);
  p[3] = static_cast<char>('0' + frac % 10);
  return p + 4;
}

void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  out.append(buf, write_uint(buf, v));
}

void append_us(std::string& out, int64_t ns) {
  char buf[32];
  out.append(buf, write_us(buf, ns));
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_fixed(std::string& out, double v, int decimals) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, decimals);
  out.append(buf, r.ptr);
}

}  // namespace trainprof::exporter
