// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// write(2) until done.
#ifndef TRAINPROF_BASE_WRITE_ALL_H_
#define TRAINPROF_BASE_WRITE_ALL_H_

#include <errno.h>
#include <unistd.h>

#include <cstddef>

namespace trainprof::base {

// Writes all `size` bytes (retrying partial writes and EINTR). Returns the
// bytes written; fewer than `size` means an error, left in errno.
inline size_t write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_WRITE_ALL_H_
