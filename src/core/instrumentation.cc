// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Markers, async ranges, counters, thread names.
#include <atomic>
#include <bit>

#include "core/intern.h"
#include "core/recorder.h"
#include "core/session.h"
#include "trainprof/range.h"

namespace trainprof {

namespace {

// From registers into the block (record_event_fields: no Event copied
// through the stack).
void append(uint64_t t0, uint64_t t1, const char* name, raw::EventKind kind, uint16_t domain) {
  core::record_event_fields(t0, t1, name, static_cast<uint8_t>(kind), 0, domain, 0);
}

std::atomic<uint64_t> g_next_range_id{1};

}  // namespace

void mark(std::string_view message, std::string_view domain) {
  if (!detail::host_recording() || !core::domain_enabled(domain)) return;
  uint64_t now = detail::now_ticks();
  append(now, 0, detail::intern(message), raw::EventKind::kMark, core::domain_id(domain));
}

uint64_t range_start(std::string_view message, std::string_view domain) {
  if (!detail::host_recording() || !core::domain_enabled(domain)) return 0;
  uint64_t now = detail::now_ticks();
  uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  append(now, id, detail::intern(message), raw::EventKind::kAsyncBegin, core::domain_id(domain));
  return id;
}

void range_end(uint64_t id) {
  if (id == 0 || !detail::host_recording()) return;
  append(detail::now_ticks(), id, nullptr, raw::EventKind::kAsyncEnd, 0);
}

void counter(std::string_view name, double value) {
  if (!detail::host_recording()) return;
  uint64_t now = detail::now_ticks();
  append(now, std::bit_cast<uint64_t>(value), detail::intern(name), raw::EventKind::kCounter, 0);
}

void set_thread_name(std::string_view name) {
  core::Recorder::instance().set_current_thread_name(name);
}

}  // namespace trainprof
