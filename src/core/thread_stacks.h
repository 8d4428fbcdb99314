// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Every thread's native stack, taken from another thread of the process: what a
// hang's dump shows of where each thread is stuck (a collective in a
// communication library, a lock, I/O).
//
// Each thread is sent a signal in turn; its handler writes the thread's
// backtrace (glibc's backtrace(), symbols from the dynamic symbol tables:
// exported functions of shared libraries by name, the rest as
// file(+offset)) into an in-memory file, and the caller waits up to 200 ms
// for each. The signal's handler is installed only for the time of the
// capture, and restored. A thread that blocks the signal, or is stuck in
// the kernel where no signal is delivered, is listed as not answering.
#ifndef TRAINPROF_CORE_THREAD_STACKS_H_
#define TRAINPROF_CORE_THREAD_STACKS_H_

#include <string>

namespace trainprof::core {

// backtrace() loads its unwinder on first use, which allocates: done here,
// once, before any capture (a signal handler must not allocate).
void prepare_thread_stacks();

// Every thread's stack but the caller's, as text ("thread TID (name):"
// then a frame per line, innermost first); "" when the capture could not
// be set up (said why).
std::string take_thread_stacks();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_THREAD_STACKS_H_
