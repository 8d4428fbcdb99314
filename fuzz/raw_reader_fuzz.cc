// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The raw reader on any bytes, both ways it delivers events (stored, and
// streamed to a sink as the analysis does).
#include <cstdint>
#include <string>

#include "raw/raw_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainprof::raw;
  std::string error;
  std::optional<RawFile> f = read_raw_bytes(data, size, "fuzz.tpraw", &error);
  if (!f) return 0;
  size_t name_bytes = 0;
  for (const RawEvent& e : f->events) name_bytes += f->name(e.name_id).size();
  (void)f->realtime_offset_ns();
  uint64_t streamed = 0;
  EventSink sink = [&streamed](const RawEvent*, size_t count) { streamed += count; };
  f = read_raw_bytes(data, size, "fuzz.tpraw", &error, &sink);
  return name_bytes == SIZE_MAX ? 1 : 0;
}
