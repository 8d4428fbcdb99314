// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The Python stack sampler: every few milliseconds, while a profile records
// host activity, a thread of its own reads every other Python thread's stack
// and records it as a stack sample (include/trainprof/stack_sample.h), so that
// the analysis can name the functions that spend host time outside operators
// and ranges.
#ifndef TRAINPROF_PYTHON_STACK_SAMPLER_H_
#define TRAINPROF_PYTHON_STACK_SAMPLER_H_

#include <nanobind/nanobind.h>

namespace trainprof::python {

// _trainprof.acquire_stack_sampler(interval_ms) -> str ("" or why not) and
// _trainprof.release_stack_sampler(): the sampler runs while a profile that
// asked for it records, at the shortest interval asked for.
void bind_stack_sampler(nanobind::module_& m);

}  // namespace trainprof::python

#endif  // TRAINPROF_PYTHON_STACK_SAMPLER_H_
