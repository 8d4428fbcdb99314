// Copyright trainprof authors.
#include "core/session.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/collector.h"
#include "core/flusher.h"
#include "core/intern.h"
#include "core/log.h"
#include "core/options_json.h"
#include "core/recorder.h"
#include "core/run_directory.h"
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

struct sigaction g_previous_term;
struct sigaction g_previous_int;

void chain_previous_handler(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = sig == SIGTERM ? g_previous_term : g_previous_int;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == nullptr) {
    // Default action (terminate): restore it; the re-raised signal is
    // delivered when this handler returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  prev.sa_handler(sig);
}

// Async-signal-safe: only atomics, write(2) to an eventfd and nanosleep.
void on_terminating_signal(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  detail::Flusher::instance().flush_from_signal(2000);
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

void install_process_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(close_open_session_at_exit);
    struct sigaction sa {};
    sa.sa_sigaction = on_terminating_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &g_previous_term);
    sigaction(SIGINT, &sa, &g_previous_int);
  });
}

std::string write_header(int fd, const detail::ClockAnchor& anchor, const std::string& host, int rank,
                         int world_size) {
  raw::FileHeader h{};
  std::memcpy(h.magic, raw::kFileMagic, sizeof(h.magic));
  h.version = raw::kFormatVersion;
  h.header_size = raw::kFileHeaderSize;
  h.clock_source = static_cast<uint32_t>(detail::clock_source());
  h.pid = static_cast<uint32_t>(getpid());
  h.rank = rank;
  h.world_size = world_size;
  h.anchor_ticks = anchor.ticks;
  h.anchor_monotonic_ns = anchor.monotonic_ns;
  h.anchor_realtime_ns = anchor.realtime_ns;
  h.ticks_per_ns = detail::ticks_per_ns();
  std::strncpy(h.host, host.c_str(), sizeof(h.host) - 1);
  h.crc = raw::crc32c(0, &h, offsetof(raw::FileHeader, crc));
  if (::write(fd, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) {
    return std::string("cannot write raw file header: ") + std::strerror(errno);
  }
  return "";
}

}  // namespace

namespace detail {

bool domain_enabled(std::string_view domain) {
  const DomainFilter* f = g_domain_filter.load(std::memory_order_acquire);
  if (f == nullptr) return true;
  auto in = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), domain) != list.end();
  };
  if (!f->include.empty()) return in(f->include);
  return !in(f->exclude);
}

}  // namespace detail

std::shared_ptr<Session> Session::open(const ProfilerOptions& options, const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (auto other = open_session()) {
    detail::log_error("another profiler is already recording into '" + other->run_dir() +
                      "'; this start is ignored (one profiler records at a time)");
    return nullptr;
  }
  detail::init_clock();
  std::shared_ptr<Session> s(new Session());
  detail::RankInfo rank = detail::detect_rank();
  s->host_ = detail::host_name();
  s->rank_ = rank.rank;
  s->world_size_ = rank.world_size;
  s->rank_source_ = rank.source;
  s->options_json_ = detail::options_to_json(options).dump();

  std::string error;
  s->run_fd_.reset(detail::create_run_directory(options.output_path, prefix, &s->run_dir_, &error));
  if (s->run_fd_.valid()) s->recording_lock_.reset(detail::take_recording_lock(s->run_fd_.get(), &error));
  if (!s->recording_lock_.valid()) {
    detail::log_error("cannot start profiling: " + error);
    return nullptr;
  }
  s->owner_pid_ = getpid();
  std::string raw_dir = s->run_dir_ + "/" + raw::kRawDirName;
  detail::UniqueFd raw_fd(detail::make_directory_at(s->run_fd_.get(), raw::kRawDirName, raw_dir, &error));
  if (!raw_fd.valid()) {
    detail::log_error("cannot start profiling: " + error);
    return nullptr;
  }
  // Buffers first (pre-faulting can take a while): the raw file then gets its
  // header right after it is created, so a kill leaves no empty file behind.
  size_t blocks = (static_cast<size_t>(options.buffer_mb) << 20) / detail::kBlockBytes;
  if (!detail::Recorder::instance().pool().set_budget(blocks)) {
    detail::log_error("cannot start profiling: cannot allocate buffer_mb=" +
                      std::to_string(options.buffer_mb) + " MiB of event buffers");
    return nullptr;
  }
  s->raw_path_ = raw_dir + "/" + raw::kHostRawFileName;
  s->anchor_ = detail::take_anchor();
  int fd = ::openat(raw_fd.get(), raw::kHostRawFileName,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_APPEND, 0600);
  if (fd < 0) {
    detail::log_error("cannot start profiling: cannot create '" + s->raw_path_ +
                      "': " + std::strerror(errno));
    return nullptr;
  }
  s->start_monotonic_ns_ = s->anchor_.monotonic_ns;
  error = write_header(fd, s->anchor_, s->host_, s->rank_, s->world_size_);
  if (error.empty()) {
    error = s->write_run_file("profiler_info.json", s->info_json("", 0, 0, 0, 0, "", false));
  }
  if (!error.empty()) {
    ::close(fd);
    detail::log_error("cannot start profiling in '" + s->run_dir_ + "': " + error);
    return nullptr;
  }

  install_process_hooks();
  detail::Flusher& flusher = detail::Flusher::instance();
  flusher.open(fd, s->raw_path_, options.flush_interval_ms);
  Session* raw_session = s.get();
  flusher.set_signal_flush_callback([raw_session](const detail::FlushStats& st) {
    // Runs on the flusher thread while the session is open: record how far
    // the data goes in case the signal ends the process.
    raw_session->write_run_file("profiler_info.json",
                                raw_session->info_json("signal", detail::realtime_now_ns(), st.events_written,
                                                       st.events_dropped, st.bytes_written, st.error, false));
  });
  if (!options.mstx_domain_include.empty() || !options.mstx_domain_exclude.empty()) {
    g_domain_filter.store(new DomainFilter{options.mstx_domain_include, options.mstx_domain_exclude},
                          std::memory_order_release);
  } else {
    g_domain_filter.store(nullptr, std::memory_order_release);
  }
  bool host = options.activities.count(Activity::CPU) > 0;
  detail::g_host_recording.store(host, std::memory_order_release);
  open_session() = s;
  detail::start_collectors(options);
  return s;
}

