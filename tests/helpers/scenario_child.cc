// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Small whole-process scenarios. argv: output_dir mode
//   exit      a heap profiler never stopped; the program calls exit(0)
//   io_limit  RLIMIT_FSIZE makes the raw file unwritable past 256 KiB; the
//             program must go on ("training continues") and exit 0; the run
//             ends through a trace handler (no analysis), and its counts
//             are printed ("recorded=N lost=M")
//   io_limit_at_stop  the same limit at 64 KiB, but the 50,000 ranges are all
//             recorded before anything past the header is written (the
//             flusher is held until stop, which writes once): the program
//             knows how many events it recorded (the ranges and stop's
//             ProfilerStep#0) and prints "attempted=N recorded=N lost=M"
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/flusher.h"
#include "trainprof/trainprof.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  if (std::strcmp(argv[2], "exit") == 0) {
    auto* prof = new trainprof::Profiler(o);
    for (int i = 0; i < 1000; ++i) {
      TRAINPROF_RANGE("before_exit");
    }
    std::printf("RUN %s\n", prof->current_run_dir().c_str());
    std::fflush(stdout);
    std::exit(0);
  }
  if (std::strcmp(argv[2], "io_limit") == 0) {
    signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    rlimit limit{256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    o.flush_interval_ms = 10;
    o.on_trace_ready = trainprof::trace_handler(argv[1], "", /*analyse=*/false);
    trainprof::Profiler prof(o);
    std::printf("RUN %s\n", prof.current_run_dir().c_str());
    for (int i = 0; i < 2'000'000; ++i) {
      TRAINPROF_RANGE("step_work");
    }
    prof.stop();
    trainprof::RunSummary run = prof.last_run();
    std::printf("training continues ok=%d\n", run.ok ? 1 : 0);
    std::printf("recorded=%llu lost=%llu\n", static_cast<unsigned long long>(run.events_recorded),
                static_cast<unsigned long long>(run.events_lost));
    return 0;
  }
  if (std::strcmp(argv[2], "io_limit_at_stop") == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    o.buffer_mb = 16;  // room for every range while the flusher is held
    o.on_trace_ready = trainprof::trace_handler(argv[1], "", /*analyse=*/false);
    trainprof::Profiler prof(o);
    trainprof::core::Flusher::instance().set_paused_for_testing(true);
    const int ranges = 50'000;
    for (int i = 0; i < ranges; ++i) {
      TRAINPROF_RANGE("step_work");
    }
    const int attempted = ranges + 1;  // + the ProfilerStep#0 that stop records
    prof.stop();                       // forces the one write of the events, held or not
    trainprof::RunSummary run = prof.last_run();
    std::printf("RUN %s\nattempted=%d recorded=%llu lost=%llu\n", run.run_dir.c_str(), attempted,
                static_cast<unsigned long long>(run.events_recorded),
                static_cast<unsigned long long>(run.events_lost));
    return 0;
  }
  return 2;
}
