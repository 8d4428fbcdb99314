// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Whole-process faults that must not hurt the program that is profiled. argv:
// output_dir mode [args]
//   open_fails      the first cycle's run cannot be created (RLIMIT_FSIZE soft
//                   limit 0: the raw file header cannot be written, as on a
//                   full disk); the limit is lifted before the second cycle
//   fork_exit       forks while two threads record; the child records a few
//                   ranges and exit()s; the parent goes on and stops
//   fork_own_run    the child starts a profiler of its own and stops it
//   fork_inherited  the child keeps stepping the parent's profiler
//   crash SIG       records 5000 counters, then SIGSEGV (null write) or
//                   SIGABRT (abort()) or SIGBUS/SIGFPE (raise)
//   threads N R     N live threads record R ranges each, then wait for all
//                   to have recorded before they exit
// Prints "RUN <dir>" (fork modes: "PARENT_RUN <dir>", "CHILD_RUN <dir>") and "PARENT DONE" / "CHILD
// DONE <pid>" lines for what finished.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "trainprof/trainprof.h"

namespace {

trainprof::ProfilerOptions base_options(const char* dir) {
  trainprof::ProfilerOptions o;
  o.output_path = dir;
  o.flush_interval_ms = 20;
  return o;
}

void print_run(const trainprof::Profiler& prof) {
  std::printf("RUN %s\n", prof.last_run().run_dir.c_str());
  std::fflush(stdout);
}

int open_fails(const char* dir) {
  signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  rlimit none = limit;
  none.rlim_cur = 0;
  setrlimit(RLIMIT_FSIZE, &none);
  trainprof::ProfilerOptions o = base_options(dir);
  o.schedule = trainprof::Schedule{.wait = 0, .warmup = 1, .active = 2, .repeat = 2};
  trainprof::Profiler prof(o);
  for (int step = 0; step < 6; ++step) {
    if (step == 3) setrlimit(RLIMIT_FSIZE, &limit);  // the disk has room again for the next cycle
    for (int i = 0; i < 100; ++i) {
      TRAINPROF_RANGE("work");
    }
    prof.step();
    if (!prof.last_run().run_dir.empty() && step == 5) print_run(prof);
  }
  prof.stop();
  std::printf("PARENT DONE\n");
  return 0;
}

// Two threads record a counter sequence each until told to stop.
struct Recorders {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  Recorders() {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([this, t] {
        const char* name = t == 0 ? "seq0" : "seq1";
        for (uint64_t i = 0; !stop.load(); ++i) {
          TRAINPROF_RANGE("loop");
          trainprof::counter(name, static_cast<double>(i));
          if (i % 256 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      });
    }
  }
  void join() {
    stop = true;
    for (auto& t : threads) t.join();
  }
};

int fork_mode(const char* dir, const std::string& mode) {
  trainprof::ProfilerOptions o = base_options(dir);
  o.schedule = trainprof::Schedule{.wait = 0, .warmup = 0, .active = 1000, .repeat = 1};
  trainprof::Profiler prof(o);
  Recorders recorders;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 1000; ++i) {
      TRAINPROF_RANGE("child_work");
    }
    if (mode == "fork_own_run") {
      trainprof::ProfilerOptions co = base_options(dir);
      trainprof::Profiler child_prof(co);
      for (int i = 0; i < 1000; ++i) {
        TRAINPROF_RANGE("child_own");
      }
      child_prof.stop();
      std::printf("CHILD_RUN %s\n", child_prof.last_run().run_dir.c_str());
    } else if (mode == "fork_inherited") {
      for (int i = 0; i < 5; ++i) prof.step();
      prof.stop();
    }
    std::printf("CHILD DONE %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    std::exit(0);  // atexit handlers run: they must not wait for the parent's flusher
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("CHILD STATUS %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  recorders.join();
  prof.stop();
  std::printf("PARENT_RUN %s\n", prof.last_run().run_dir.c_str());
  std::printf("PARENT DONE\n");
  return 0;
}

int crash(const char* dir, const std::string& sig) {
  trainprof::ProfilerOptions o = base_options(dir);
  o.flush_interval_ms = 60000;  // nothing reaches the disk before the crash but through the handler
  trainprof::Profiler prof(o);
  std::printf("RUN %s\n", prof.current_run_dir().c_str());
  std::fflush(stdout);
  for (int i = 0; i < 5000; ++i) trainprof::counter("seq", i);
  if (sig == "SIGSEGV") {
    volatile int* null = nullptr;
    *null = 1;
  }
  if (sig == "SIGABRT") std::abort();
  raise(sig == "SIGBUS" ? SIGBUS : SIGFPE);
  return 0;
}

int threads_mode(const char* dir, int n, int per_thread) {
  trainprof::ProfilerOptions o = base_options(dir);
  trainprof::Profiler prof(o);
  std::atomic<int> recorded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        TRAINPROF_RANGE("thread_work");
      }
      // Alive (holding its buffer) until every thread has recorded.
      if (recorded.fetch_add(1) + 1 == n) recorded.notify_all();
      for (int now = recorded.load(); now < n; now = recorded.load()) recorded.wait(now);
    });
  }
  for (auto& t : threads) t.join();
  prof.stop();
  // The main thread records the session's step at stop (ProfilerStep#0), and
  // loses it when the flusher has not yet emptied the cap the workers
  // filled (a loaded machine): the test tells it from the workers.
  std::printf("MAIN_TID %d\n", static_cast<int>(gettid()));
  std::printf("RECORDED %llu DROPPED %llu\n",
              static_cast<unsigned long long>(prof.last_run().events_recorded),
              static_cast<unsigned long long>(prof.last_run().events_dropped));
  print_run(prof);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  std::string mode = argv[2];
  if (mode == "open_fails") return open_fails(argv[1]);
  if (mode.rfind("fork_", 0) == 0) return fork_mode(argv[1], mode);
  if (mode == "crash" && argc > 3) return crash(argv[1], argv[3]);
  if (mode == "threads" && argc > 4) return threads_mode(argv[1], std::atoi(argv[3]), std::atoi(argv[4]));
  return 2;
}
