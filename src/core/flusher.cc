// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/flusher.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "base/log.h"
#include "base/write_all.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "trainprof/range.h"

namespace trainprof::core {

void wake_flusher() noexcept {
  Flusher::instance().wake();
}

Flusher& Flusher::instance() {
  static Flusher* f = new Flusher();  // never destroyed: it may run during exit
  return *f;
}

Flusher::Flusher() {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  start_thread();
}

void Flusher::start_thread() {
  thread_pid_.store(getpid());
  std::thread([this] { run(); }).detach();
}

void Flusher::wake() noexcept {
  uint64_t one = 1;
  ssize_t ignored = ::write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

FlushStats Flusher::run_command(Command command) {
  std::unique_lock<std::mutex> lock(cmd_mu_);
  if (thread_pid_.load() != getpid()) {
    // A fork() child: the parent's flusher thread is not here. Nothing of
    // the parent's run is written from this process; a new run starts a
    // thread of its own.
    if (command != Command::kOpen) return FlushStats{};
    start_thread();
  }
  // One command at a time: wait for a previous one to finish.
  cmd_cv_.wait(lock, [&] { return cmd_ == Command::kNone; });
  cmd_ = command;
  uint64_t seq = ++cmd_seq_;
  wake();
  cmd_cv_.wait(lock, [&] { return done_seq_ >= seq; });
  return cmd_result_;
}

void Flusher::open(int fd, std::string path, uint32_t flush_interval_ms) {
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    pending_fd_ = fd;
    pending_path_ = std::move(path);
    pending_interval_ms_ = flush_interval_ms == 0 ? 1 : flush_interval_ms;
  }
  run_command(Command::kOpen);
}

void Flusher::open_ring(size_t max_blocks) {
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    pending_ring_blocks_ = std::max<size_t>(max_blocks, 1);
  }
  run_command(Command::kOpenRing);
}

FlushStats Flusher::dump_ring(int fd, std::string path) {
  // The flusher thread itself (a crash's dump, from the signal-flush
  // callback) writes it at once: waiting for its own command would never end.
  if (static_cast<uint32_t>(thread_tid_.load()) == current_tid()) return write_ring_dump(fd, path);
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    pending_fd_ = fd;
    pending_path_ = std::move(path);
  }
  return run_command(Command::kDump);
}

FlushStats Flusher::close() {
  return run_command(Command::kClose);
}
FlushStats Flusher::flush() {
  return run_command(Command::kFlush);
}
bool Flusher::is_open() {
  return open_.load();
}

void Flusher::set_signal_flush_callback(std::function<void(const FlushStats&)> callback) {
  std::lock_guard<std::mutex> lock(cmd_mu_);
  signal_callback_ = std::move(callback);
}

bool Flusher::flush_from_signal(int timeout_ms, int sig) noexcept {
  if (!open_.load() || thread_pid_.load() != getpid()) return true;
  last_signal_.store(sig);
  uint64_t before = signal_ack_.load();
  signal_request_.store(true);
  wake();
  if (static_cast<uint32_t>(thread_tid_.load()) == current_tid()) return false;  // the flusher itself crashed
  for (int waited = 0; waited < timeout_ms; ++waited) {
    if (signal_ack_.load() != before) return true;
    timespec one_ms{0, 1000 * 1000};
    nanosleep(&one_ms, nullptr);
  }
  return false;
}

void Flusher::lock_for_fork() {
  cmd_mu_.lock();
}

void Flusher::unlock_after_fork() {
  cmd_mu_.unlock();
}

void Flusher::reset_in_child() {
  // The parent's file stays the parent's: closed here, never written.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  open_.store(false);
  // A shared eventfd would let this process's flusher take the parent's
  // wake-ups.
  ::close(event_fd_);
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Waiters of the parent's threads are not here; a condition variable that
  // counts them could block a notify.
  new (&cmd_cv_) std::condition_variable();
  cmd_ = Command::kNone;
  cmd_seq_ = done_seq_ = 0;
  signal_request_.store(false);
  signal_callback_ = nullptr;
  thread_pid_.store(0);
  thread_tid_.store(0);
  encoder_.reset();
  name_versions_written_.clear();
  stats_ = FlushStats{};
  // The ring's blocks are the parent's; the pool forgot them (Recorder::reset_in_child).
  ring_.clear();
  ring_mode_.store(false);
}

