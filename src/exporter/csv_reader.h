// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Reads back the CSV files the exporters write (RFC 4180: quoted fields may
// hold commas, quotes and line breaks).
#ifndef TRAINPROF_EXPORTER_CSV_READER_H_
#define TRAINPROF_EXPORTER_CSV_READER_H_

#include <string>
#include <string_view>
#include <vector>

namespace trainprof::exporter {

using CsvRows = std::vector<std::vector<std::string>>;

// Parses CSV text. `well_formed` (optional) is false when the text ends inside
// a quoted field or without a final line break.
CsvRows parse_csv(std::string_view text, bool* well_formed = nullptr);

// Reads and parses a file; empty when it cannot be read.
CsvRows read_csv_file(const std::string& path, bool* well_formed = nullptr);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_CSV_READER_H_
