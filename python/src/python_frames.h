// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// What the extension's two walks of Python frames share: the operator stacks of
// with_stack (trainprof_ext.cc) and the stack sampler (stack_sampler.cc). Both
// need the interpreter's headers.
#ifndef TRAINPROF_PYTHON_PYTHON_FRAMES_H_
#define TRAINPROF_PYTHON_PYTHON_FRAMES_H_

#include <Python.h>

#include <cstdint>

namespace trainprof::python {

// One step of a stack's hash over its frames (code objects and positions).
inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// The interpreter is being torn down: no thread state may be taken.
inline bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

}  // namespace trainprof::python

#endif  // TRAINPROF_PYTHON_PYTHON_FRAMES_H_