void Flusher::set_paused_for_testing(bool paused) {
  paused_.store(paused);
  wake();
}

int Flusher::timeout_ms() const {
  if (fd_ < 0 && !ring_mode_.load()) return -1;
  uint64_t now = detail::monotonic_now_ns();
  if (now >= next_periodic_ns_) return 0;
  return static_cast<int>((next_periodic_ns_ - now) / 1000000) + 1;
}

void Flusher::run() {
  thread_tid_.store(current_tid());
  // Signals are handled by the other threads; a handler waiting for this
  // thread must never run on it.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  pthread_setname_np(pthread_self(), "trainprof-flush");

  for (;;) {
    pollfd pfd{event_fd_, POLLIN, 0};
    poll(&pfd, 1, timeout_ms());
    uint64_t counter;
    while (::read(event_fd_, &counter, sizeof(counter)) > 0) {
    }

    Command cmd;
    {
      std::lock_guard<std::mutex> lock(cmd_mu_);
      cmd = cmd_;
    }
    bool signal_flush = signal_request_.exchange(false);

    if (cmd == Command::kOpen || cmd == Command::kOpenRing) {
      std::lock_guard<std::mutex> lock(cmd_mu_);
      start_session(cmd == Command::kOpenRing);
    } else if (ring_mode_.load()) {
      fill_ring();
      if (cmd == Command::kDump) {
        int fd;
        std::string path;
        {
          std::lock_guard<std::mutex> lock(cmd_mu_);
          fd = pending_fd_;
          path = pending_path_;
        }
        FlushStats result = write_ring_dump(fd, path);
        std::lock_guard<std::mutex> lock(cmd_mu_);
        cmd_result_ = result;
      }
      if (cmd == Command::kClose) {
        write_live_blocks(/*discard=*/true);
        release_ring();
        ring_mode_.store(false);
        open_.store(false);
      }
      next_periodic_ns_ = detail::monotonic_now_ns() + interval_ms_ * 1000000ull;
    } else if (fd_ >= 0) {
      bool forced = cmd != Command::kNone || signal_flush;
      if (!paused_.load() || forced) write_full_blocks(false);
      bool due = detail::monotonic_now_ns() >= next_periodic_ns_;
      if ((due && !paused_.load()) || forced) {
        write_live_blocks(false);
        write_periodic(cmd == Command::kClose);
        next_periodic_ns_ = detail::monotonic_now_ns() + interval_ms_ * 1000000ull;
      } else {
        write_out();
      }
    } else if (failed_) {
      // The disk refused a write of this run: what the threads hand over
      // until it closes is counted as lost (write_blocks).
      write_full_blocks(false);
      if (cmd == Command::kClose) write_live_blocks(false);
    } else {
      write_full_blocks(/*discard=*/true);
    }

    if (fd_ >= 0 || ring_mode_.load()) Recorder::instance().pool().grow_ahead();

    if (cmd == Command::kClose && fd_ >= 0) {
      if (::close(fd_) != 0) fail_io("close");
      fd_ = -1;
      open_.store(false);
    }
    if (cmd == Command::kClose) failed_ = false;
    if (signal_flush) {
      std::function<void(const FlushStats&)> callback;
      {
        std::lock_guard<std::mutex> lock(cmd_mu_);
        callback = signal_callback_;
      }
      if (callback && open_.load()) callback(stats_locked());
      signal_ack_.fetch_add(1);
    }
    if (cmd != Command::kNone) {
      std::lock_guard<std::mutex> lock(cmd_mu_);
      if (cmd != Command::kDump) cmd_result_ = stats_locked();  // a dump set its own
      cmd_ = Command::kNone;
      done_seq_ = cmd_seq_;
      cmd_cv_.notify_all();
    }
  }
}

FlushStats Flusher::stats_locked() {
  FlushStats s = stats_;
  s.wall_ns = detail::monotonic_now_ns() - opened_ns_;
  s.writer_cpu_ns = thread_cpu_ns() - cpu_at_open_ns_;
  s.events_dropped = Recorder::instance().total_dropped();
  return s;
}

void Flusher::write_full_blocks(bool discard) {
  write_blocks(Recorder::instance().take_full_blocks(), discard);
}

void Flusher::write_blocks(const std::vector<Block*>& blocks, bool discard) {
  Recorder& rec = Recorder::instance();
  for (Block* b : blocks) {
    uint32_t committed = b->committed.load(std::memory_order_acquire);
    if (!discard && committed > b->flushed) write_or_lose(b, committed);
    rec.pool().release(b);
  }
}

