// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The memory reporter (memory_reporter.h).
#include "collectors/torch/memory_reporter.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "base/log.h"
#include "collectors/torch/memory_total.h"
#include "core/out_of_memory.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::torch {

std::atomic<bool> g_reporter_wanted{false};

namespace {

std::atomic<bool> g_memory_reports_on{false};  // profile_memory: allocations are reported

}  // namespace

namespace {

std::atomic<bool> g_memory_shadowed{false};  // LibTorch's profiler held a thread's PROFILER_STATE

// c10's CPU allocator tells the reporter of a failure itself when memory is
// profiled (with its totals): the size it told, + 1, so that the allocator
// watch (OutOfMemoryWatch) does not note the same failure again.
thread_local uint64_t t_cpu_failure_reported = 0;

// Takes the reporter out of the calling thread's debug info (after a
// session: from the allocator's calls, see MemoryReporter).
void remove_memory_reporter() noexcept;

// LibTorch's profiler code static_casts whatever PROFILER_STATE holds to
// ProfilerStateBase, so the reporter is one, in the Disabled state: there
// LibTorch's profilerEnabled() stays false and its profiler can still push
// its own state on top (it then gets that thread's reports until it pops).
class MemoryReporter final : public ::torch::profiler::impl::ProfilerStateBase {
 public:
  MemoryReporter()
      : ProfilerStateBase(
            ::torch::profiler::impl::ProfilerConfig(::torch::profiler::impl::ProfilerState::Disabled)) {}

  // Called by the allocator for every allocation (> 0) and free (< 0): no
  // lock, no allocation.
  void reportMemoryUsage(void* ptr, int64_t bytes, MemoryTotal total_allocated, MemoryTotal total_reserved,
                         c10::Device device) override {
    if (!detail::host_recording() || !g_memory_reports_on.load(std::memory_order_relaxed)) {
      if (!g_reporter_wanted.load(std::memory_order_relaxed)) remove_memory_reporter();
      return;
    }
    core::record_memory(detail::now_ticks(), reinterpret_cast<uintptr_t>(ptr), bytes,
                        static_cast<uint64_t>(total_allocated), static_cast<uint64_t>(total_reserved),
                        raw::memory_device(static_cast<int>(device.type()), device.index()));
  }

  // Also what makes c10's CPU allocator track sizes and report at all. c10
  // asks it on every CPU allocation and free of a thread that holds the
  // reporter: after the session, that thread's next allocation takes the
  // reporter out (c10 holds its own reference meanwhile), so no callback
  // has to stay on for it.
  // Without profile_memory, while the session records, it stays (as the
  // sign that a profiler is on) and the allocator makes no report.
  bool memoryProfilingEnabled() const override {
    if (g_memory_reports_on.load(std::memory_order_relaxed)) return true;
    if (!g_reporter_wanted.load(std::memory_order_relaxed)) remove_memory_reporter();
    return false;
  }

  // CUDA's caching allocator, before it raises OutOfMemoryError.
  void reportOutOfMemory(int64_t alloc_size, MemoryTotal total_allocated, MemoryTotal total_reserved,
                         c10::Device device) override {
    if (device.is_cpu()) t_cpu_failure_reported = static_cast<uint64_t>(alloc_size) + 1;
    core::note_out_of_memory(static_cast<uint64_t>(alloc_size), static_cast<uint64_t>(total_allocated),
                             static_cast<uint64_t>(total_reserved),
                             raw::memory_device(static_cast<int>(device.type()), device.index()),
                             innermost_operator());
  }

  ::torch::profiler::impl::ActiveProfilerType profilerType() override {
    return ::torch::profiler::impl::ActiveProfilerType::NONE;
  }
};

// One reporter for the process.
const std::shared_ptr<MemoryReporter>& memory_reporter() {
  static auto* reporter = new std::shared_ptr<MemoryReporter>(std::make_shared<MemoryReporter>());
  return *reporter;
}

// Set by the collector's exit handler. It runs before LibTorch's static
// destructors (a library is finalized before the libraries it uses) but
// after every thread-local destructor of the exiting thread: from then on
// nothing here calls into LibTorch.
std::atomic<bool> g_exiting{false};
// Set when this thread's ReporterInstalled is destroyed: c10's thread-locals
// may be gone next, so this thread no longer touches its debug info.
[[gnu::tls_model("initial-exec")]] thread_local bool t_thread_exiting = false;

// Pops the reporter when it is the newest PROFILER_STATE entry of this
// thread's debug info (a guard may have pushed another on top: then later).
bool pop_memory_reporter() noexcept {
  try {
    if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE) != memory_reporter())
      return false;
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    return true;
  } catch (...) {
    return false;  // another kind on top
  }
}

struct ReporterInstalled {
  bool installed = false;
  ~ReporterInstalled() {
    t_thread_exiting = true;
    if (!installed) return;
    // c10's debug info of this thread was created before this object
    // (install_memory_reporter reads it first), so it is destroyed after
    // it: the reporter can still be taken out here, and must be, or exit
    // would find it in torn-down thread-local storage.
    pop_memory_reporter();
    installed = false;
  }
};
thread_local ReporterInstalled t_reporter;

