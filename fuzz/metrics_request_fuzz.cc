// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The metrics endpoint's look at a request's head (whatever a client on the
// machine sends): an answer, never a read outside the bytes.
#include <cstdint>
#include <string_view>

#include "core/metrics_endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view head(reinterpret_cast<const char*>(data), size);
  (void)trainprof::core::is_metrics_request(head);
  return 0;
}
