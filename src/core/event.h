// Copyright trainprof authors. The in-memory event record and the buffer block.
//
// Tracy-style: a fixed 32-byte record written by one thread into its own
// block; the flusher turns records into the compact raw encoding.
#ifndef TRAINPROF_CORE_EVENT_H_
#define TRAINPROF_CORE_EVENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "raw/format.h"

namespace trainprof::detail {

struct Event {
  uint64_t t0;       // ticks
  uint64_t t1;       // end ticks (ranges, steps, operators) or payload b (ids, counter bits)
  const char* name;  // process-lifetime string (literal or intern())
  uint8_t kind;      // raw::EventKind
  uint8_t reserved;  // kOperator: raw::kOperator* flags
  uint16_t domain;   // marker domain id (intern.h); kOperator: forward thread id
  uint32_t aux;      // step number for kStep; kOperator: sequence number
};
// kOperator without a sequence number (LibTorch's -1).
inline constexpr uint32_t kNoSequenceNumber = 0xffffffffu;
static_assert(sizeof(Event) == 32, "Event is a fixed 32-byte record");

inline constexpr size_t kBlockBytes = 64 * 1024;
inline constexpr size_t kBlockHeaderBytes = 64;
inline constexpr uint32_t kEventsPerBlock =
    static_cast<uint32_t>((kBlockBytes - kBlockHeaderBytes) / sizeof(Event));

// One block of a thread's buffer. `committed` is written only by the owning
// thread (release) and read by the flusher (acquire); `flushed` belongs to the
// flusher alone.
struct alignas(64) Block {
  std::atomic<uint32_t> committed;
  uint32_t flushed;
  uint32_t owner_tid;
  uint32_t reserved;
  char pad[kBlockHeaderBytes - 16];
  Event events[kEventsPerBlock];
};
static_assert(sizeof(Block) == kBlockBytes, "a Block fills exactly kBlockBytes");

}  // namespace trainprof::detail

#endif  // TRAINPROF_CORE_EVENT_H_
