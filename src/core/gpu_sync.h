// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Waiting for the GPU (sync_enable).
//
// ProfilerOptions::sync_enable ends each outermost framework operator only
// when the GPU has finished what the calling thread's CUDA context queued,
// so that the operator's host time covers its device time (MindSpore's
// synchronous way). The wait is the CUDA driver's cuCtxSynchronize, taken
// from a libcuda.so.1 the process already has: trainprof never loads the
// driver into a process that does not use CUDA.
#ifndef TRAINPROF_CORE_GPU_SYNC_H_
#define TRAINPROF_CORE_GPU_SYNC_H_

namespace trainprof::core {

// Whether the driver is in the process; looks it up while it is not (a
// session start calls this: the driver arrives with the first CUDA call).
bool gpu_sync_available() noexcept;

// Waits for the calling thread's current CUDA context; false when no
// gpu_sync_available() found the driver, or the driver refused (no current
// context on this thread).
bool synchronize_gpu() noexcept;

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_GPU_SYNC_H_
