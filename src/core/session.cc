// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/session.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/json_limits.h"
#include "base/log.h"
#include "base/run_directory.h"
#include "core/clock_sync.h"
#include "core/collector.h"
#include "core/flusher.h"
#include "core/intern.h"
#include "core/memory_limit.h"
#include "core/options_json.h"
#include "core/recorder.h"
#include "raw/crc32c.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof {
namespace {

struct DomainFilter {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
};

std::mutex g_open_mu;
// The open session, if any. A strong reference: the session lives until it is
// closed, whoever (owner, atexit) closes it. Leaked on purpose: a global with a
// destructor could be destroyed before the atexit handler that still needs it.
std::shared_ptr<Session>& open_session() {
  static auto* session = new std::shared_ptr<Session>();
  return *session;
}
// Filters are never freed: a recording thread may still read the previous one.
std::atomic<const DomainFilter*> g_domain_filter{nullptr};

// The actions that were installed before ours, per signal, to chain to.
struct sigaction g_previous[NSIG];

// Signals that end the process: the run is flushed first. SIGTERM and SIGINT
// ask politely; the others are crashes (a fault, or abort()).
constexpr int kTerminatingSignals[] = {SIGTERM, SIGINT};
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Whether `sig` ends the process once the handlers ran: a crash always
// does (the handler that raises it again is at the end of the chain); a
// signal the program had left at its default action does. One the program
// handles (Python's SIGINT, a KeyboardInterrupt) does not.
bool signal_ends_process(int sig) {
  for (int crash : kCrashSignals) {
    if (sig == crash) return true;
  }
  if (sig <= 0 || sig >= NSIG) return false;
  const struct sigaction& prev = g_previous[sig];
  return (prev.sa_flags & SA_SIGINFO) == 0 && (prev.sa_handler == SIG_DFL || prev.sa_handler == nullptr);
}

void chain_previous_handler(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous[sig];
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == nullptr) {
    // Default action (terminate, or dump core): restore it; the re-raised
    // signal is delivered when this handler returns (a fault re-executes
    // the faulting instruction and gets it at once).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  prev.sa_handler(sig);
}

// Async-signal-safe: only atomics, write(2) to an eventfd and nanosleep. The
// flusher thread writes every committed event (full blocks and the committed
// part of each thread's current block), bounded by 2 s: if the crashing
// thread holds a lock the flusher needs, the process still ends.
void on_signal(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  core::Flusher::instance().flush_from_signal(2000, sig);
  errno = saved_errno;
  chain_previous_handler(sig, info, context);
}

void close_open_session_at_exit() {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    s = open_session();
  }
  if (s) s->close("exit");
}

// fork(): every lock of the recording side is held across the call, in the
// order they nest (session registry, flusher commands, threads, full blocks,
// pool, strings), so that the child finds none held by a thread it lacks.
void prepare_fork() {
  g_open_mu.lock();
  core::Flusher::instance().lock_for_fork();
  core::Recorder::instance().lock_for_fork();
  core::intern_lock_for_fork();
}

void after_fork_in_parent() {
  core::intern_unlock_after_fork();
  core::Recorder::instance().unlock_after_fork();
  core::Flusher::instance().unlock_after_fork();
  g_open_mu.unlock();
}

// The child (a data-loader worker, a subprocess about to exec) does not
// record into the parent's run: it stops recording, forgets the parent's
// buffers and file, and can exit at once. A profiler in the child may start
// a run of its own later (see Profiler).
void after_fork_in_child() {
  detail::g_host_recording.store(false, std::memory_order_relaxed);
  core::Recorder::instance().reset_in_child();
  core::Flusher::instance().reset_in_child();
  if (open_session()) {
    // Closing it here would write the parent's files: it is left as it is,
    // held for the life of the process.
    static auto* parents_session = new std::shared_ptr<Session>();
    *parents_session = std::move(open_session());
  }
  after_fork_in_parent();
}

