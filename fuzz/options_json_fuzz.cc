// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// TRAINPROF_OPTIONS: whatever it holds, the parser returns options or throws
// std::invalid_argument; any other exception escapes and is reported as a
// crash.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "trainprof/env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    trainprof::EnvOptions env =
        trainprof::parse_options_json(std::string_view(reinterpret_cast<const char*>(data), size));
    env.options.validate();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
