// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/gpu_sync.h"

#include <dlfcn.h>

#include <atomic>

namespace trainprof::core {
namespace {

using CtxSynchronizeFn = int (*)();  // CUresult cuCtxSynchronize(void); CUDA_SUCCESS is 0

std::atomic<CtxSynchronizeFn> g_ctx_synchronize{nullptr};

}  // namespace

bool gpu_sync_available() noexcept {
  if (g_ctx_synchronize.load(std::memory_order_acquire) != nullptr) return true;
  // The driver comes with the first CUDA call of the process: looked up
  // again at each session start until it is there.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  auto fn = reinterpret_cast<CtxSynchronizeFn>(dlsym(driver, "cuCtxSynchronize"));
  g_ctx_synchronize.store(fn, std::memory_order_release);
  return fn != nullptr;
}

bool synchronize_gpu() noexcept {
  CtxSynchronizeFn fn = g_ctx_synchronize.load(std::memory_order_acquire);
  return fn != nullptr && fn() == 0;
}

}  // namespace trainprof::core
