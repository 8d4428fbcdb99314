// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/recorder.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "core/intern.h"
#include "core/step_health.h"
#include "trainprof/range.h"
#include "trainprof/stack_sample.h"

namespace trainprof::core {}  // namespace trainprof::core

namespace trainprof::detail {

std::atomic<bool> g_host_recording{false};

}  // namespace trainprof::detail

namespace trainprof::core {

namespace {

// initial-exec: a direct %fs-relative access, no __tls_get_addr call, even in
// this shared library (it is loaded at start-up or preloaded).
[[gnu::tls_model("initial-exec")]] thread_local Block* tls_block = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local ThreadBuffer* tls_thread = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local bool tls_exiting = false;

// Hands the thread's last block to the flusher when the thread exits.
struct ThreadExitHook {
  ~ThreadExitHook() {
    tls_exiting = true;
    ThreadBuffer* tb = tls_thread;
    if (tb == nullptr) return;
    Block* b = tls_block;
    tls_block = nullptr;
    tb->current.store(nullptr, std::memory_order_release);
    if (b != nullptr) Recorder::instance().submit_full(b);
    tb->exited.store(true, std::memory_order_release);
    tls_thread = nullptr;
  }
};

inline bool try_fast_append(const Event& e) noexcept {
  Block* b = tls_block;
  if (b == nullptr) return false;
  uint32_t i = b->committed.load(std::memory_order_relaxed);
  if (i >= kEventsPerBlock) return false;
  b->events[i] = e;
  b->committed.store(i + 1, std::memory_order_release);
  return true;
}

// Slots committed together: a block without room for all of them is handed
// over as full, so that they never split.
template <size_t N>
inline bool try_fast_append_together(const std::array<Event, N>& events) noexcept {
  Block* b = tls_block;
  if (b == nullptr) return false;
  uint32_t i = b->committed.load(std::memory_order_relaxed);
  if (i + N > kEventsPerBlock) return false;
  for (size_t k = 0; k < N; ++k) b->events[i + k] = events[k];
  b->committed.store(i + static_cast<uint32_t>(N), std::memory_order_release);
  return true;
}

}  // namespace

uint32_t current_tid() noexcept {
  return static_cast<uint32_t>(syscall(SYS_gettid));
}

Recorder& Recorder::instance() {
  static Recorder* r = new Recorder();  // never destroyed: threads may record during exit
  return *r;
}

ThreadBuffer* Recorder::register_current_thread() {
  if (tls_thread != nullptr) return tls_thread;
  if (tls_exiting) return nullptr;
  auto* tb = new ThreadBuffer();
  tb->tid = current_tid();
  pthread_t self = pthread_self();
  std::memcpy(&tb->pthread_low, &self, sizeof(tb->pthread_low));  // its first 4 bytes, as CUPTI takes them
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    threads_.push_back(tb);
    ++threads_seen_;
    pool_.set_thread_count(threads_.size());
  }
  tls_thread = tb;
  static thread_local ThreadExitHook hook;
  (void)hook;
  return tb;
}

void Recorder::append(const Event& e) noexcept {
  if (try_fast_append(e)) return;
  if (replace_block()) try_fast_append(e);
}

void Recorder::append_pair(const Event& first, const Event& second) noexcept {
  const std::array<Event, 2> events{first, second};
  if (try_fast_append_together(events)) return;
  if (replace_block()) try_fast_append_together(events);
}

void Recorder::append_triple(const Event& first, const Event& second, const Event& third) noexcept {
  const std::array<Event, 3> events{first, second, third};
  if (try_fast_append_together(events)) return;
  if (replace_block()) try_fast_append_together(events);
}

bool Recorder::replace_block() noexcept {
  ThreadBuffer* tb = register_current_thread();
  if (tb == nullptr) return false;  // thread is exiting
  if (Block* full = tls_block; full != nullptr) {
    tls_block = nullptr;
    tb->current.store(nullptr, std::memory_order_release);
    submit_full(full);
  }
  Block* fresh = pool_.maybe_available() ? pool_.acquire() : nullptr;
  if (fresh == nullptr) {
    tb->dropped.fetch_add(1, std::memory_order_relaxed);
    if (!tb->dropping) {
      tb->dropping = true;  // once per stretch of drops, not per dropped event
      note_drop_onset();
    }
    return false;
  }
  tb->dropping = false;
  fresh->owner_tid = tb->tid;
  tls_block = fresh;
  tb->current.store(fresh, std::memory_order_release);
  return true;
}

