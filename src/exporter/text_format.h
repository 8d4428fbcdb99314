// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Escaping and number formatting shared by the exporters: every string is
// escaped, so outputs are always valid JSON / CSV.
#ifndef TRAINPROF_EXPORTER_TEXT_FORMAT_H_
#define TRAINPROF_EXPORTER_TEXT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace trainprof::exporter {

// Appends `s` as a JSON string literal (with quotes). Control characters are
// escaped; invalid UTF-8 bytes become U+FFFD so the result always parses.
void append_json_string(std::string& out, std::string_view s);

// Appends a CSV field, quoted when it holds a comma, quote, CR or LF.
void append_csv_field(std::string& out, std::string_view s);

// Appends nanoseconds as microseconds with exactly 3 decimals ("-1.250").
void append_us(std::string& out, int64_t ns);

// Pointer versions for hot loops: write at `p` (room for 24 bytes), return the end.
char* write_uint(char* p, uint64_t v);
char* write_int(char* p, int64_t v);
char* write_us(char* p, int64_t ns);

// Whether `text` is a JSON array made only of integers, plain strings (no
// escapes, no control characters) and such arrays: what operator input
// shapes and types look like. Raw data is checked before it is written
// into a JSON file unquoted.
bool is_simple_json_array(std::string_view text);

void append_int(std::string& out, int64_t v);
void append_uint(std::string& out, uint64_t v);
// Shortest round-trip representation; non-finite values become 0.
void append_double(std::string& out, double v);
// Fixed decimals (for ratios).
void append_fixed(std::string& out, double v, int decimals);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_TEXT_FORMAT_H_
