// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Stack samples: where a thread was when a sampler looked, for the time no
// operator or range covers.
//
// A front end that can read its threads' stacks (the Python package reads
// every Python thread's frames every few milliseconds) records each look
// as a sample of the sampled thread: the stack it found and the span of
// time the sample stands for (from the sampler's previous look to this
// one). The analysis gives each sample the part of its span that the
// thread spent outside every recorded operator and range, and names the
// functions that spent the host time of a step (docs/OUTPUTS.md, "Python
// outside operators").
#ifndef TRAINPROF_STACK_SAMPLE_H_
#define TRAINPROF_STACK_SAMPLE_H_

#include <cstdint>

namespace trainprof::detail {

// Records a sample of thread `sampled_tid` (its OS id) whose stack was
// `stack` ("file(line): function" frames, innermost first, joined by ';';
// process-lifetime: a literal or detail::intern()), standing for
// [start_ticks, end_ticks), of which the thread spent `cpu_wait_ns`
// ready to run but waiting for a CPU (the scheduler's run-queue wait: on a
// machine busy with other work, time that is no function's; 0: unknown;
// kept to the microsecond, at most kMaxCpuWaitNs). Safe from any thread;
// a load and a branch while nothing records host activity.
void record_stack_sample(uint32_t sampled_tid, uint64_t start_ticks, uint64_t end_ticks, const char* stack,
                         uint64_t cpu_wait_ns = 0) noexcept;

inline constexpr uint64_t kMaxCpuWaitNs = ((uint64_t{1} << 24) - 1) * 1000;  // 24 bits of microseconds

}  // namespace trainprof::detail

#endif  // TRAINPROF_STACK_SAMPLE_H_
