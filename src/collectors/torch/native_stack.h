// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Native call stacks for with_stack, as text the analysis symbolizes:
// "module+0xoffset;..." innermost first, offsets from each module's load
// address, so that the analysis reads the symbols from the module file wherever
// the process had mapped it. No LibTorch in here: it compiles as fast as the
// core.
#ifndef TRAINPROF_COLLECTORS_TORCH_NATIVE_STACK_H_
#define TRAINPROF_COLLECTORS_TORCH_NATIVE_STACK_H_

#include <string>

namespace trainprof::torch {

// The frames `frames[0..count)` (return addresses, as backtrace() gives
// them) as "module+0xoffset;...", with "?" for an address no module holds.
std::string format_native_frames(void* const* frames, int count);

}  // namespace trainprof::torch

#endif  // TRAINPROF_COLLECTORS_TORCH_NATIVE_STACK_H_
