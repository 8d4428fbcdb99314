// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// profiler_config.json (dynamic profiling): a user edits it while training
// runs, so whatever it holds, the parser returns a config or throws
// std::invalid_argument; any other exception escapes and is reported as a
// crash. An accepted config's options validate.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "trainprof/dynamic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    trainprof::DynamicConfig config =
        trainprof::parse_dynamic_config(std::string_view(reinterpret_cast<const char*>(data), size));
    config.options.validate();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