// Encodes the events of `b` up to `committed`, or, after a write of this
// run failed (the file is closed), counts them as lost.
void Flusher::write_or_lose(Block* b, uint32_t committed) {
  const Event* events = &b->events[b->flushed];
  size_t count = committed - b->flushed;
  if (fd_ < 0) {
    stats_.events_lost += RawEncoder::records_in(events, count);
    return;
  }
  stats_.events_written += encoder_.events(b->owner_tid, events, count);
  if (encoder_.output().size() >= (1u << 20)) write_out();
}

void Flusher::write_live_blocks(bool discard) {
  Recorder& rec = Recorder::instance();
  std::vector<ThreadBuffer*> threads = rec.threads_snapshot();
  // Order matters. A thread queues a full block before it publishes the next
  // one as `current`, so once the current blocks are read, every block that
  // precedes them is in the queue: write the queue first, then the committed
  // prefix of each current block that was not itself queued meanwhile.
  std::vector<ThreadBuffer*> exited;
  std::vector<Block*> current(threads.size(), nullptr);
  for (size_t i = 0; i < threads.size(); ++i) {
    // An exited thread queued its last block before setting `exited`.
    if (threads[i]->exited.load(std::memory_order_acquire)) exited.push_back(threads[i]);
    current[i] = threads[i]->current.load(std::memory_order_acquire);
  }
  std::vector<Block*> full = rec.take_full_blocks();  // in submission order
  std::vector<Block*> queued = full;
  std::sort(queued.begin(), queued.end());
  write_blocks(full, discard);  // releases them to the pool
  for (Block* b : current) {
    if (b == nullptr || std::binary_search(queued.begin(), queued.end(), b)) continue;
    uint32_t committed = b->committed.load(std::memory_order_acquire);
    if (committed <= b->flushed) continue;
    if (!discard) write_or_lose(b, committed);
    b->flushed = committed;
  }
  if (!discard && fd_ >= 0) write_thread_names(threads);
  for (ThreadBuffer* tb : exited) name_versions_written_.erase(tb);
  rec.reap_exited(exited);
}

void Flusher::write_thread_names(const std::vector<ThreadBuffer*>& threads) {
  for (ThreadBuffer* tb : threads) {
    uint32_t version = tb->name_version.load(std::memory_order_acquire);
    if (version == 0) continue;
    auto it = name_versions_written_.find(tb);
    if (it != name_versions_written_.end() && it->second == version) continue;
    std::lock_guard<std::mutex> lock(tb->name_mu);
    encoder_.thread_name(tb->tid, tb->name);
    name_versions_written_[tb] = version;
  }
}

void Flusher::write_periodic(bool final) {
  if (fd_ < 0) return;
  encoder_.clock(take_anchor());
  FlushStats s = stats_locked();
  encoder_.stats(s.events_written, s.events_dropped, final);
  write_out();
}

void Flusher::write_out() {
  const std::vector<uint8_t>& out = encoder_.output();
  if (fd_ < 0 || out.empty()) {
    encoder_.clear_output();
    return;
  }
  size_t done = base::write_all(fd_, out.data(), out.size());
  stats_.bytes_written += done;
  if (done < out.size()) {
    // The chunks the disk did not take whole are lost, with their events.
    uint64_t lost = encoder_.records_past(done);
    stats_.events_written -= lost;
    stats_.events_lost += lost;
    fail_io("write");
  }
  encoder_.clear_output();
}

// On the flusher thread, cmd_mu_ held: a session starts writing to the
// pending file, or (ring) into memory.
void Flusher::start_session(bool ring) {
  // Whatever was recorded before the session belongs to no session.
  write_full_blocks(/*discard=*/true);
  write_live_blocks(/*discard=*/true);
  release_ring();
  ring_mode_.store(ring);
  if (ring) {
    ring_max_blocks_ = pending_ring_blocks_;
  } else {
    encoder_.reset();
    name_versions_written_.clear();
    fd_ = pending_fd_;
    failed_ = false;
    path_ = pending_path_;
    interval_ms_ = pending_interval_ms_;
  }
  stats_ = FlushStats{};
  Recorder::instance().reset_drop_counts();
  opened_ns_ = detail::monotonic_now_ns();
  cpu_at_open_ns_ = thread_cpu_ns();
  next_periodic_ns_ = opened_ns_ + interval_ms_ * 1000000ull;
  open_.store(true);
}

