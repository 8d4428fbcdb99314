// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How much memory the event buffers may take.
//
// buffer_mb is what the user asks for; the buffers never take more than a
// share of what this process may still use, so that a large buffer_mb cannot
// get the training process OOM-killed. "May still use" is the smallest of
// MemAvailable (/proc/meminfo) and the room left under the memory limit of
// the process's cgroup (v2 memory.max - memory.current, or v1
// memory.limit_in_bytes - memory.usage_in_bytes).
#ifndef TRAINPROF_CORE_MEMORY_LIMIT_H_
#define TRAINPROF_CORE_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace trainprof::core {

struct MemoryRoom {
  uint64_t bytes = 0;             // the smallest of the sources below that are known
  uint64_t mem_available = 0;     // 0: unknown
  uint64_t cgroup_room = 0;       // 0: no limit found
  std::string cgroup_limit_file;  // where the cgroup limit came from (empty: none)
};

// Reads the sources now (a few small files; not for the hot path).
MemoryRoom memory_room();

// The event buffers may take at most this share of memory_room().bytes.
inline constexpr uint64_t kBufferShareDivisor = 4;

// The most bytes the event buffers may take now: room / kBufferShareDivisor,
// at least 1 MiB. TRAINPROF_TEST_MEMORY_ROOM_MB overrides the room (tests).
uint64_t buffer_cap_bytes(MemoryRoom* room_out = nullptr);

// What the process may use in all: its cgroup's memory limit (the nearest
// ancestor's that sets one), else the machine's memory (MemTotal). Not the
// room left, as above: the advisor compares a run's peak with it.
// TRAINPROF_TEST_MEMORY_LIMIT_MB stands for a cgroup limit (tests).
struct MemoryLimit {
  uint64_t bytes = 0;  // 0: unknown
  std::string source;  // "cgroup memory limit" or "machine's memory"
};
MemoryLimit memory_limit();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_MEMORY_LIMIT_H_
