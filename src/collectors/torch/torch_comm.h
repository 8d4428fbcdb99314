// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// torch.distributed communication, from the operators the LibTorch collector
// already sees.
//
// A collective or point-to-point call of torch.distributed (c10d) reaches the
// dispatcher as an operator named "c10d::<op>" on the calling thread, with
// its tensors and process group as inputs; the Gloo backend then runs it on
// one of the group's worker threads inside a RecordFunction named
// "gloo:<op>" that carries the tensors again. The calling thread's operator
// only queues the work: the communication is the worker's.
//
// The collector hands both to this module (only while a session boxes the
// operators' inputs: Level1, record_shapes or profile_communication; at
// Level0 LibTorch gives no inputs, so c10d calls stay plain operators). The
// call is noted as pending, keyed by its tensors' addresses; the worker's
// "gloo:" record that carries one of them claims it, and its end writes one
// COMM event (docs/FORMAT.md) from the call's start to the work's end: the
// operation, the bytes for this rank, the group, its sequence number, the
// peer or root as a world rank. A call on another backend (no "gloo:" record
// follows) is written at its own end, from the calling thread.
//
// A group's name is its torch name (the same on every rank, "0" for the
// default group); its members' world ranks come from the front end
// (trainprof_torch_comm_group, called by the Python package), or are 0..N-1
// for a group as large as the world. Collectives are numbered per group in
// the order this process calls them, from its first profiled one: every
// member calls a group's collectives in the same order, so ranks whose
// profiling starts at the same step number them alike.
#ifndef TRAINPROF_COLLECTORS_TORCH_TORCH_COMM_H_
#define TRAINPROF_COLLECTORS_TORCH_TORCH_COMM_H_

#include <ATen/record_function.h>

#include <cstdint>

namespace trainprof::torch {

// What an operator name is to this module, decided once per name.
enum class CommRole : uint8_t {
  kNone = 0,
  kCall = 1,  // "c10d::..." on the calling thread
  kWork = 2,  // "gloo:..." on a worker thread
};
CommRole comm_role(const char* name);

// False when this build's LibTorch has no dispatcher-level c10d operators
// (LibTorch 1.x): communication is not recorded.
bool comm_supported();

// A session begins (groups are recorded again in its run) or ends (pending
// calls are dropped; returns how many calls found no worker record).
void comm_session_started() noexcept;
uint64_t comm_session_stopped() noexcept;

// The collector's callbacks, for an operator of role kCall or kWork; `name`
// is the interned name. comm_ended returns true when it wrote the operator
// as a COMM event (a claimed worker record: not an operator too).
void comm_started(CommRole role, const char* name, const at::RecordFunction& fn, uint64_t ticks) noexcept;
bool comm_ended(CommRole role, const at::RecordFunction& fn, uint64_t ticks) noexcept;

}  // namespace trainprof::torch

// The world ranks of a torch.distributed group's members, in group rank
// order (from the Python package, which sees torch's group registry).
// Returns 0, or -1 for bad arguments.
extern "C" __attribute__((visibility("default"))) int trainprof_torch_comm_group(const char* name,
                                                                                 const int32_t* world_ranks,
                                                                                 int64_t count);

#endif  // TRAINPROF_COLLECTORS_TORCH_TORCH_COMM_H_