Session::~Session() {
  close("destroyed");
}

bool Session::is_closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

RunSummary Session::close(std::string_view reason) {
  std::shared_ptr<Session> released;  // the registry's reference, dropped after mu_ is unlocked
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || run_dir_.empty()) return summary_;
  closed_ = true;
  detail::stop_collectors();
  detail::g_host_recording.store(false, std::memory_order_release);
  detail::Flusher& flusher = detail::Flusher::instance();
  detail::FlushStats st = flusher.close();
  flusher.set_signal_flush_callback(nullptr);
  std::string error = write_run_file(
      "profiler_info.json", info_json(reason, detail::realtime_now_ns(), st.events_written, st.events_dropped,
                                      st.bytes_written, st.error, !st.io_error));
  if (!error.empty()) detail::log_error(error);
  release_recording_lock();
  if (st.events_dropped > 0) {
    detail::log_warning(std::to_string(st.events_dropped) + " events were dropped in '" + run_dir_ +
                        "': buffer_mb is too small for this event rate");
  }
  summary_.run_dir = run_dir_;
  summary_.events_recorded = st.events_written;
  summary_.events_dropped = st.events_dropped;
  summary_.ok = !st.io_error && error.empty();
  {
    std::lock_guard<std::mutex> open_lock(g_open_mu);
    if (open_session().get() == this) released = std::move(open_session());
  }
  return summary_;
}

std::string Session::write_run_file(const std::string& name, const std::string& text) const {
  return detail::write_file_atomically_at(run_fd_.get(), name, text, run_dir_ + "/" + name);
}

// The run is complete: analysis may now treat it as closed. Only the process
// that took the lock releases it: a fork()ed child shares the lock (flock
// belongs to the open file description) and must not drop its parent's.
void Session::release_recording_lock() {
  if (recording_lock_.valid() && owner_pid_ == getpid()) flock(recording_lock_.get(), LOCK_UN);
  recording_lock_.reset();
}

void Session::record_step(int64_t step_number, uint64_t start_ticks, uint64_t end_ticks) {
  std::string name = "ProfilerStep#" + std::to_string(step_number);
  detail::Event e{start_ticks,
                  end_ticks,
                  detail::intern(name),
                  static_cast<uint8_t>(raw::EventKind::kStep),
                  0,
                  0,
                  static_cast<uint32_t>(step_number)};
  detail::Recorder::instance().append(e);
}

std::string Session::info_json(std::string_view stop_reason, uint64_t stop_realtime_ns, uint64_t written,
                               uint64_t dropped, uint64_t bytes, const std::string& io_error,
                               bool complete) const {
  nlohmann::json j;
  j["trainprof_version"] = std::string(version());
  j["raw_format_version"] = raw::kFormatVersion;
  j["host"] = host_;
  j["pid"] = static_cast<int64_t>(getpid());
  j["rank"] = rank_;
  j["world_size"] = world_size_;
  j["rank_source"] = rank_source_;
  j["clock"] = {{"source", detail::clock_source() == detail::ClockSource::kTsc ? "tsc" : "monotonic"},
                {"ticks_per_ns", detail::ticks_per_ns()},
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
  j["events_recorded"] = written;
  j["events_dropped"] = dropped;
  j["raw_bytes"] = bytes;
  j["complete"] = complete;
  if (!io_error.empty()) j["io_error"] = io_error;
  j["raw_files"] = {std::string(raw::kRawDirName) + "/" + raw::kHostRawFileName};
  j["options"] = nlohmann::json::parse(options_json_);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace trainprof
