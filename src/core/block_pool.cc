// Copyright trainprof authors.
#include "core/block_pool.h"

#include <sys/mman.h>

#include <new>

namespace trainprof::detail {

bool BlockPool::set_budget(size_t blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (blocks > allocated_) {
    size_t missing = blocks - allocated_;
    // MAP_POPULATE pre-faults the pages so recording never takes a page fault.
    void* mem = mmap(nullptr, missing * kBlockBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (mem == MAP_FAILED) return false;
    auto* first = static_cast<Block*>(mem);
    for (size_t i = 0; i < missing; ++i) {
      Block* b = new (first + i) Block();
      b->committed.store(0, std::memory_order_relaxed);
      b->flushed = 0;
      free_.push_back(b);
    }
    allocated_ = blocks;
  }
  budget_ = blocks;
  update_available_locked();
  return true;
}

size_t BlockPool::budget() const {
  std::lock_guard<std::mutex> lock(mu_);
  return budget_;
}

Block* BlockPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_use_ >= budget_ || free_.empty()) return nullptr;
  Block* b = free_.back();
  free_.pop_back();
  ++in_use_;
  update_available_locked();
  return b;
}

void BlockPool::release(Block* block) {
  block->committed.store(0, std::memory_order_relaxed);
  block->flushed = 0;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(block);
  --in_use_;
  update_available_locked();
}

void BlockPool::update_available_locked() {
  available_.store(in_use_ < budget_ && !free_.empty(), std::memory_order_relaxed);
}

}  // namespace trainprof::detail