void install_process_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(close_open_session_at_exit);
    pthread_atfork(prepare_fork, after_fork_in_parent, after_fork_in_child);
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    for (int sig : kTerminatingSignals) sigaction(sig, &sa, &g_previous[sig]);
    // A crash handler runs on the alternate stack where the thread has one
    // (a stack overflow leaves no room on the thread's own).
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    for (int sig : kCrashSignals) sigaction(sig, &sa, &g_previous[sig]);
  });
}

std::string write_header(int fd, const core::ClockAnchor& anchor, const std::string& host, int rank,
                         int world_size) {
  raw::FileHeader h{};
  std::memcpy(h.magic, raw::kFileMagic, sizeof(h.magic));
  h.version = raw::kFormatVersion;
  h.header_size = raw::kFileHeaderSize;
  h.clock_source = static_cast<uint32_t>(core::clock_source());
  h.pid = static_cast<uint32_t>(getpid());
  h.rank = rank;
  h.world_size = world_size;
  h.anchor_ticks = anchor.ticks;
  h.anchor_monotonic_ns = anchor.monotonic_ns;
  h.anchor_realtime_ns = anchor.realtime_ns;
  h.ticks_per_ns = core::ticks_per_ns();
  std::strncpy(h.host, host.c_str(), sizeof(h.host) - 1);
  h.crc = raw::crc32c(0, &h, offsetof(raw::FileHeader, crc));
  if (::write(fd, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) {
    return std::string("cannot write raw file header: ") + std::strerror(errno);
  }
  return "";
}

// Sets the event buffers' budget for a run: buffer_mb, capped at a share of
// the memory this process may still use (warned about once per value).
bool set_buffer_budget(uint32_t buffer_mb, std::string* error) {
  core::MemoryRoom room;
  uint64_t cap_bytes = core::buffer_cap_bytes(&room);
  uint64_t wanted_bytes = static_cast<uint64_t>(buffer_mb) << 20;
  static uint64_t warned_for = 0;
  if (wanted_bytes > cap_bytes && warned_for != wanted_bytes) {
    warned_for = wanted_bytes;
    std::string why = "MemAvailable " + std::to_string(room.mem_available >> 20) + " MiB";
    if (!room.cgroup_limit_file.empty()) {
      why += ", " + std::to_string(room.cgroup_room >> 20) + " MiB left under the cgroup limit (" +
             room.cgroup_limit_file + ")";
    }
    base::log_warning("buffer_mb=" + std::to_string(buffer_mb) + " is more than this process should take: " +
                      "event buffers are capped at " + std::to_string(cap_bytes >> 20) + " MiB (1/" +
                      std::to_string(core::kBufferShareDivisor) + " of the memory it may still use: " + why +
                      "); memory is taken as events fill it");
  }
  size_t blocks = static_cast<size_t>(wanted_bytes / core::kBlockBytes);
  size_t cap_blocks = static_cast<size_t>(cap_bytes / core::kBlockBytes);
  if (!core::Recorder::instance().pool().set_budget(blocks, cap_blocks)) {
    *error = "cannot allocate the first MiB of event buffers: " + std::string(std::strerror(ENOMEM));
    return false;
  }
  return true;
}

}  // namespace

namespace core {

bool domain_enabled(std::string_view domain) {
  const DomainFilter* f = g_domain_filter.load(std::memory_order_acquire);
  if (f == nullptr) return true;
  auto in = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), domain) != list.end();
  };
  if (!f->include.empty()) return in(f->include);
  return !in(f->exclude);
}

}  // namespace core

bool Session::set_up(const ProfilerOptions& options, uint32_t extra_buffer_mb) {
  core::init_clock();
  pid_ = getpid();
  base::RankInfo rank = base::detect_rank();
  host_ = base::host_name();
  rank_ = rank.rank;
  world_size_ = rank.world_size;
  rank_source_ = rank.source;
  job_ = base::detect_job();
  options_json_ = base::json_text(core::options_to_json(options));
  // Buffers first: a run that cannot get them leaves no directory behind.
  std::string error;
  if (!set_buffer_budget(options.buffer_mb + extra_buffer_mb, &error)) {
    base::log_error("cannot start profiling: " + error + "; this cycle is not recorded, training goes on");
    return false;
  }
  return true;
}

