// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The recording side: per-thread buffers.
//
// Each recording thread owns one current Block (a thread_local pointer). The
// fast path writes a 32-byte Event and bumps the block's `committed` index. A
// full block is queued for the flusher and replaced from the BlockPool; when
// the pool is exhausted the event is dropped and counted. The flusher also
// reads the committed prefix of live blocks, so data reaches the disk at least
// every flush interval even from threads that record slowly.
#ifndef TRAINPROF_CORE_RECORDER_H_
#define TRAINPROF_CORE_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/event.h"

namespace trainprof::core {

// Per-thread state that outlives the thread until the flusher has written it.
struct ThreadBuffer {
  uint32_t tid = 0;
  // The low 32 bits of the thread's pthread_t: how CUPTI names the thread
  // that made a CUDA call (CUpti_ActivityAPI::threadId).
  uint32_t pthread_low = 0;
  std::atomic<Block*> current{nullptr};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> exited{false};
  bool dropping = false;  // the owning thread's: since its last failed block request

  std::mutex name_mu;
  std::string name;
  std::atomic<uint32_t> name_version{0};
};

class Recorder {
 public:
  static Recorder& instance();

  BlockPool& pool() { return pool_; }

  // Appends one event to the calling thread's buffer (never blocks).
  void append(const Event& event) noexcept;
  // Appends two events to the same block, committed together.
  void append_pair(const Event& first, const Event& second) noexcept;
  // Appends three events to the same block, committed together.
  void append_triple(const Event& first, const Event& second, const Event& third) noexcept;

  // Flusher side.
  std::vector<Block*> take_full_blocks();
  std::vector<ThreadBuffer*> threads_snapshot();
  // Forgets threads that exited and whose blocks have all been written.
  void reap_exited(const std::vector<ThreadBuffer*>& exited);
  uint64_t total_dropped();
  // Drops since the last reset_drop_counts(), per OS thread id (non-zero only).
  std::vector<std::pair<uint32_t, uint64_t>> dropped_by_thread();
  // At a session's start: drops are counted per session.
  void reset_drop_counts();
  // Threads that recorded since the last reset_drop_counts() (live or exited).
  size_t threads_seen();

  // Why events were dropped, sampled when a thread starts dropping: how
  // many buffer blocks were in use then, and how many of those were full
  // and waiting for the writer (the rest are threads' current blocks).
  struct DropOnsets {
    uint64_t onsets = 0;
    uint64_t blocks_in_use = 0;   // summed over onsets
    uint64_t blocks_waiting = 0;  // summed over onsets
  };
  DropOnsets drop_onsets();

  // fork(): the parent's locks are held across the call (lock_for_fork in
  // the parent before, unlock_after_fork in both after); in the child,
  // where only the forking thread exists, reset_in_child() forgets every
  // thread's buffer and frees every block (their data is the parent's).
  void lock_for_fork();
  void unlock_after_fork();
  void reset_in_child();

  // The OS id of the thread CUPTI calls `cupti_thread_id` (the low 32 bits
  // of its pthread_t, or its OS id), among the threads that recorded; 0
  // when none is known.
  uint32_t os_tid_of_cupti_thread(uint32_t cupti_thread_id);

  // Thread naming (also works before the thread records).
  void set_current_thread_name(std::string_view name);

  // Called on the slow path and at thread exit.
  void submit_full(Block* block);
  ThreadBuffer* register_current_thread();

 private:
  Recorder() = default;
  // Hands the thread's block to the flusher and takes a fresh one; false
  // (the event counted as dropped) when the pool is exhausted.
  bool replace_block() noexcept;

  BlockPool pool_;
  std::mutex full_mu_;
  std::vector<Block*> full_;
  std::mutex threads_mu_;
  std::vector<ThreadBuffer*> threads_;
  std::vector<ThreadBuffer*> threads_of_parent_;  // a fork() child's copies of its parent's threads
  std::vector<std::pair<uint32_t, uint64_t>> dropped_by_exited_;  // tid, count
  size_t threads_seen_ = 0;
  void note_drop_onset() noexcept;
  std::atomic<uint64_t> onsets_{0};
  std::atomic<uint64_t> onset_in_use_{0};
  std::atomic<uint64_t> onset_waiting_{0};
};

// Appends an event to the calling thread's buffer: the entry point of
// collectors in other libraries (the caller checks host_recording()).
// record_event(e) is record_event_fields with e's fields.
void record_event(const Event& event) noexcept;
// The same as record_event(Event{t0, t1, name, kind, reserved, domain, aux})
// with every field in a register: what collectors on a hot path call. An Event built by the caller is handed
// over on its stack, where its 8-byte stores are read back as 16-byte loads
// by the copy into the block: a store-forwarding stall per load, which cost
// a LibTorch memory report 2.5 times its timestamp (perf, session 7).
void record_event_fields(uint64_t t0, uint64_t t1, const char* name, uint8_t kind, uint8_t reserved,
                         uint16_t domain, uint32_t aux) noexcept;
// A memory report (MemoryReport and MemoryTotals, event.h): two slots
// committed together, so that the flusher never sees one without the other;
// from registers as above.
void record_memory(uint64_t ticks, uint64_t address, int64_t bytes, uint64_t total_allocated,
                   uint64_t total_reserved, uint64_t device) noexcept;

// What the allocation at `address` holds (Event + MemoryTagDetail, event.h):
// two slots committed together, as record_memory. `category` is a literal.
void record_memory_tag(uint64_t ticks, uint64_t address, uint64_t bytes, uint64_t device,
                       const char* category) noexcept;

// A communication call (Event + CommDetail, event.h): two slots committed
// together, as record_memory.
void record_comm(uint64_t t0, uint64_t t1, const char* name, uint8_t flags, uint32_t sequence, uint64_t bytes,
                 const char* group, int32_t peer, int32_t tag) noexcept;

// A GPU activity (Event + GpuDetail, event.h): two slots committed together,
// as record_memory. Called from CUPTI's buffer-completed callback, a batch
// at a time: not a hot path.
void record_gpu(const Event& activity, const GpuDetail& detail) noexcept;
// The same for an activity a CUDA graph launched: three slots.
void record_gpu(const Event& activity, const GpuDetail& detail, const GpuGraphDetail& graph) noexcept;

// A CUDA graph node (raw GPU_GRAPH_NODE): made at `ticks` while `operator_name`
// (interned; nullptr: none) was open where it was made.
void record_gpu_graph_node(uint64_t ticks, uint64_t node, uint32_t graph, const char* operator_name) noexcept;

// Implemented by the flusher: wakes it up (async-signal-safe).
void wake_flusher() noexcept;

// Current OS thread id.
uint32_t current_tid() noexcept;

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_RECORDER_H_
