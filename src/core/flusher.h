// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The one background thread that writes raw data.
//
// It sleeps on an eventfd and wakes when a block fills, when a command comes
// (open, flush, close), when a signal handler asks for a flush, or when the
// flush interval elapses. Each wake drains the queue of full blocks; each
// interval it also writes the committed prefix of every live block, a clock
// anchor and a stats chunk, so a SIGKILL loses at most one interval of data.
#ifndef TRAINPROF_CORE_FLUSHER_H_
#define TRAINPROF_CORE_FLUSHER_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/raw_encoder.h"

namespace trainprof::core {

struct Block;
struct ThreadBuffer;

struct FlushStats {
  uint64_t events_written = 0;  // in raw/: in chunks the disk took whole
  uint64_t events_dropped = 0;
  // Recorded, then lost to a write the disk refused (`error`): the events of
  // the chunks it did not take whole, and what the threads handed over
  // until the run closed. Recorded = written + lost.
  uint64_t events_lost = 0;
  uint64_t bytes_written = 0;
  bool io_error = false;
  std::string error;           // first I/O error, with the path and errno's text
  uint64_t wall_ns = 0;        // since the run opened
  uint64_t writer_cpu_ns = 0;  // the flusher thread's CPU time since then
  // Ring mode (dump): the events in the dump start complete at this tick,
  // every thread's; 0 when the ring has dropped nothing.
  uint64_t complete_from_ticks = 0;
};

class Flusher {
 public:
  static Flusher& instance();

  // Starts writing to `fd` (the file header is already in it); events recorded
  // before this call are discarded. Blocks until the flusher has taken over.
  void open(int fd, std::string path, uint32_t flush_interval_ms);
  // Ring mode (the flight recorder): recording goes into memory, never to
  // disk: full blocks are kept, in the order threads handed them over, up
  // to `max_blocks`; past that the oldest are given back to the pool.
  // Events recorded before this call are discarded.
  void open_ring(size_t max_blocks);
  // Ring mode: writes the ring and every thread's recorded events as one raw
  // file body (after the header already in `fd`), a fresh string table and
  // chunk sequence of its own; the ring is kept. Returns what it wrote.
  // Called on the flusher thread (from the signal-flush callback), it
  // writes at once.
  FlushStats dump_ring(int fd, std::string path);
  // Writes everything recorded so far and a final stats chunk, closes the
  // file (ring mode: gives the ring back to the pool).
  FlushStats close();
  // Writes everything recorded so far; returns the stats at that point.
  FlushStats flush();
  bool is_open();

  // Called on the flusher thread after a flush requested by a signal.
  void set_signal_flush_callback(std::function<void(const FlushStats&)> callback);
  // Async-signal-safe: asks for a flush and waits up to `timeout_ms` for it
  // (not at all on the flusher thread itself). `sig` is the signal's number.
  bool flush_from_signal(int timeout_ms, int sig) noexcept;
  // The signal of the last flush_from_signal (0: none).
  int last_signal() const { return last_signal_.load(); }

  // fork(): lock_for_fork() before, unlock_after_fork() after, in the parent
  // and the child; reset_in_child() in the child (no flusher thread exists
  // there: the next open() starts one; close() and flush() return at once).
  void lock_for_fork();
  void unlock_after_fork();
  void reset_in_child();

  // Tests: while paused, nothing but open/flush/close commands writes data.
  void set_paused_for_testing(bool paused);
  // The flusher's OS thread id (for measuring its CPU time).
  pid_t thread_id() const { return thread_tid_.load(); }

  void wake() noexcept;

 private:
  enum class Command { kNone, kOpen, kOpenRing, kDump, kFlush, kClose };
  struct RingBlock {
    Block* block;
    uint64_t taken_ticks;  // when the flusher took it: its thread's events up to then are in it
  };

  Flusher();
  void start_thread();
  void run();
  int timeout_ms() const;
  void write_full_blocks(bool discard);
  void write_blocks(const std::vector<Block*>& blocks, bool discard);
  void write_or_lose(Block* b, uint32_t committed);
  void write_live_blocks(bool discard);
  void write_thread_names(const std::vector<ThreadBuffer*>& threads);
  void write_periodic(bool final);
  void write_out();
  void fail_io(const std::string& what);
  void start_session(bool ring);
  // Ring mode: gives every block of the ring back to the pool.
  void release_ring();
  // Ring mode: the full blocks into the ring, the oldest out past its size.
  void fill_ring();
  // Gives the oldest blocks back to the pool until the ring has its size.
  void trim_ring();
  // On the flusher thread, with the ring filled: the dump into `fd`.
  FlushStats write_ring_dump(int fd, const std::string& path);
  FlushStats stats_locked();
  FlushStats run_command(Command command);

  int event_fd_ = -1;
  std::atomic<pid_t> thread_tid_{0};
  std::atomic<pid_t> thread_pid_{0};  // the process the thread runs in (a fork child has none)

  // Command hand-off (caller thread <-> flusher).
  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  Command cmd_ = Command::kNone;
  uint64_t cmd_seq_ = 0;
  uint64_t done_seq_ = 0;
  FlushStats cmd_result_;
  int pending_fd_ = -1;
  std::string pending_path_;
  uint32_t pending_interval_ms_ = 500;

  std::atomic<bool> signal_request_{false};
  std::atomic<int> last_signal_{0};
  std::atomic<uint64_t> signal_ack_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> open_{false};
  std::atomic<bool> ring_mode_{false};
  std::function<void(const FlushStats&)> signal_callback_;

  // Flusher-thread state.
  int fd_ = -1;
  bool failed_ = false;  // a write of the open run failed: what is handed over is lost
  std::string path_;
  uint32_t interval_ms_ = 500;
  uint64_t next_periodic_ns_ = 0;
  uint64_t opened_ns_ = 0;
  uint64_t cpu_at_open_ns_ = 0;
  FlushStats stats_;
  RawEncoder encoder_;
  std::unordered_map<ThreadBuffer*, uint32_t> name_versions_written_;
  // Ring mode.
  size_t ring_max_blocks_ = 0;
  size_t pending_ring_blocks_ = 0;
  std::deque<RingBlock> ring_;
  uint64_t ring_complete_from_ticks_ = 0;
};

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_FLUSHER_H_
