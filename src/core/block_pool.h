// Copyright trainprof authors. The bounded pool of pre-faulted buffer blocks.
//
// The pool never returns memory to the system (blocks are reused by later
// sessions); `budget` bounds how many blocks may be in use at once, which is
// what ProfilerOptions::buffer_mb sets. Blocks are pre-faulted when the budget
// grows, so that the recording threads never take a page fault.
#ifndef TRAINPROF_CORE_BLOCK_POOL_H_
#define TRAINPROF_CORE_BLOCK_POOL_H_

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "core/event.h"

namespace trainprof::detail {

class BlockPool {
 public:
  // Sets how many blocks may be in use; allocates (pre-faulted) up to it.
  // Returns false when the memory could not be allocated (budget unchanged).
  bool set_budget(size_t blocks);
  size_t budget() const;

  // A reset block (committed = flushed = 0), or nullptr when the budget is used up.
  Block* acquire();
  void release(Block* block);

  // Lock-free hint for writers that are dropping: is acquire() worth trying?
  bool maybe_available() const { return available_.load(std::memory_order_relaxed); }

 private:
  void update_available_locked();

  mutable std::mutex mu_;
  std::vector<Block*> free_;
  size_t in_use_ = 0;
  size_t budget_ = 0;
  size_t allocated_ = 0;
  std::atomic<bool> available_{false};
};

}  // namespace trainprof::detail

#endif  // TRAINPROF_CORE_BLOCK_POOL_H_
