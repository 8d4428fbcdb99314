// Copyright trainprof authors. CRC-32C (Castagnoli), SSE4.2 where available.
#ifndef TRAINPROF_RAW_CRC32C_H_
#define TRAINPROF_RAW_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace trainprof::raw {

// Extends `crc` (0 to start) over [data, data + size).
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_CRC32C_H_
