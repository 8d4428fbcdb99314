// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// core/out_of_memory.h.
#include "core/out_of_memory.h"

#include <atomic>
#include <string>

#include "base/log.h"
#include "core/flusher.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::core {
namespace {
std::atomic<OutOfMemoryListener> g_listener{nullptr};
}  // namespace

void set_out_of_memory_listener(OutOfMemoryListener listener) noexcept {
  g_listener.store(listener);
}

void note_out_of_memory(uint64_t bytes, uint64_t total_allocated, uint64_t total_reserved, uint64_t device,
                        const char* operator_name) noexcept {
  if (!detail::host_recording()) return;
  uint64_t now = detail::now_ticks();
  if (operator_name != nullptr) {
    try {
      record_event_fields(now, 0, operator_name, static_cast<uint8_t>(raw::EventKind::kMark), 0,
                          domain_id(raw::kOutOfMemoryDomain), 0);
    } catch (...) {  // the domain's name could not be kept: the failure alone
    }
  }
  record_memory(now, 0, static_cast<int64_t>(bytes & ((uint64_t{1} << 62) - 1)), total_allocated,
                total_reserved, device | raw::kMemoryFailed);
  static std::atomic<uint32_t> said{0};
  try {
    if (said.fetch_add(1) < 3) {
      base::log_error("out of memory: an allocation of " + std::to_string(bytes) +
                      " bytes failed; what was recorded up to it is written to the run (the analysis names "
                      "what was alive: oom_report.txt)");
    }
  } catch (...) {  // the message itself could not be made: the record is what counts
  }
  Flusher& flusher = Flusher::instance();
  if (flusher.is_open()) flusher.flush();  // a flight recorder's ring: nothing to write, returns
  if (OutOfMemoryListener listener = g_listener.load()) listener(bytes, device, operator_name);
}

}  // namespace trainprof::core
