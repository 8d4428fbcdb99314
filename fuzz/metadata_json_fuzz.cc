// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// add_metadata_json's path: the depth-limited parse, then the dump that is
// stored.
#include <cstdint>
#include <string_view>

#include "base/json_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (trainprof::base::parse_json_limited(text, &j).empty()) {
    (void)j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
