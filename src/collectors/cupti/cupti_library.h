// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// libcupti, loaded at run time.
//
// trainprof and the programs that use it run on machines without CUDA, so
// CUPTI is never linked: the first GPU session looks for libcupti with
// dlopen, once per process. Where: the libcupti the process already has
// (PyTorch's CUDA builds load their wheel's at import; two CUPTIs must not
// both drive the GPU), else $TRAINPROF_CUPTI_LIBRARY (a path; the Python
// package sets it to a pip-installed NVIDIA wheel's), then the loader's
// search path (libcupti.so, .so.13, .so.12), then $CUDA_HOME and
// /usr/local/cuda (extras/CUPTI/lib64, lib64, lib).
#ifndef TRAINPROF_COLLECTORS_CUPTI_CUPTI_LIBRARY_H_
#define TRAINPROF_COLLECTORS_CUPTI_CUPTI_LIBRARY_H_

#include <cupti_activity.h>
#include <cupti_callbacks.h>

#include <string>

#include "collectors/cupti/activity_records.h"

namespace trainprof::cupti {

struct CuptiLibrary {
  std::string path;  // where it was loaded from
  CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t flag) = nullptr;
  NextRecordFn get_next_record = nullptr;
  CUptiResult (*get_num_dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;
  CallbackNameFn get_callback_name = nullptr;  // optional
  // Callbacks, for the CUDA graph nodes' makers (optional: without them,
  // graph nodes are not named by the operator that captured them).
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  GraphNodeIdFn get_graph_node_id = nullptr;

  // "CUPTI_ERROR_..." for `result`, or its number. Read from our own table,
  // not cuptiGetResultString: after a failed start, CUPTI 13.2's recurses
  // until the stack overflows (seen with torch's wheel on a machine without
  // a GPU), and the training must never pay for a message.
  static std::string error_text(CUptiResult result);
};

// The process's libcupti, or nullptr with the reason (every place looked).
const CuptiLibrary* load_cupti(std::string* why);

// Whether the CUDA driver (libcuda.so.1) can be loaded; when not, the reason.
// Checked before any call into CUPTI: without a driver CUPTI 13.2's first
// call (cuptiGetTimestamp) recurses until the stack overflows, where 13.0's
// returned an error. Loads the driver library, initializes nothing.
bool cuda_driver_present(std::string* why);

}  // namespace trainprof::cupti

#endif  // TRAINPROF_COLLECTORS_CUPTI_CUPTI_LIBRARY_H_