void Session::start_recording(const ProfilerOptions& options) {
  if (!options.mstx_domain_include.empty() || !options.mstx_domain_exclude.empty()) {
    g_domain_filter.store(new DomainFilter{options.mstx_domain_include, options.mstx_domain_exclude},
                          std::memory_order_release);
  } else {
    g_domain_filter.store(nullptr, std::memory_order_release);
  }
  bool host = options.activities.count(Activity::CPU) > 0;
  detail::g_host_recording.store(host, std::memory_order_release);
  opened_ = true;
  core::start_collectors(options);
}

std::shared_ptr<Session> Session::open(const ProfilerOptions& options, const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (auto other = open_session()) {
    base::log_error("another profiler is already recording into '" + other->run_dir() +
                    "'; this start is ignored (one profiler records at a time)");
    return nullptr;
  }
  // Until the run is complete, a failure leaves a session that close()
  // (from its destructor) does not touch.
  std::shared_ptr<Session> s(new Session());
  if (!s->set_up(options, 0)) return nullptr;
  std::string error;
  s->anchor_ = core::take_anchor();
  s->start_monotonic_ns_ = s->anchor_.monotonic_ns;
  base::UniqueFd raw_file = s->create_run(options.output_path, prefix, &error);
  if (raw_file.valid()) {
    error = s->write_run_file("profiler_info.json", s->info_json("", 0, core::FlushStats{}, false));
    if (!error.empty()) error = "'" + s->run_dir_ + "': " + error;
  }
  if (!raw_file.valid() || !error.empty()) {
    base::log_error("cannot start profiling: " + error + "; this cycle is not recorded, training goes on");
    s->remove_unopened_run();
    return nullptr;
  }
  int fd = raw_file.release();

  install_process_hooks();
  core::Flusher& flusher = core::Flusher::instance();
  flusher.open(fd, s->raw_path_, options.flush_interval_ms);
  Session* raw_session = s.get();
  flusher.set_signal_flush_callback([raw_session](const core::FlushStats& st) {
    // Runs on the flusher thread while the session is open: record how far
    // the data goes in case the signal ends the process.
    raw_session->write_run_file("profiler_info.json",
                                raw_session->info_json("signal", detail::realtime_now_ns(), st, false));
  });
  open_session() = s;
  s->start_recording(options);
  return s;
}

std::shared_ptr<Session> Session::open_ring(const ProfilerOptions& options, uint32_t ring_mb,
                                            const std::string& prefix, CrashTrigger crash_trigger,
                                            CrashDumped crash_dumped) {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (auto other = open_session()) {
    base::log_error("another profiler is already recording" +
                    (other->run_dir().empty() ? std::string(" (a flight recorder)")
                                              : " into '" + other->run_dir() + "'") +
                    "; this flight recorder does not start (one profiler records at a time)");
    return nullptr;
  }
  std::shared_ptr<Session> s(new Session());
  if (!s->set_up(options, ring_mb)) return nullptr;
  s->ring_ = true;
  s->output_path_ = options.output_path;
  s->prefix_ = prefix;
  s->crash_trigger_ = std::move(crash_trigger);
  s->crash_dumped_ = std::move(crash_dumped);
  s->anchor_ = core::take_anchor();
  s->start_monotonic_ns_ = s->anchor_.monotonic_ns;
  install_process_hooks();
  core::Flusher& flusher = core::Flusher::instance();
  flusher.open_ring(static_cast<size_t>((uint64_t{ring_mb} << 20) / core::kBlockBytes));
  Session* raw_session = s.get();  // the callback is reset by close(), before the session goes
  flusher.set_signal_flush_callback(
      [raw_session](const core::FlushStats&) { raw_session->dump_on_signal(); });
  open_session() = s;
  s->start_recording(options);
  return s;
}