void Flusher::release_ring() {
  for (const RingBlock& r : ring_) Recorder::instance().pool().release(r.block);
  ring_.clear();
  ring_complete_from_ticks_ = 0;
}

void Flusher::fill_ring() {
  Recorder& rec = Recorder::instance();
  std::vector<ThreadBuffer*> exited;
  for (ThreadBuffer* tb : rec.threads_snapshot()) {
    // An exited thread queued its last block before setting `exited`.
    if (tb->exited.load(std::memory_order_acquire)) exited.push_back(tb);
  }
  uint64_t now = detail::now_ticks();
  for (Block* b : rec.take_full_blocks()) ring_.push_back(RingBlock{b, now});
  trim_ring();
  rec.reap_exited(exited);
}

void Flusher::trim_ring() {
  while (ring_.size() > ring_max_blocks_) {
    ring_complete_from_ticks_ = std::max(ring_complete_from_ticks_, ring_.front().taken_ticks);
    Recorder::instance().pool().release(ring_.front().block);
    ring_.pop_front();
  }
}

// On the flusher thread, with the ring filled: the ring's blocks in the
// order they were handed over, then what each live block holds, then the
// threads' names, a clock anchor and the final stats, as a file of its own.
FlushStats Flusher::write_ring_dump(int fd, const std::string& path) {
  FlushStats result;
  auto encoder = std::make_unique<RawEncoder>();
  auto write_out_dump = [&] {
    const std::vector<uint8_t>& out = encoder->output();
    if (!result.io_error && !out.empty()) {
      size_t done = base::write_all(fd, out.data(), out.size());
      result.bytes_written += done;
      if (done < out.size()) {
        result.io_error = true;
        result.error = "the disk refused the write of " + path + ": " + std::strerror(errno);
      }
    }
    encoder->clear_output();
  };
  auto encode = [&](const Block* b, uint32_t committed) {
    if (committed <= b->flushed) return;
    result.events_written += encoder->events(b->owner_tid, &b->events[b->flushed], committed - b->flushed);
    if (encoder->output().size() >= (1u << 20)) write_out_dump();
  };
  // As in write_live_blocks: the current blocks are read before the queue
  // is taken, so that no event is missed or written twice; the queue joins
  // the ring (which keeps its size) before the ring is written.
  Recorder& rec = Recorder::instance();
  std::vector<ThreadBuffer*> threads = rec.threads_snapshot();
  std::vector<Block*> current(threads.size(), nullptr);
  for (size_t i = 0; i < threads.size(); ++i)
    current[i] = threads[i]->current.load(std::memory_order_acquire);
  std::vector<Block*> queued = rec.take_full_blocks();
  uint64_t now = detail::now_ticks();
  for (Block* b : queued) ring_.push_back(RingBlock{b, now});
  trim_ring();
  for (const RingBlock& r : ring_) encode(r.block, r.block->committed.load(std::memory_order_acquire));
  std::sort(queued.begin(), queued.end());
  for (Block* b : current) {
    if (b != nullptr && !std::binary_search(queued.begin(), queued.end(), b)) {
      encode(b, b->committed.load(std::memory_order_acquire));
    }
  }
  for (ThreadBuffer* tb : threads) {
    if (tb->name_version.load(std::memory_order_acquire) == 0) continue;
    std::lock_guard<std::mutex> lock(tb->name_mu);
    encoder->thread_name(tb->tid, tb->name);
  }
  encoder->clock(take_anchor());
  result.events_dropped = rec.total_dropped();
  encoder->stats(result.events_written, result.events_dropped, /*final=*/true);
  write_out_dump();
  result.wall_ns = detail::monotonic_now_ns() - opened_ns_;
  result.complete_from_ticks = ring_complete_from_ticks_;
  return result;
}

void Flusher::fail_io(const std::string& what) {
  int err = errno;
  if (!stats_.io_error) {
    stats_.io_error = true;
    stats_.error = "the disk refused the " + what + " of " + path_ + ": " + std::strerror(err);
    base::log_error(stats_.error + "; collection disabled for this run, training goes on");
  }
  failed_ = true;
  // Stop collecting: nothing more can be written to this run.
  detail::g_host_recording.store(false, std::memory_order_relaxed);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  open_.store(false);
}

}  // namespace trainprof::core