// Whether this thread's installed flag is right is not asked: a guard
// (autograd's engine, at::launch) that set a copy of the debug info saved
// during the session puts the reporter back on its thread when it ends,
// after the thread had taken it out inside. A stop from another thread
// landing in the main thread's backward() did exactly that: the reporter
// stayed on the main thread for good and torch's profiler refused to start
// there. So the entry itself is looked at: whenever the reporter is this
// thread's newest PROFILER_STATE entry, it comes out.
void remove_memory_reporter() noexcept {
  if (t_thread_exiting) return;
  if (pop_memory_reporter()) {
    t_reporter.installed = false;
    return;
  }
  // Deeper in the chain, under another kind: out once that one is popped;
  // until then the thread's exit takes it out.
  try {
    if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == memory_reporter().get())
      t_reporter.installed = true;
  } catch (...) {
  }
}

// See trainprof_torch_yield_profiler_state.
int yield_profiler_state() noexcept {
  if (t_thread_exiting) return 0;
  if (!pop_memory_reporter()) return 0;
  t_reporter.installed = false;
  // Until LibTorch's profiler stops, its state sits where the reporter was:
  // install_memory_reporter() sees it and this thread's reports go to it
  // (said once at stop); after it, the next outermost operator puts the
  // reporter back.
  if (g_memory_reports_on.load(std::memory_order_relaxed))
    g_memory_shadowed.store(true, std::memory_order_relaxed);
  return 1;
}

}  // namespace

// Guards (autograd engine, at::launch) copy the debug info into the threads
// they run tasks on, so most threads inherit it.
//
// A thread must not keep it after the session: LibTorch's own profiler
// refuses to start on a thread whose PROFILER_STATE is taken. So each thread
// that installed it removes it at stop (the stopping thread), at its next
// allocation or free after the session (the others: the allocator asks the
// reporter, see MemoryReporter) or when it exits.
[[gnu::noinline]] void install_memory_reporter() {
  if (t_thread_exiting || g_exiting.load(std::memory_order_relaxed)) return;
  c10::DebugInfoBase* current = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  if (current == memory_reporter().get()) return;
  if (current != nullptr) {
    if (g_memory_reports_on.load(std::memory_order_relaxed))
      g_memory_shadowed.store(true, std::memory_order_relaxed);
    return;
  }
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, memory_reporter());
  t_reporter.installed = true;
}

// c10's CPU allocator raises c10::Error when it cannot allocate and tells
// no profiler: this one stands in front of it, for the process' lifetime,
// and notes the failure before the error goes on. allocate() is const in
// LibTorch 1.x and not in 2.x, where copy_data is also to be defined: both
// forms are here, and each LibTorch overrides the ones it declares.
class OutOfMemoryWatch final : public c10::Allocator {
 public:
  explicit OutOfMemoryWatch(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) const { return watched(n); }
  c10::DataPtr allocate(size_t n) { return watched(n); }
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  c10::DataPtr watched(size_t n) const {
    try {
      return inner_->allocate(n);
    } catch (const c10::Error&) {
      bool reported = t_cpu_failure_reported == n + 1;
      t_cpu_failure_reported = 0;
      if (reported) throw;
      core::note_out_of_memory(n, 0, 0, raw::memory_device(static_cast<int>(c10::DeviceType::CPU), -1),
                               innermost_operator());
      throw;
    }
  }
  c10::Allocator* inner_;
};

// Once per process, in front of whatever CPU allocator is set then.
void watch_cpu_allocator() noexcept {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  try {
    c10::Allocator* current = c10::GetCPUAllocator();
    if (current == nullptr || dynamic_cast<OutOfMemoryWatch*>(current) != nullptr) return;
    static auto* watch = new OutOfMemoryWatch(current);  // process lifetime: storages keep pointers to it
    c10::SetCPUAllocator(watch, /*priority=*/0);
  } catch (const std::exception& e) {
    base::log_warning(std::string("LibTorch collector: CPU out-of-memory errors are not noted: ") + e.what());
  }
}

void start_memory_reports(bool memory) noexcept {
  watch_cpu_allocator();
  g_memory_shadowed.store(false, std::memory_order_relaxed);
  g_memory_reports_on.store(memory, std::memory_order_relaxed);
  g_reporter_wanted.store(true, std::memory_order_relaxed);
  try {
    install_memory_reporter();  // this thread; others as they run operators
  } catch (const std::exception& e) {
    base::log_error(std::string("LibTorch collector: cannot install the memory reporter: ") + e.what());
  }
}

void stop_memory_reports() noexcept {
  if (!g_reporter_wanted.exchange(false, std::memory_order_relaxed)) return;
  bool memory = g_memory_reports_on.exchange(false, std::memory_order_relaxed);
  remove_memory_reporter();  // this thread's; the others' at their next allocation
  if (memory && g_memory_shadowed.load(std::memory_order_relaxed)) {
    base::log_warning(
        "LibTorch collector: LibTorch's own profiler was recording on some threads; their memory reports "
        "went to it, not to trainprof");
  }
}

void stop_memory_reports_at_exit() noexcept {
  g_memory_reports_on.store(false, std::memory_order_relaxed);
  g_reporter_wanted.store(false, std::memory_order_relaxed);
  g_exiting.store(true);
}

}  // namespace trainprof::torch

extern "C" int trainprof_torch_yield_profiler_state() noexcept {
  return trainprof::torch::yield_profiler_state();
}