std::string Session::dump(const std::string& flight_recorder_json, std::string* error,
                          const std::vector<std::pair<std::string, std::string>>& extra_files,
                          const std::string& parent_dir) {
  if (pid_ != getpid()) {
    *error = "a fork() child does not write its parent's flight recorder";
    return "";
  }
  std::lock_guard<std::mutex> lock(mu_);
  return dump_locked(flight_recorder_json, error, extra_files, parent_dir);
}

void Session::dump_on_signal() {
  int sig = core::Flusher::instance().last_signal();
  if (!signal_ends_process(sig)) return;  // the program goes on (and may dump itself)
  CrashDump crash = crash_trigger_ ? crash_trigger_(sig) : CrashDump{"{}", ""};
  // The thread that got the signal may hold mu_ (a dump under way, a
  // close): the wait is bounded, and the signal handler's own bound (2 s)
  // ends the process anyway.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  for (int waited_ms = 0; !lock.try_lock(); ++waited_ms) {
    if (waited_ms >= 500) {
      base::log_error("flight recorder: the ring is not dumped at the signal: the recorder is busy");
      return;
    }
    timespec one_ms{0, 1000 * 1000};
    nanosleep(&one_ms, nullptr);
  }
  std::string error;
  std::string dir = dump_locked(crash.trigger_json, &error, {}, crash.parent_dir);
  if (dir.empty()) {
    base::log_error("flight recorder: the ring could not be dumped at the signal: " + error);
  } else {
    base::log_info("flight recorder: the last steps before the signal are in '" + dir + "'");
  }
  if (crash_dumped_) crash_dumped_(dir);
}

