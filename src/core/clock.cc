// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/clock.h"

#include <cpuid.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "trainprof/range.h"

namespace trainprof::core {

// TRAINPROF_TEST_CLOCK_SHIFT_NS (tests only): this process' wall clock as if
// it were off by that many ns, as a machine's clock can be; the cross-rank
// clock alignment must find and remove it.
int64_t test_clock_shift_ns() {
  static const int64_t shift = [] {
    const char* text = std::getenv("TRAINPROF_TEST_CLOCK_SHIFT_NS");
    if (text == nullptr) return int64_t{0};
    char* end = nullptr;
    long long v = std::strtoll(text, &end, 10);
    return *end == '\0' && v > -3600000000000LL && v < 3600000000000LL ? static_cast<int64_t>(v) : int64_t{0};
  }();
  return shift;
}

}  // namespace trainprof::core

namespace trainprof::detail {

std::atomic<bool> g_clock_uses_tsc{false};

uint64_t monotonic_now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t realtime_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec) +
         static_cast<uint64_t>(core::test_clock_shift_ns());
}

}  // namespace trainprof::detail

namespace trainprof::core {

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool tsc_is_invariant() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

namespace {

std::once_flag g_clock_once;
ClockSource g_source = ClockSource::kMonotonic;
double g_ticks_per_ns = 1.0;

double measure_ticks_per_ns() {
  // Two anchors ~20 ms apart; the error of each read (~50 ns) is < 1e-5.
  ClockAnchor a = take_anchor();
  timespec pause{0, 20 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  ClockAnchor b = take_anchor();
  double dns = static_cast<double>(b.monotonic_ns - a.monotonic_ns);
  return dns > 0 ? static_cast<double>(b.ticks - a.ticks) / dns : 1.0;
}

void choose_clock() {
  const char* forced = std::getenv("TRAINPROF_CLOCK");
  bool want_tsc = tsc_is_invariant();
  if (forced != nullptr && std::strcmp(forced, "monotonic") == 0) want_tsc = false;
  if (forced != nullptr && std::strcmp(forced, "tsc") == 0 && !want_tsc && !tsc_is_invariant()) {
    base::log_warning("TRAINPROF_CLOCK=tsc ignored: this CPU does not report an invariant TSC");
  }
  g_source = want_tsc ? ClockSource::kTsc : ClockSource::kMonotonic;
  detail::g_clock_uses_tsc.store(want_tsc, std::memory_order_relaxed);
  g_ticks_per_ns = want_tsc ? measure_ticks_per_ns() : 1.0;
}

}  // namespace

ClockSource init_clock() {
  std::call_once(g_clock_once, choose_clock);
  return g_source;
}

ClockSource clock_source() {
  return init_clock();
}

double ticks_per_ns() {
  init_clock();
  return g_ticks_per_ns;
}

ClockAnchor take_anchor() {
  // The best of three reads: the pair with the smallest tick window brackets
  // the monotonic read most tightly.
  ClockAnchor best;
  uint64_t best_window = ~0ull;
  for (int i = 0; i < 3; ++i) {
    uint64_t t0 = detail::now_ticks();
    uint64_t mono = detail::monotonic_now_ns();
    uint64_t t1 = detail::now_ticks();
    if (t1 - t0 < best_window) {
      best_window = t1 - t0;
      best.ticks = t0 + (t1 - t0) / 2;
      best.monotonic_ns = mono;
    }
  }
  best.realtime_ns = detail::realtime_now_ns();
  // Realtime is read after; correct it by the time that passed since `mono`.
  uint64_t mono_now = detail::monotonic_now_ns();
  best.realtime_ns -= (mono_now - best.monotonic_ns);
  return best;
}

}  // namespace trainprof::core
