// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cxxabi.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/safe_file.h"
#include "base/write_all.h"
#include "core/recorder.h"

namespace trainprof::core {
namespace {

constexpr int kMaxFrames = 64;
constexpr int kAnswerWaitMs = 200;

std::mutex g_capture_mu;            // one capture at a time
std::atomic<int> g_out_fd{-1};      // where the handler writes
std::atomic<pid_t> g_asked_tid{0};  // the thread asked now: a late answer of another is not written
std::atomic<pid_t> g_answered_tid{0};

// Async-signal-safe: backtrace() (its unwinder loaded beforehand),
// backtrace_symbols_fd() (no allocation), atomics.
void on_stack_signal(int) {
  int saved_errno = errno;
  auto self = static_cast<pid_t>(current_tid());
  int fd = g_out_fd.load();
  if (fd >= 0 && g_asked_tid.load() == self) {
    void* frames[kMaxFrames];
    int n = backtrace(frames, kMaxFrames);
    // Frame 0 is this handler, frame 1 the signal trampoline.
    if (n > 2) backtrace_symbols_fd(frames + 2, n - 2, fd);
    g_answered_tid.store(self);
  }
  errno = saved_errno;
}

// The signal of the captures: a real-time one with no handler of the
// program's. Its handler, once installed, stays: a thread that could not
// take the signal during a capture (stuck in the kernel) gets it later, and
// a real-time signal's default action would end the process.
int pick_signal() {
  for (int sig = SIGRTMIN + 6; sig <= SIGRTMAX; ++sig) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
        current.sa_handler == SIG_DFL) {
      return sig;
    }
  }
  return -1;
}

std::string thread_name(pid_t tid) {
  std::string name = base::read_regular_file_at(AT_FDCWD, "/proc/self/task/" + std::to_string(tid) + "/comm",
                                                /*follow=*/false);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) name.pop_back();
  return name;
}

// Whether thread `tid` blocks `sig` (its SigBlk mask): it would never answer.
bool blocks_signal(pid_t tid, int sig) {
  std::string status = base::read_regular_file_at(
      AT_FDCWD, "/proc/self/task/" + std::to_string(tid) + "/status", /*follow=*/false);
  size_t at = status.find("SigBlk:");
  if (at == std::string::npos) return false;
  unsigned long long mask = std::strtoull(status.c_str() + at + 7, nullptr, 16);
  return (mask >> (sig - 1)) & 1ull;
}

std::vector<pid_t> thread_ids() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    tids.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
  }
  closedir(dir);
  return tids;
}

// backtrace_symbols_fd's lines ("file(symbol+0x12)[0x...]") with C++
// symbols demangled.
std::string demangled(const std::string& text) {
  std::string out;
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string line = text.substr(line_start, line_end - line_start);
    size_t open = line.find('('), plus = line.find('+', open == std::string::npos ? 0 : open);
    if (open != std::string::npos && plus != std::string::npos && line.compare(open + 1, 2, "_Z") == 0) {
      std::string symbol = line.substr(open + 1, plus - open - 1);
      int status = -1;
      char* name = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
      if (status == 0 && name != nullptr) line = line.substr(0, open + 1) + name + line.substr(plus);
      std::free(name);
    }
    out += line;
    if (line_end < text.size()) out += '\n';
    line_start = line_end + 1;
  }
  return out;
}

}  // namespace

void prepare_thread_stacks() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* frames[2];
    backtrace(frames, 2);
  });
}

std::string take_thread_stacks() {
  prepare_thread_stacks();
  std::lock_guard<std::mutex> lock(g_capture_mu);
  static int sig = -1;  // chosen and handled once, under the lock
  if (sig < 0) {
    sig = pick_signal();
    if (sig >= 0) {
      struct sigaction sa {};
      sa.sa_handler = on_stack_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;  // a thread blocked in a call goes back into it
      sigaction(sig, &sa, nullptr);
    }
  }
  if (sig < 0) {
    base::log_warning("flight recorder: no free real-time signal to take the threads' native stacks with");
    return "";
  }
  // One in-memory file for the process's life, emptied for each capture: a
  // handler that answers too late never writes into a descriptor that was
  // closed and reused.
  static int out = memfd_create("trainprof_stacks", MFD_CLOEXEC);
  if (out < 0 || ftruncate(out, 0) != 0) {
    base::log_warning(std::string("flight recorder: cannot take the threads' native stacks: ") +
                      std::strerror(errno));
    return "";
  }
  lseek(out, 0, SEEK_SET);
  g_out_fd.store(out);
  auto self = static_cast<pid_t>(current_tid());
  for (pid_t tid : thread_ids()) {
    if (tid == self) continue;
    std::string header = "thread " + std::to_string(tid) + " (" + thread_name(tid) + "):\n";
    base::write_all(out, header.data(), header.size());
    g_answered_tid.store(0);
    g_asked_tid.store(tid);
    bool answered = false;
    bool blocked = blocks_signal(tid, sig);
    if (!blocked && syscall(SYS_tgkill, getpid(), tid, sig) == 0) {
      for (int waited = 0; waited < kAnswerWaitMs && !answered; ++waited) {
        timespec one_ms{0, 1000 * 1000};
        nanosleep(&one_ms, nullptr);
        answered = g_answered_tid.load() == tid;
      }
    }
    g_asked_tid.store(0);
    std::string footer = answered  ? "\n"
                         : blocked ? "  (not taken: the thread blocks signals)\n\n"
                                   : "  (no answer within 200 ms: the thread is in the kernel)\n\n";
    base::write_all(out, footer.data(), footer.size());
  }
  g_out_fd.store(-1);  // a late answer writes nothing (g_asked_tid is 0 too)
  std::string text;
  char buffer[65536];
  for (off_t at = 0;;) {
    ssize_t n = pread(out, buffer, sizeof(buffer), at);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    at += n;
  }
  return demangled(text);
}

}  // namespace trainprof::core
