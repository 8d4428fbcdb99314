// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// LEB128 varints and zigzag, for the raw format.
#ifndef TRAINPROF_RAW_VARINT_H_
#define TRAINPROF_RAW_VARINT_H_

#include <cstddef>
#include <cstdint>

namespace trainprof::raw {

inline constexpr size_t kMaxVarintBytes = 10;

// Writes `v` at `out` (room for kMaxVarintBytes); returns the end.
inline uint8_t* put_varint(uint8_t* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<uint8_t>(v);
  return out;
}

// Reads a varint from [p, end); returns nullptr when it is truncated or too long.
inline const uint8_t* get_varint(const uint8_t* p, const uint8_t* end, uint64_t* v) {
  // Most values are ids and short deltas: one or two bytes, without the loop.
  if (end - p >= 2) {
    if (p[0] < 0x80) {
      *v = p[0];
      return p + 1;
    }
    if (p[1] < 0x80) {
      *v = (p[0] & 0x7fu) | (uint64_t{p[1]} << 7);
      return p + 2;
    }
  }
  uint64_t result = 0;
  for (unsigned shift = 0; shift < 64 && p < end; shift += 7) {
    uint8_t byte = *p++;
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      return p;
    }
  }
  return nullptr;
}

inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_VARINT_H_
