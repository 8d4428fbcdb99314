// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli), SSE4.2 where available.
#ifndef TRAINPROF_RAW_CRC32C_H_
#define TRAINPROF_RAW_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "raw/format.h"

namespace trainprof::raw {

// Extends `crc` (0 to start) over [data, data + size).
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

// The checksum a chunk carries: its header up to the crc field, then its
// `h.payload_size` bytes of payload (docs/FORMAT.md, "Chunks").
inline uint32_t chunk_crc(const ChunkHeader& h, const void* payload) {
  return crc32c(crc32c(0, &h, offsetof(ChunkHeader, crc)), payload, h.payload_size);
}

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_CRC32C_H_