std::string Session::dump_locked(const std::string& flight_recorder_json, std::string* error,
                                 const std::vector<std::pair<std::string, std::string>>& extra_files,
                                 const std::string& parent_dir) {
  if (!ring_ || closed_ || !opened_) {
    *error = "the flight recorder is not recording";
    return "";
  }
  // A run directory of its own, made as open() makes one; nothing is left
  // of it when a step fails.
  Session run;
  run.pid_ = pid_;
  run.host_ = host_;
  run.rank_ = rank_;
  run.world_size_ = world_size_;
  run.rank_source_ = rank_source_;
  run.job_ = job_;
  run.options_json_ = options_json_;
  run.anchor_ = anchor_;
  run.start_monotonic_ns_ = start_monotonic_ns_;
  base::UniqueFd fd = run.create_run(parent_dir.empty() ? output_path_ : parent_dir, prefix_, error);
  core::FlushStats st;
  if (fd.valid()) {
    st = core::Flusher::instance().dump_ring(fd.get(), run.raw_path_);
    if (st.io_error) *error = st.error;
  }
  if (!fd.valid() || !error->empty()) {
    run.remove_unopened_run();
    return "";
  }
  fd.reset();
  nlohmann::json info =
      nlohmann::json::parse(run.info_json("flight_recorder", detail::realtime_now_ns(), st, true));
  nlohmann::json flight = nlohmann::json::parse(flight_recorder_json, nullptr, false);
  if (!flight.is_object()) flight = nlohmann::json::object();
  if (st.complete_from_ticks != 0) {
    // The ring dropped older blocks: from this time on every thread's events are in the run.
    double ns = static_cast<double>(st.complete_from_ticks - anchor_.ticks) / core::ticks_per_ns();
    flight["complete_from_monotonic_ns"] = anchor_.monotonic_ns + static_cast<uint64_t>(std::max(ns, 0.0));
  } else {
    flight["complete_from_monotonic_ns"] = nullptr;  // everything since the recorder started
  }
  info["flight_recorder"] = std::move(flight);
  *error = run.write_run_file("profiler_info.json",
                              info.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (!error->empty()) {
    run.remove_unopened_run();
    return "";
  }
  for (const auto& [name, content] : extra_files) {
    std::string not_written = run.write_run_file(name, content);
    if (!not_written.empty())
      base::log_warning("flight recorder: " + not_written + "; the dump goes on without it");
  }
  run.release_recording_lock();
  run.opened_ = false;  // nothing for its destructor to close
  core::note_closed_run(run.run_dir_);
  return run.run_dir_;
}

// The run directory under `output_path`, its recording lock and raw/, and
// the raw file with its header (anchor_): the raw file's descriptor, or an
// invalid one with `error` (the caller removes what was made).
base::UniqueFd Session::create_run(const std::string& output_path, const std::string& prefix,
                                   std::string* error) {
  run_fd_.reset(base::create_run_directory(output_path, prefix, &run_dir_, error));
  if (run_fd_.valid()) recording_lock_.reset(base::take_recording_lock(run_fd_.get(), error));
  if (!recording_lock_.valid()) return base::UniqueFd();
  std::string raw_dir = run_dir_ + "/" + raw::kRawDirName;
  base::UniqueFd raw_fd(base::make_directory_at(run_fd_.get(), raw::kRawDirName, raw_dir, error));
  if (!raw_fd.valid()) return base::UniqueFd();
  raw_path_ = raw_dir + "/" + raw::kHostRawFileName;
  base::UniqueFd fd(::openat(raw_fd.get(), raw::kHostRawFileName,
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_APPEND, 0600));
  if (!fd.valid()) {
    *error = "cannot create '" + raw_path_ + "': " + std::strerror(errno);
    return fd;
  }
  *error = write_header(fd.get(), anchor_, host_, rank_, world_size_);
  if (!error->empty()) *error = "'" + run_dir_ + "': " + *error;
  return error->empty() ? std::move(fd) : base::UniqueFd();
}

// A run that could not be opened is no run: what was created of it goes,
// relative to the run directory's descriptor (the names this session
// created; anything else there stops the removal of the directory).
void Session::remove_unopened_run() {
  if (!run_fd_.valid()) return;
  int run = run_fd_.get();
  int raw_dir = ::openat(run, raw::kRawDirName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (raw_dir >= 0) {
    ::unlinkat(raw_dir, raw::kHostRawFileName, 0);
    ::close(raw_dir);
    ::unlinkat(run, raw::kRawDirName, AT_REMOVEDIR);
  }
  ::unlinkat(run, "profiler_info.json", 0);
  ::unlinkat(run, base::kRecordingLockName, 0);
  release_recording_lock();
  ::rmdir(run_dir_.c_str());
}

Session::~Session() {
  close("destroyed");
}

bool Session::is_closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

RunSummary Session::close(std::string_view reason) {
  // In a fork() child the run is the parent's: nothing is written (and the
  // lock may be held by a thread the child does not have).
  if (pid_ != getpid()) return RunSummary{};
  std::shared_ptr<Session> released;  // the registry's reference, dropped after mu_ is unlocked
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !opened_) return summary_;
  closed_ = true;
  core::stop_collectors();
  detail::g_host_recording.store(false, std::memory_order_release);
  core::Flusher& flusher = core::Flusher::instance();
  core::FlushStats st = flusher.close();
  if (ring_) {
    flusher.set_signal_flush_callback(nullptr);
    // Nothing was written: the ring goes back to the pool.
    summary_.events_dropped = st.events_dropped;
    summary_.ok = true;
    std::lock_guard<std::mutex> open_lock(g_open_mu);
    if (open_session().get() == this) released = std::move(open_session());
    return summary_;
  }
  flusher.set_signal_flush_callback(nullptr);
  std::string error =
      write_run_file("profiler_info.json", info_json(reason, detail::realtime_now_ns(), st, !st.io_error));
  if (!error.empty()) base::log_error(error);
  release_recording_lock();
  core::note_closed_run(run_dir_);
  if (st.events_dropped > 0) base::log_warning(drop_message(st));
  summary_.run_dir = run_dir_;
  summary_.events_recorded = st.events_written + st.events_lost;
  summary_.events_dropped = st.events_dropped;
  summary_.events_lost = st.events_lost;
  summary_.io_error = st.error;
  summary_.ok = !st.io_error && error.empty();
  {
    std::lock_guard<std::mutex> open_lock(g_open_mu);
    if (open_session().get() == this) released = std::move(open_session());
  }
  return summary_;
}

// Says which limit the drops came from, measured: threads holding blocks,
// the writer falling behind (blocks waiting for it when threads found none
// free), or bursts larger than buffer_mb.
std::string Session::drop_message(const core::FlushStats& st) const {
  core::Recorder& rec = core::Recorder::instance();
  core::BlockPool& pool = rec.pool();
  size_t threads = rec.dropped_by_thread().size();
  size_t seen = rec.threads_seen();
  core::Recorder::DropOnsets onsets = rec.drop_onsets();
  double seconds = static_cast<double>(std::max<uint64_t>(st.wall_ns, 1)) / 1e9;
  auto rate = [](double per_second) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f M", per_second / 1e6);
    return std::string(text);
  };
  char busy[16];
  std::snprintf(busy, sizeof(busy), "%.0f%%",
                100.0 * static_cast<double>(st.writer_cpu_ns) / (seconds * 1e9));
  std::string message = std::to_string(st.events_dropped) + " events were dropped in '" + run_dir_ +
                        "', on " + std::to_string(threads) + " of the " + std::to_string(seen) +
                        " threads that recorded (exact counts per thread in profiler_info.json). ";
  std::string rates =
      "the threads produced " + rate(static_cast<double>(st.events_written + st.events_dropped) / seconds) +
      " events/s over the run, the writer wrote " + rate(static_cast<double>(st.events_written) / seconds) +
      " events/s and was busy " + busy + " of the time";
  uint64_t in_use = std::max<uint64_t>(onsets.blocks_in_use, 1);
  if (onsets.onsets > 0 && onsets.blocks_waiting * 2 >= in_use) {
    // A writer busy most of the time is slow by itself; one that was not got
    // too little CPU from the recording threads.
    bool starved = static_cast<double>(st.writer_cpu_ns) < 0.6 * seconds * 1e9;
    std::string why = starved ? ": it had too little CPU (the " + std::to_string(seen) +
                                    " recording threads kept the " +
                                    std::to_string(std::thread::hardware_concurrency()) + " cores busy)"
                              : ": it runs on one core, and that is its speed";
    return message + "The writer is the bottleneck: when threads found no free buffer block, " +
           std::to_string(100 * onsets.blocks_waiting / in_use) +
           "% of the blocks in use were full and waiting for it; " + rates + why +
           ". A larger buffer_mb only delays the drops: record fewer events (profiler_level, fewer ranges)";
  }
  if (onsets.onsets > 0 && threads * 2 >= pool.peak_in_use()) {
    return message + "The memory cap is the limit: each recording thread holds a 64 KiB block, and " +
           std::to_string(pool.peak_in_use()) + " blocks were all this run could take (1/" +
           std::to_string(core::kBufferShareDivisor) + " of the memory the process may still use); " + rates;
  }
  return message + "Bursts filled the " + std::to_string(pool.budget()) +
         " buffer blocks of buffer_mb faster than the writer emptied them; " + rates + ". Raise buffer_mb";
}