void Recorder::submit_full(Block* block) {
  size_t waiting;
  {
    std::lock_guard<std::mutex> lock(full_mu_);
    full_.push_back(block);
    waiting = full_.size();
  }
  if (waiting >= pool_.wake_batch()) wake_flusher();
}

// Where the blocks were when this thread found none free.
void Recorder::note_drop_onset() noexcept {
  size_t waiting;
  {
    std::lock_guard<std::mutex> lock(full_mu_);
    waiting = full_.size();
  }
  onsets_.fetch_add(1, std::memory_order_relaxed);
  onset_in_use_.fetch_add(pool_.in_use(), std::memory_order_relaxed);
  onset_waiting_.fetch_add(waiting, std::memory_order_relaxed);
}

Recorder::DropOnsets Recorder::drop_onsets() {
  return DropOnsets{onsets_.load(), onset_in_use_.load(), onset_waiting_.load()};
}

std::vector<Block*> Recorder::take_full_blocks() {
  std::vector<Block*> out;
  std::lock_guard<std::mutex> lock(full_mu_);
  out.swap(full_);
  return out;
}

std::vector<ThreadBuffer*> Recorder::threads_snapshot() {
  std::lock_guard<std::mutex> lock(threads_mu_);
  return threads_;
}

void Recorder::reap_exited(const std::vector<ThreadBuffer*>& exited) {
  if (exited.empty()) return;
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (ThreadBuffer* tb : exited) {
    auto it = std::find(threads_.begin(), threads_.end(), tb);
    if (it == threads_.end()) continue;
    threads_.erase(it);
    if (uint64_t n = tb->dropped.load(std::memory_order_relaxed); n > 0)
      dropped_by_exited_.emplace_back(tb->tid, n);
    delete tb;
  }
  pool_.set_thread_count(threads_.size());
}

uint64_t Recorder::total_dropped() {
  uint64_t total = 0;
  for (const auto& [tid, n] : dropped_by_thread()) total += n;
  return total;
}

std::vector<std::pair<uint32_t, uint64_t>> Recorder::dropped_by_thread() {
  std::lock_guard<std::mutex> lock(threads_mu_);
  std::vector<std::pair<uint32_t, uint64_t>> out = dropped_by_exited_;
  for (ThreadBuffer* tb : threads_) {
    if (uint64_t n = tb->dropped.load(std::memory_order_relaxed); n > 0) out.emplace_back(tb->tid, n);
  }
  return out;
}

void Recorder::reset_drop_counts() {
  std::lock_guard<std::mutex> lock(threads_mu_);
  dropped_by_exited_.clear();
  for (ThreadBuffer* tb : threads_) tb->dropped.store(0, std::memory_order_relaxed);
  threads_seen_ = threads_.size();
  onsets_.store(0);
  onset_in_use_.store(0);
  onset_waiting_.store(0);
}

size_t Recorder::threads_seen() {
  std::lock_guard<std::mutex> lock(threads_mu_);
  return threads_seen_;
}

// Lock order: threads_mu_, full_mu_, then the pool's (threads_mu_ is held
// while the pool's is taken in register_current_thread).
void Recorder::lock_for_fork() {
  threads_mu_.lock();
  full_mu_.lock();
  pool_.lock_for_fork();
}

void Recorder::unlock_after_fork() {
  pool_.unlock_after_fork();
  full_mu_.unlock();
  threads_mu_.unlock();
}

void Recorder::reset_in_child() {
  // The other threads do not exist here: their buffers are kept aside, not
  // freed (nothing here can tell whether one is in use), and this thread
  // starts over with no block.
  threads_of_parent_.insert(threads_of_parent_.end(), threads_.begin(), threads_.end());
  threads_.clear();
  full_.clear();
  dropped_by_exited_.clear();
  threads_seen_ = 0;
  tls_block = nullptr;
  tls_thread = nullptr;
  pool_.reset_in_child();
}

uint32_t Recorder::os_tid_of_cupti_thread(uint32_t cupti_thread_id) {
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (const ThreadBuffer* tb : threads_) {
    if (tb->pthread_low == cupti_thread_id) return tb->tid;
  }
  for (const ThreadBuffer* tb : threads_) {
    if (tb->tid == cupti_thread_id) return tb->tid;
  }
  return 0;
}

