// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The bounded pool of buffer blocks.
//
// The pool never returns memory to the system (blocks are reused by later
// sessions). Memory is taken as it is needed, a megabyte at a time and
// pre-faulted then, so that a recording thread takes no page fault when it
// writes into a block; a large buffer_mb costs nothing until events fill it.
//
// How many blocks may be in use at once is the larger of the budget
// (ProfilerOptions::buffer_mb) and two per recording thread (each live thread
// holds one block as its current one, so a budget below the thread count
// would starve every thread), but never more than the cap: a share of the
// memory the process may still use (memory_limit.h). Past that, events are
// dropped and counted.
#ifndef TRAINPROF_CORE_BLOCK_POOL_H_
#define TRAINPROF_CORE_BLOCK_POOL_H_

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "core/event.h"

namespace trainprof::core {

class BlockPool {
 public:
  // Sets the budget in blocks and the hard cap (blocks); takes the first
  // megabyte now. Returns false when even that could not be allocated.
  bool set_budget(size_t blocks, size_t cap_blocks);
  size_t budget() const;
  // The most blocks in use at once since the last set_budget().
  size_t peak_in_use() const;
  // Blocks in use now.
  size_t in_use() const;

  // Recording threads known to the recorder (raises the effective budget).
  void set_thread_count(size_t threads);

  // A reset block (committed = flushed = 0), or nullptr when the effective
  // budget is used up or the system has no memory left.
  Block* acquire();
  // The flusher's side: takes the next chunk from the system ahead of
  // demand when few free blocks are left, outside the lock, so that the
  // recording threads seldom pay for mmap and page faults themselves.
  void grow_ahead();
  void release(Block* block);

  // Lock-free hint for writers that are dropping: is acquire() worth trying?
  bool maybe_available() const { return available_.load(std::memory_order_relaxed); }

  // How many full blocks may wait before a writer wakes the flusher: an
  // eighth of the limit, 1 to kMaxWakeBatch. A wake is a system call that
  // cost a recording thread about 1.5 ns per event when made for every
  // block (perf, session 11); the flusher's periodic pass writes the rest.
  size_t wake_batch() const { return wake_batch_.load(std::memory_order_relaxed); }
  static constexpr size_t kMaxWakeBatch = 16;

  // fork() support: hold the lock across fork, and in the child, where no
  // other thread exists, consider every block free.
  void lock_for_fork() { mu_.lock(); }
  void unlock_after_fork() { mu_.unlock(); }
  void reset_in_child();

 private:
  size_t limit_locked() const;
  bool grow_locked();
  // Pre-faulted memory for `count` blocks, or nullptr.
  static Block* map_blocks(size_t count);
  void add_blocks_locked(Block* first, size_t count);
  void update_available_locked();

  mutable std::mutex mu_;
  std::vector<Block*> free_;
  std::vector<std::pair<Block*, size_t>> chunks_;  // every allocation: first block, count
  size_t in_use_ = 0;
  size_t peak_in_use_ = 0;
  size_t budget_ = 0;
  size_t cap_ = 0;
  size_t threads_ = 0;
  size_t allocated_ = 0;
  bool grow_failed_ = false;  // the system refused memory: no retry until set_budget()
  std::atomic<bool> available_{false};
  std::atomic<size_t> wake_batch_{1};
};

// Blocks taken from the system at a time (1 MiB).
inline constexpr size_t kBlocksPerChunk = (1u << 20) / kBlockBytes;

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_BLOCK_POOL_H_