std::string Session::write_run_file(const std::string& name, const std::string& text) const {
  // In a fork() child the run is the parent's.
  if (pid_ != getpid()) return "";
  return base::write_file_atomically_at(run_fd_.get(), name, text, run_dir_ + "/" + name);
}

// The run is complete: analysis may now treat it as closed. Only the process
// that took the lock releases it: a fork()ed child shares the lock (flock
// belongs to the open file description) and must not drop its parent's.
void Session::release_recording_lock() {
  if (recording_lock_.valid() && pid_ == getpid()) flock(recording_lock_.get(), LOCK_UN);
  recording_lock_.reset();
}

void Session::record_step(int64_t step_number, uint64_t start_ticks, uint64_t end_ticks, uint8_t flags) {
  if (!core::Flusher::instance().is_open()) return;  // a fork() child, or a run that failed
  core::Event e{start_ticks,
                end_ticks,
                core::kStepNamePrefix,
                static_cast<uint8_t>(raw::EventKind::kStep),
                flags,
                0,
                static_cast<uint32_t>(step_number)};
  core::Recorder::instance().append(e);
}

namespace {

// The process's peak resident set so far and what it may use in all: the
// advisor says when a run came near its limit.
nlohmann::json process_memory_json() {
  core::MemoryLimit limit = core::memory_limit();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {{"peak_resident_bytes", static_cast<uint64_t>(usage.ru_maxrss) * 1024},
          {"limit_bytes", limit.bytes},
          {"limit_source", limit.source}};
}

}  // namespace

