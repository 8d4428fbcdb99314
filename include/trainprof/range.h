// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Host instrumentation: ranges, marks, counters.
//
//   void train_step() {
//     TRAINPROF_RANGE("train_step");          // static name: the cheapest range
//     trainprof::Range r(layer_name);         // runtime name: interned once per call
//     trainprof::counter("queue_depth", q.size());
//   }
//
// Everything here is safe to call from any thread at any time. While no
// profiler records, each call costs a load and a branch; while one records, a
// range costs two timestamp reads and one 32-byte store into the calling
// thread's buffer (no lock, no allocation, no system call).
#ifndef TRAINPROF_RANGE_H_
#define TRAINPROF_RANGE_H_

#include <atomic>
#include <cstdint>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace trainprof {

namespace detail {
// True while a profiler records host activity. Defined in the library.
extern std::atomic<bool> g_host_recording;
// True when timestamps are TSC ticks, false when they are CLOCK_MONOTONIC ns.
extern std::atomic<bool> g_clock_uses_tsc;

uint64_t monotonic_now_ns() noexcept;

inline uint64_t now_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (g_clock_uses_tsc.load(std::memory_order_relaxed)) return __rdtsc();
#endif
  return monotonic_now_ns();
}

inline bool host_recording() noexcept {
  return g_host_recording.load(std::memory_order_relaxed);
}

// Records a complete range [start_ticks, now). `name` must outlive the process
// (a string literal or a pointer returned by intern()). Names are C strings:
// one with an embedded NUL is cut there.
void record_range(const char* name, uint64_t start_ticks) noexcept;

// Returns a pointer to a process-lifetime copy of `name`; equal strings give
// equal pointers.
const char* intern(std::string_view name);
}  // namespace detail

// A scoped range with a name that lives forever (use TRAINPROF_RANGE).
class ScopedRange {
 public:
  explicit ScopedRange(const char* static_name) noexcept
      : name_(static_name), start_(detail::host_recording() ? detail::now_ticks() : 0) {}
  ~ScopedRange() {
    if (start_ != 0) detail::record_range(name_, start_);
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
  uint64_t start_;
};

// A scoped range with a name computed at run time.
class Range {
 public:
  explicit Range(std::string_view name)
      : name_(detail::host_recording() ? detail::intern(name) : nullptr),
        start_(name_ != nullptr ? detail::now_ticks() : 0) {}
  ~Range() {
    if (start_ != 0) detail::record_range(name_, start_);
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  uint64_t start_;
};

// An instant marker in `domain`.
void mark(std::string_view message, std::string_view domain = "default");

// Starts a range that may end on another thread; returns its id (0 when not
// recorded: profiler off or domain filtered out). range_end(0) does nothing.
uint64_t range_start(std::string_view message, std::string_view domain = "default");
void range_end(uint64_t id);

// A sample of a named counter (shown as a counter track).
void counter(std::string_view name, double value);

// Names the calling thread in the timeline. Cheap; may be called before any
// profiler exists and is remembered.
void set_thread_name(std::string_view name);

}  // namespace trainprof

#define TRAINPROF_CONCAT_INNER_(a, b) a##b
#define TRAINPROF_CONCAT_(a, b) TRAINPROF_CONCAT_INNER_(a, b)
// A scoped range named by a string literal ("" forces a literal at compile time).
#define TRAINPROF_RANGE(literal_name) \
  ::trainprof::ScopedRange TRAINPROF_CONCAT_(trainprof_range_, __LINE__)("" literal_name)

#endif  // TRAINPROF_RANGE_H_
