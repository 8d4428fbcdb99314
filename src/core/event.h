// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The in-memory event record and the buffer block.
//
// Tracy-style: a fixed 32-byte record written by one thread into its own
// block; the flusher turns records into the compact raw encoding.
#ifndef TRAINPROF_CORE_EVENT_H_
#define TRAINPROF_CORE_EVENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "raw/format.h"

namespace trainprof::core {

struct Event {
  uint64_t t0;       // ticks
  uint64_t t1;       // end ticks (ranges, steps, operators) or payload b (ids, counter bits)
  const char* name;  // process-lifetime string (literal or intern())
  uint8_t kind;      // raw::EventKind
  uint8_t reserved;  // kOperator: raw::kOperator* flags; kStep: raw::kStep* flags
  uint16_t domain;   // marker domain id (intern.h); kOperator: forward thread id
  uint32_t aux;      // step number for kStep; kOperator: sequence number
};
// The name every kStep event is recorded under, its number in `aux`: the
// raw file's "ProfilerStep#N" is made when it is written (RawEncoder), so
// that a process stepping for days keeps no string per step.
inline constexpr const char* kStepNamePrefix = "ProfilerStep#";
// kOperator without a sequence number (LibTorch's -1).
inline constexpr uint32_t kNoSequenceNumber = 0xffffffffu;
static_assert(sizeof(Event) == 32, "Event is a fixed 32-byte record");

// A memory report does not fit one Event: it fills two consecutive slots of
// one block, committed together (record_memory), laid out as below and
// read back by the flusher with std::bit_cast. `kind` stays at Event::kind's offset.
struct MemoryReport {
  uint64_t t0;       // ticks
  uint64_t address;  // the block's address
  int64_t bytes;     // > 0: allocated, < 0: freed
  uint8_t kind;      // raw::EventKind::kMemory
  uint8_t unused[7];
};
struct MemoryTotals {  // the slot after a MemoryReport
  uint64_t total_allocated;
  uint64_t total_reserved;
  uint64_t device;  // raw::memory_device()
  uint8_t kind;     // kMemoryTotalsSlot
  uint8_t unused[7];
};
// Never a raw kind: marks the second slot of a memory report.
inline constexpr uint8_t kMemoryTotalsSlot = 0xff;
static_assert(sizeof(MemoryReport) == sizeof(Event) && offsetof(MemoryReport, kind) == offsetof(Event, kind));
static_assert(sizeof(MemoryTotals) == sizeof(Event) && offsetof(MemoryTotals, kind) == offsetof(Event, kind));

// A communication call (record_comm) fills two slots the same way: an Event
// with the call (t0, t1, name = the operation, kind kComm, reserved = the
// raw::kComm* flags, aux = the communicator's sequence number), then this.
struct CommDetail {
  uint64_t bytes;     // the bytes the call moves for this rank (docs/FORMAT.md, COMM)
  const char* group;  // interned group name, or nullptr (a wait)
  int32_t peer;       // world rank of the peer or root, -1: none
  int32_t tag;        // point-to-point tag, -1: any or none
  uint8_t kind;       // kCommDetailSlot
  uint8_t unused[7];
};
// Never a raw kind: marks the second slot of a communication call.
inline constexpr uint8_t kCommDetailSlot = 0xfe;
static_assert(sizeof(CommDetail) == sizeof(Event) && offsetof(CommDetail, kind) == offsetof(Event, kind));

// A memory tag (record_memory_tag) fills two slots the same way: an Event
// (t0, t1 = the address, name = the category, kind kMemoryTag), then this.
struct MemoryTagDetail {
  uint64_t bytes;
  uint64_t device;  // raw::memory_device()
  uint64_t unused;
  uint8_t kind;  // kMemoryTagSlot
  uint8_t unused_tail[7];
};
// Never a raw kind: marks the second slot of a memory tag.
inline constexpr uint8_t kMemoryTagSlot = 0xfd;
static_assert(sizeof(MemoryTagDetail) == sizeof(Event) &&
              offsetof(MemoryTagDetail, kind) == offsetof(Event, kind));

// A GPU activity (record_gpu; raw::is_gpu_event_kind) fills two slots too:
// an Event with the activity (t0, t1 in ticks, name, kind, domain = device
// + 1, aux = CUPTI correlation id), then this.
struct GpuDetail {
  uint64_t bytes;      // copies and sets
  const char* detail;  // interned (kernels: launch geometry, raw/format.h), or nullptr
  uint32_t context;
  uint32_t stream;
  uint8_t kind;     // kGpuDetailSlot
  uint8_t subkind;  // raw/format.h, per activity kind
  uint16_t unused;
  uint32_t thread;  // kGpuApi: OS id of the calling thread
};
// Never a raw kind: marks the second slot of a GPU activity.
inline constexpr uint8_t kGpuDetailSlot = 0xfd;
static_assert(sizeof(GpuDetail) == sizeof(Event) && offsetof(GpuDetail, kind) == offsetof(Event, kind));

// A kernel, copy or set that a CUDA graph launched fills a third slot, after
// its GpuDetail, committed with the other two.
struct GpuGraphDetail {
  uint64_t node;  // CUPTI's graph node id
  uint64_t unused;
  uint32_t graph;  // CUPTI's graph id
  uint32_t unused_too;
  uint8_t kind;  // kGpuGraphSlot
  uint8_t unused_tail[7];
};
// Never a raw kind: marks the third slot of a GPU activity launched by a graph.
inline constexpr uint8_t kGpuGraphSlot = 0xfc;
static_assert(sizeof(GpuGraphDetail) == sizeof(Event) &&
              offsetof(GpuGraphDetail, kind) == offsetof(Event, kind));

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

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_EVENT_H_
