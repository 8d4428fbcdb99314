// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The CSV reader (outputs read back by `trainprof summary` and the tests).
#include <cstdint>
#include <string_view>

#include "exporter/csv_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool well_formed = false;
  trainprof::exporter::CsvRows rows = trainprof::exporter::parse_csv(
      std::string_view(reinterpret_cast<const char*>(data), size), &well_formed);
  return rows.size() > size + 1 ? 1 : 0;
}
