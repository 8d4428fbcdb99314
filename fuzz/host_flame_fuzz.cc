// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The report's reading of trace_view.json into the host time tree: the
// file is read back and may have been edited or cut.
#include <cstdint>
#include <sstream>
#include <string>

#include "exporter/host_flame.h"
#include "exporter/html_charts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  trainprof::exporter::CsvRows python = {{"Step", "Function", "File", "Line", "Input", "Time(us)"},
                                         {"1", "f", "a.py", "3", "no", "5.5"}};
  trainprof::exporter::HostFlame flame = trainprof::exporter::read_host_flame(in, python, 1000);
  std::string svg = trainprof::exporter::html::icicle(flame);
  return flame.steps > size ? 1 : 0;
}
