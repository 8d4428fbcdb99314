// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The symbolizer's ELF reader: the module files are named by the raw data, so
// they may be anything. The input is the module; the frames look up a few
// offsets in it.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "analysis/symbolizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string module = trainprof::fuzz::scratch_dir() + "/module.so";
  trainprof::fuzz::write_file(module, data, size);
  uint32_t tail = 0;
  if (size >= 4) std::memcpy(&tail, data + size - 4, 4);
  char frames[512];
  std::snprintf(frames, sizeof(frames), "%s+0x0;%s+0x40;%s+0x1000;%s+0x%x;?+0x10", module.c_str(),
                module.c_str(), module.c_str(), module.c_str(), tail);
  trainprof::analysis::Symbolizer symbolizer;  // a fresh module cache per input
  (void)symbolizer.symbolize(frames);
  return 0;
}
