// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace trainprof::core {

bool BlockPool::set_budget(size_t blocks, size_t cap_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  budget_ = blocks;
  cap_ = std::max<size_t>(cap_blocks, 1);
  peak_in_use_ = in_use_;
  grow_failed_ = false;
  bool ok = !free_.empty() || allocated_ >= limit_locked() || grow_locked();
  update_available_locked();
  return ok;
}

size_t BlockPool::budget() const {
  std::lock_guard<std::mutex> lock(mu_);
  return budget_;
}

size_t BlockPool::peak_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_in_use_;
}

size_t BlockPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

void BlockPool::set_thread_count(size_t threads) {
  std::lock_guard<std::mutex> lock(mu_);
  threads_ = threads;
  update_available_locked();
}

size_t BlockPool::limit_locked() const {
  return std::min(std::max(budget_, 2 * threads_), cap_);
}

// Pre-faulted (MAP_POPULATE), so that the recording threads never take a
// page fault in a block.
Block* BlockPool::map_blocks(size_t count) {
  void* mem = mmap(nullptr, count * kBlockBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return mem == MAP_FAILED ? nullptr : static_cast<Block*>(mem);
}

void BlockPool::add_blocks_locked(Block* first, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    Block* b = new (first + i) Block();
    b->committed.store(0, std::memory_order_relaxed);
    b->flushed = 0;
    free_.push_back(b);
  }
  chunks_.emplace_back(first, count);
  allocated_ += count;
}

// Takes the next chunk from the system (on a recording thread: the flusher's
// grow_ahead() did not keep up).
bool BlockPool::grow_locked() {
  size_t limit = limit_locked();
  if (allocated_ >= limit || grow_failed_) return false;
  size_t count = std::min(kBlocksPerChunk, limit - allocated_);
  Block* first = map_blocks(count);
  if (first == nullptr) {
    grow_failed_ = true;  // no mmap per dropped event
    return false;
  }
  add_blocks_locked(first, count);
  return true;
}

void BlockPool::grow_ahead() {
  size_t count;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t limit = limit_locked();
    if (free_.size() >= kBlocksPerChunk / 2 || allocated_ >= limit || grow_failed_) return;
    count = std::min(kBlocksPerChunk, limit - allocated_);
    allocated_ += count;  // claimed now: no one else maps the same room meanwhile
  }
  Block* first = map_blocks(count);  // outside the lock: recording threads go on
  std::lock_guard<std::mutex> lock(mu_);
  allocated_ -= count;
  if (first == nullptr) {
    grow_failed_ = true;
  } else {
    add_blocks_locked(first, count);
  }
  update_available_locked();
}

Block* BlockPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_use_ >= limit_locked()) return nullptr;
  if (free_.empty() && !grow_locked()) return nullptr;
  Block* b = free_.back();
  free_.pop_back();
  ++in_use_;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
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

void BlockPool::reset_in_child() {
  free_.clear();
  allocated_ = 0;  // a grow_ahead() cut short by the fork claimed room it never mapped here
  for (auto [first, count] : chunks_) {
    for (size_t i = 0; i < count; ++i) {
      first[i].committed.store(0, std::memory_order_relaxed);
      first[i].flushed = 0;
      free_.push_back(first + i);
    }
    allocated_ += count;
  }
  in_use_ = 0;
  threads_ = 0;
  update_available_locked();
}

void BlockPool::update_available_locked() {
  const size_t limit = limit_locked();
  available_.store(in_use_ < limit && (!free_.empty() || (allocated_ < limit && !grow_failed_)),
                   std::memory_order_relaxed);
  wake_batch_.store(std::clamp<size_t>(limit / 8, 1, kMaxWakeBatch), std::memory_order_relaxed);
}

}  // namespace trainprof::core