std::string Session::info_json(std::string_view stop_reason, uint64_t stop_realtime_ns,
                               const core::FlushStats& st, bool complete) const {
  nlohmann::json j;
  j["trainprof_version"] = std::string(version());
  j["raw_format_version"] = raw::kFormatVersion;
  j["host"] = host_;
  j["pid"] = static_cast<int64_t>(getpid());
  j["rank"] = rank_;
  j["world_size"] = world_size_;
  j["rank_source"] = rank_source_;
  // A runtime's job (detail::set_runtime_job) may come after the run opened.
  if (base::JobInfo job = job_.id.empty() ? base::detect_job() : job_; !job.id.empty()) {
    j["job"] = job.id;
    j["job_source"] = job.source;
  }
  j["clock"] = {{"source", core::clock_source() == core::ClockSource::kTsc ? "tsc" : "monotonic"},
                {"ticks_per_ns", core::ticks_per_ns()},
                {"anchor_ticks", anchor_.ticks},
                {"anchor_monotonic_ns", anchor_.monotonic_ns},
                {"anchor_realtime_ns", anchor_.realtime_ns}};
  j["start_time_ns"] = anchor_.realtime_ns;
  j["start_monotonic_ns"] = start_monotonic_ns_;
  if (stop_reason.empty()) {
    j["stop_time_ns"] = nullptr;
    j["stop_reason"] = nullptr;
  } else {
    j["stop_time_ns"] = stop_realtime_ns;
    j["stop_reason"] = std::string(stop_reason);
  }
  j["events_recorded"] = st.events_written + st.events_lost;
  j["events_dropped"] = st.events_dropped;
  // Recorded but not in raw/: the disk refused a write ("io_error").
  j["events_lost"] = st.events_lost;
  if (st.events_dropped > 0) {
    // Exact per-thread counts: where the loss is matters as much as how much.
    nlohmann::json by_thread = nlohmann::json::object();
    for (const auto& [tid, n] : core::Recorder::instance().dropped_by_thread()) {
      by_thread[std::to_string(tid)] = n;
    }
    j["events_dropped_by_thread"] = by_thread;
  }
  if (stop_reason == "signal") {
    int sig = core::Flusher::instance().last_signal();
    const char* abbrev = sig > 0 ? sigabbrev_np(sig) : nullptr;
    j["signal"] = abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
  }
  j["raw_bytes"] = st.bytes_written;
  j["complete"] = complete;
  if (!stop_reason.empty()) j["memory"] = process_memory_json();
  if (nlohmann::json sync = core::clock_sync_json(); !sync.is_null()) j["clock_sync"] = sync;
  if (!st.error.empty()) j["io_error"] = st.error;
  if (std::string collectors = core::collectors_info_json(); !collectors.empty()) {
    nlohmann::json parsed = nlohmann::json::parse(collectors, nullptr, false);
    if (parsed.is_object()) j["collectors"] = std::move(parsed);
  }
  j["raw_files"] = {std::string(raw::kRawDirName) + "/" + raw::kHostRawFileName};
  j["options"] = nlohmann::json::parse(options_json_);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace trainprof
