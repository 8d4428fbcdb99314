// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The part of NCCL's profiler plugin interface (version 4) that trainprof
// implements, declared from its published layout: NCCL 2.26 introduced it and
// later releases still load it (they convert their newer events to it). No NCCL
// header is needed to build.
//
// NCCL looks up the symbol "ncclProfiler_v4" in the library named by
// NCCL_PROFILER_PLUGIN (a path, or libnccl-profiler-NAME.so) when a
// communicator is made, calls init() once per communicator, then
// startEvent/recordEventState/stopEvent from the calling thread and from its
// own progress threads.
#ifndef TRAINPROF_COLLECTORS_NCCL_NCCL_ABI_H_
#define TRAINPROF_COLLECTORS_NCCL_NCCL_ABI_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace trainprof::nccl {

using Result = int;  // ncclResult_t: 0 is ncclSuccess
inline constexpr Result kSuccess = 0;

// Event types (eActivationMask bits, descriptor `type`).
inline constexpr int kProfileGroup = 1 << 0;
inline constexpr int kProfileColl = 1 << 1;
inline constexpr int kProfileP2p = 1 << 2;
inline constexpr int kProfileProxyOp = 1 << 3;
inline constexpr int kProfileKernelCh = 1 << 6;

// Event states (recordEventState).
inline constexpr int kKernelChStop = 22;

struct EventDescrV4 {
  uint8_t type;
  void* parent;  // the parent event's handle, as startEvent returned it
  int rank;      // the rank in the communicator
  union {
    struct {
      uint64_t seq_number;  // per communicator, the same on every rank
      const char* func;     // "AllReduce", "Broadcast", ...
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;  // "ncclFloat32", ...
      uint8_t channels;
      uint8_t warps;
      const char* algo;   // "Ring", "Tree", ...
      const char* proto;  // "LL", "LL128", "Simple"
    } coll;
    struct {
      const char* func;  // "Send", "Recv"
      void* buff;
      const char* datatype;
      size_t count;
      int peer;  // the rank in the communicator
      uint8_t channels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channel;
      int peer;
      int steps;
      int chunk_size;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel;
      uint64_t ptimer;  // the GPU's globaltimer when the channel began, ns
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
  };
};

union EventStateArgsV4 {
  struct {
    size_t trans_size;
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t ptimer;  // kKernelChStop: the GPU's globaltimer when the channel ended, ns
  } kernel_ch;
};

using DebugLogger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                             ...);

struct ProfilerV4 {
  const char* name;
  Result (*init)(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash, int nodes,
                 int ranks, int rank, DebugLogger log);
  Result (*start_event)(void* context, void** handle, EventDescrV4* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, int state, EventStateArgsV4* args);
  Result (*finalize)(void* context);
};

}  // namespace trainprof::nccl

#endif  // TRAINPROF_COLLECTORS_NCCL_NCCL_ABI_H_
