// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/csv_reader.h"

#include <fcntl.h>

#include "base/safe_file.h"

namespace trainprof::exporter {

CsvRows parse_csv(std::string_view text, bool* well_formed) {
  CsvRows rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  bool complete = !quoted && field.empty() && row.empty();
  if (!complete) {
    row.push_back(std::move(field));
    rows.push_back(std::move(row));
  }
  if (well_formed != nullptr) *well_formed = complete;
  return rows;
}

CsvRows read_csv_file(const std::string& path, bool* well_formed) {
  // A FIFO or device planted at the path must not block or be read.
  return parse_csv(base::read_regular_file_at(AT_FDCWD, path, /*follow=*/false), well_formed);
}

}  // namespace trainprof::exporter