void Recorder::set_current_thread_name(std::string_view name) {
  ThreadBuffer* tb = register_current_thread();
  if (tb == nullptr) return;
  std::lock_guard<std::mutex> lock(tb->name_mu);
  tb->name.assign(name);
  tb->name_version.fetch_add(1, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Public hot-path entry points (range.h).

void record_event(const Event& e) noexcept {
  record_event_fields(e.t0, e.t1, e.name, e.kind, e.reserved, e.domain, e.aux);
}

namespace {

// The slow halves, apart so that the fast paths below are leaf functions
// (no registers saved) that end in a tail call when the block is full.
[[gnu::noinline, gnu::cold]] void append_event_fields(uint64_t t0, uint64_t t1, const char* name,
                                                      uint8_t kind, uint8_t reserved, uint16_t domain,
                                                      uint32_t aux) noexcept {
  Recorder::instance().append(Event{t0, t1, name, kind, reserved, domain, aux});
}

[[gnu::noinline, gnu::cold]] void append_memory(uint64_t ticks, uint64_t address, int64_t bytes,
                                                uint64_t total_allocated, uint64_t total_reserved,
                                                uint64_t device) noexcept {
  MemoryReport report{ticks, address, bytes, static_cast<uint8_t>(raw::EventKind::kMemory), {}};
  MemoryTotals totals{total_allocated, total_reserved, device, kMemoryTotalsSlot, {}};
  Recorder::instance().append_pair(std::bit_cast<Event>(report), std::bit_cast<Event>(totals));
}

[[gnu::noinline, gnu::cold]] void append_comm(const Event& call, const CommDetail& detail) noexcept {
  Recorder::instance().append_pair(call, std::bit_cast<Event>(detail));
}

// One 8-byte store at `offset` of a slot.
template <typename T>
inline void store_at(Event& slot, size_t offset, T value) noexcept {
  static_assert(sizeof(T) == 8);
  std::memcpy(reinterpret_cast<unsigned char*>(&slot) + offset, &value, sizeof(value));
}

// kind, reserved, domain, aux: the record's last 8 bytes, in one store.
inline uint64_t packed_tail(uint8_t kind, uint8_t reserved, uint16_t domain, uint32_t aux) noexcept {
  static_assert(offsetof(Event, kind) == 24 && offsetof(Event, reserved) == 25 &&
                offsetof(Event, domain) == 26 && offsetof(Event, aux) == 28 &&
                std::endian::native == std::endian::little);
  return uint64_t{kind} | uint64_t{reserved} << 8 | uint64_t{domain} << 16 | uint64_t{aux} << 32;
}

// The fast path of every one-slot event: four 8-byte stores straight into
// the block. An Event built on the stack and copied would be read back by
// 16-byte loads from 8-byte stores, a store-forwarding stall that cost a
// range 3-4 ns (perf, session 11).
inline void write_event_fields(uint64_t t0, uint64_t t1, const char* name, uint8_t kind, uint8_t reserved,
                               uint16_t domain, uint32_t aux) noexcept {
  Block* b = tls_block;
  uint32_t i = b != nullptr ? b->committed.load(std::memory_order_relaxed) : kEventsPerBlock;
  if (i >= kEventsPerBlock) [[unlikely]]
    return append_event_fields(t0, t1, name, kind, reserved, domain, aux);
  Event& slot = b->events[i];
  store_at(slot, offsetof(Event, t0), t0);
  store_at(slot, offsetof(Event, t1), t1);
  store_at(slot, offsetof(Event, name), name);
  store_at(slot, offsetof(Event, kind), packed_tail(kind, reserved, domain, aux));
  b->committed.store(i + 1, std::memory_order_release);
}

}  // namespace

void record_event_fields(uint64_t t0, uint64_t t1, const char* name, uint8_t kind, uint8_t reserved,
                         uint16_t domain, uint32_t aux) noexcept {
  write_event_fields(t0, t1, name, kind, reserved, domain, aux);
}

void record_memory(uint64_t ticks, uint64_t address, int64_t bytes, uint64_t total_allocated,
                   uint64_t total_reserved, uint64_t device) noexcept {
  Block* b = tls_block;
  uint32_t i = b != nullptr ? b->committed.load(std::memory_order_relaxed) : kEventsPerBlock;
  if (i + 2 > kEventsPerBlock)
    return append_memory(ticks, address, bytes, total_allocated, total_reserved, device);
  // The layouts of event.h, written field by field into the slots.
  Event& report = b->events[i];
  store_at(report, offsetof(MemoryReport, t0), ticks);
  store_at(report, offsetof(MemoryReport, address), address);
  store_at(report, offsetof(MemoryReport, bytes), bytes);
  store_at(report, offsetof(MemoryReport, kind), uint64_t{static_cast<uint8_t>(raw::EventKind::kMemory)});
  Event& totals = b->events[i + 1];
  store_at(totals, offsetof(MemoryTotals, total_allocated), total_allocated);
  store_at(totals, offsetof(MemoryTotals, total_reserved), total_reserved);
  store_at(totals, offsetof(MemoryTotals, device), device);
  store_at(totals, offsetof(MemoryTotals, kind), uint64_t{kMemoryTotalsSlot});
  b->committed.store(i + 2, std::memory_order_release);
}

void record_memory_tag(uint64_t ticks, uint64_t address, uint64_t bytes, uint64_t device,
                       const char* category) noexcept {
  // Tags come from the front end a few times a step: the plain pair path.
  Event tag{ticks, address, category, static_cast<uint8_t>(raw::EventKind::kMemoryTag), 0, 0, 0};
  MemoryTagDetail detail{bytes, device, 0, kMemoryTagSlot, {}};
  Recorder::instance().append_pair(tag, std::bit_cast<Event>(detail));
}

void record_comm(uint64_t t0, uint64_t t1, const char* name, uint8_t flags, uint32_t sequence, uint64_t bytes,
                 const char* group, int32_t peer, int32_t tag) noexcept {
  if (t1 > t0) add_comm_ticks(t1 - t0);  // the step health's communication
  // Communication calls take microseconds: the plain pair path is enough.
  Event call{t0, t1, name, static_cast<uint8_t>(raw::EventKind::kComm), flags, 0, sequence};
  CommDetail detail{bytes, group, peer, tag, kCommDetailSlot, {}};
  append_comm(call, detail);
}

void record_gpu(const Event& activity, const GpuDetail& detail) noexcept {
  Recorder::instance().append_pair(activity, std::bit_cast<Event>(detail));
}

void record_gpu(const Event& activity, const GpuDetail& detail, const GpuGraphDetail& graph) noexcept {
  Recorder::instance().append_triple(activity, std::bit_cast<Event>(detail), std::bit_cast<Event>(graph));
}

void record_gpu_graph_node(uint64_t ticks, uint64_t node, uint32_t graph,
                           const char* operator_name) noexcept {
  // t1 carries the node id (an instant otherwise), aux the graph id.
  Recorder::instance().append(Event{ticks, node, operator_name != nullptr ? operator_name : "",
                                    static_cast<uint8_t>(raw::EventKind::kGpuGraphNode), 0, 0, graph});
}

}  // namespace trainprof::core

namespace trainprof::detail {

void record_range(const char* name, uint64_t start_ticks) noexcept {
  uint64_t end = detail::now_ticks();
  if (!detail::host_recording()) return;
  core::write_event_fields(start_ticks, end, name, static_cast<uint8_t>(raw::EventKind::kRange), 0, 0, 0);
}

void record_stack_sample(uint32_t sampled_tid, uint64_t start_ticks, uint64_t end_ticks, const char* stack,
                         uint64_t cpu_wait_ns) noexcept {
  if (!detail::host_recording() || end_ticks < start_ticks) return;
  // The wait in microseconds, in the record's spare 24 bits (reserved: the high 8, domain: the low 16).
  uint64_t wait_us = std::min(cpu_wait_ns, kMaxCpuWaitNs) / 1000;
  core::write_event_fields(start_ticks, end_ticks, stack, static_cast<uint8_t>(raw::EventKind::kStackSample),
                           static_cast<uint8_t>(wait_us >> 16), static_cast<uint16_t>(wait_us & 0xffff),
                           sampled_tid);
}

}  // namespace trainprof::detail

namespace trainprof::core {}  // namespace trainprof::core
