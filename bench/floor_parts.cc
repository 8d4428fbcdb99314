// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "floor_parts.h"

#include <atomic>

#include "trainprof/range.h"

namespace {

// The recorder's event and block shapes (core/event.h), without the pool: a
// block that wraps is the store floor with every line hot in the cache.
struct FloorEvent {
  uint64_t t0;
  uint64_t t1;
  const char* name;
  uint8_t kind;
  uint8_t reserved;
  uint16_t domain;
  uint32_t aux;
};
static_assert(sizeof(FloorEvent) == 32);

constexpr uint32_t kFloorEvents = (64 * 1024 - 64) / sizeof(FloorEvent);

struct alignas(64) FloorBlock {
  std::atomic<uint32_t> committed{0};
  char pad[60];
  FloorEvent events[kFloorEvents];
};

FloorBlock* new_block() {
  return new FloorBlock();  // once per thread, off the measured path; never freed
}

[[gnu::tls_model("initial-exec")]] thread_local FloorBlock* tls_floor_block = nullptr;

inline FloorBlock* current_block() {
  FloorBlock* b = tls_floor_block;
  if (b == nullptr) [[unlikely]] {
    b = new_block();
    tls_floor_block = b;
  }
  return b;
}

}  // namespace

extern "C" {

void trainprof_floor_end_call(const char* name, uint64_t start_ticks) noexcept {
  uint64_t end = trainprof::detail::now_ticks();
  asm volatile("" : : "r"(name), "r"(start_ticks), "r"(end) : "memory");
}

void trainprof_floor_end_tls(const char* name, uint64_t start_ticks) noexcept {
  uint64_t end = trainprof::detail::now_ticks();
  FloorBlock* b = current_block();
  asm volatile("" : : "r"(name), "r"(start_ticks), "r"(end), "r"(b) : "memory");
}

void trainprof_floor_end_tls_store(const char* name, uint64_t start_ticks) noexcept {
  uint64_t end = trainprof::detail::now_ticks();
  FloorBlock* b = current_block();
  uint32_t i = b->committed.load(std::memory_order_relaxed);
  if (i >= kFloorEvents) i = 0;  // wrap: the real recorder takes a new block here
  b->events[i] = FloorEvent{start_ticks, end, name, 1, 0, 0, 0};
  b->committed.store(i + 1, std::memory_order_release);
}

}  // extern "C"
