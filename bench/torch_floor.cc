// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// LibTorch's floor for an operator profiler, measured by
// bench/python_overhead.py in the same process as the profilers it is compared
// with. Built by that script against the Python environment's torch (not part
// of any product library); loaded through ctypes.
//
// trainprof_bench_floor(mode): 0 removes what an earlier call added; 1 adds a
// global RecordFunction callback that does nothing, with the scopes the
// collector uses; 2 the same asking for the inputs (the floor of
// record_shapes); 3 as 2 plus a memory reporter that drops every report, in
// the calling thread's debug info (the floor of record_shapes +
// profile_memory: c10's allocator then tracks and reports every block); 4 as
// 3 reading trainprof's clock at each operator's start and end and at each
// memory report (what any profiler that timestamps them pays on top of 3);
// 5 as 1, then switched off with at::disableCallback (what a profiler that
// records operators in some steps only pays in the others).
// Returns 1 on success, 0 otherwise.
#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <cstdint>
#include <memory>

#include "collectors/torch/memory_total.h"
#include "trainprof/range.h"

namespace {

at::CallbackHandle g_callback = at::INVALID_CALLBACK_HANDLE;

std::unique_ptr<at::ObserverContext> noop_start(const at::RecordFunction&) {
  return nullptr;
}
void noop_end(const at::RecordFunction&, at::ObserverContext*) {}

// Mode 4's sink: the clock reads must happen, and their values go nowhere.
[[gnu::tls_model("initial-exec")]] thread_local uint64_t t_ticks = 0;
std::unique_ptr<at::ObserverContext> clock_start(const at::RecordFunction&) {
  t_ticks += trainprof::detail::now_ticks();
  return nullptr;
}
void clock_end(const at::RecordFunction&, at::ObserverContext*) {
  t_ticks += trainprof::detail::now_ticks();
}

// A profiler state in the Disabled state, as trainprof's memory reporter.
class DroppingMemoryReporter final : public torch::profiler::impl::ProfilerStateBase {
 public:
  explicit DroppingMemoryReporter(bool read_clock)
      : ProfilerStateBase(
            torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)),
        read_clock_(read_clock) {}
  void reportMemoryUsage(void*, int64_t, trainprof::torch::MemoryTotal, trainprof::torch::MemoryTotal,
                         c10::Device) override {
    if (read_clock_) t_ticks += trainprof::detail::now_ticks();
  }
  bool memoryProfilingEnabled() const override { return true; }
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }

 private:
  bool read_clock_;
};

// The reporter mode 3 or 4 pushed, popped by the next call (from the same thread).
std::shared_ptr<DroppingMemoryReporter> g_reporter;

void pop_reporter() {
  if (g_reporter == nullptr) return;
  if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() == g_reporter.get())
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  g_reporter.reset();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int trainprof_bench_floor(int mode) noexcept {
  try {
    if (g_callback != at::INVALID_CALLBACK_HANDLE) {
      at::removeCallback(g_callback);
      g_callback = at::INVALID_CALLBACK_HANDLE;
    }
    pop_reporter();
    if (mode == 0) return 1;
    if (mode >= 3) {
      g_reporter = std::make_shared<DroppingMemoryReporter>(mode == 4);
      c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_reporter);
    }
    at::RecordFunctionCallback cb(mode == 4 ? &clock_start : &noop_start, mode == 4 ? &clock_end : &noop_end);
    cb.needsInputs(mode >= 2);
    cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
    g_callback = at::addGlobalCallback(cb);
    if (mode == 5) at::disableCallback(g_callback);
    return 1;
  } catch (...) {
    return 0;
  }
}
