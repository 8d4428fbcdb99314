// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// End-to-end analysis benchmark.
//
//   build/bin/trainprof_analysis_bench [--events N] [--dir DIR] [--single] [--keep] [--rounds R]
//
// 1. Records N events (nested ranges on 2 threads, 100 steps) and analyses the
//    run in a child process R times on one thread (--jobs 1): wall time, CPU
//    time, events/s per core, peak RSS of the analysing process against the
//    raw size (medians by CPU). Then on one thread and on every core,
//    alternately: the wall times. Then the floor of those outputs measured
//    in this process: the raw data decoded twice (the reader alone, its
//    events dropped) and the outputs' bytes written.
// 2. Records 8 ranks of N/8 events and analyses the tree with --jobs 1 and
//    --jobs 2, alternately, R times each (7): the speed-up of the medians,
//    and how long the cores sat idle during each run.
// Every analysis starts after a sync(2), outside its timing, so that none
// pays for the write-back of the outputs before it.
// Figures go to docs/PERFORMANCE.md with this command line.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "raw/raw_reader.h"
#include "trainprof/trainprof.h"

namespace {

namespace fs = std::filesystem;
namespace raw = trainprof::raw;

struct ChildCost {
  double wall_s = 0;
  double cpu_s = 0;
  double max_rss_mb = 0;
  bool ok = false;
  double machine_idle_s = 0;  // all cores' idle time while it ran (measure_cli)
};

// The `trainprof` command beside this binary.
std::string cli_path() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / "trainprof").string();
}

// Runs `trainprof analyse ARGS...` and measures it (wall, CPU, peak RSS via
// wait4). The process that forks it must be small: a child's peak RSS counts
// the pages it shared with its parent before exec. So a launcher process is
// forked at start-up, before this benchmark records anything, and runs the
// commands on request.
class Launcher {
 public:
  Launcher() {
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(to[1]);
      close(from[0]);
      serve(to[0], from[1]);
      _exit(0);
    }
    close(to[0]);
    close(from[1]);
    to_ = to[1];
    from_ = from[0];
  }
  ~Launcher() {
    close(to_);
    close(from_);
    waitpid(pid_, nullptr, 0);
  }

  ChildCost run(const std::vector<std::string>& args) {
    std::string msg;
    for (const auto& a : args) msg += a + '\n';
    msg += '\n';
    if (write(to_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) std::abort();
    ChildCost c;
    if (read(from_, &c, sizeof(c)) != static_cast<ssize_t>(sizeof(c))) std::abort();
    return c;
  }

 private:
  static void serve(int in, int out) {
    std::vector<std::string> args;
    std::string cur;
    char ch;
    while (read(in, &ch, 1) == 1) {
      if (ch != '\n') {
        cur += ch;
        continue;
      }
      if (!cur.empty()) {
        args.push_back(cur);
        cur.clear();
        continue;
      }
      ChildCost c = run_and_measure(args);
      if (write(out, &c, sizeof(c)) != static_cast<ssize_t>(sizeof(c))) _exit(1);
      args.clear();
    }
  }

  static ChildCost run_and_measure(std::vector<std::string> args) {
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      if (freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
      execv(argv[0], argv.data());
      _exit(127);
    }
    int status = 0;
    rusage ru{};
    wait4(pid, &status, 0, &ru);
    ChildCost c;
    c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    c.max_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB -> MiB; the largest process
    c.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return c;
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

Launcher* g_launcher = nullptr;

// Idle time of all cores together, from /proc/stat (idle + iowait).
double machine_idle_seconds() {
  double idle_s = 0;
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    unsigned long long user, nice, system, idle, iowait;
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait) == 5) {
      idle_s = static_cast<double>(idle + iowait) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
    std::fclose(f);
  }
  return idle_s;
}

// Runs `trainprof analyse ARGS...` once the earlier runs' outputs are on
// the disk (sync): each measurement starts as a user's analysis would,
// without the write-back of the one before it (back to back, the benchmark
// writes gigabytes faster than this VM's disk takes them, and the kernel
// then throttles whichever analysis is writing). The cores' idle time
// while it runs tells a run that waited from one that computed.
// `trainprof COMMAND args...` in a child process, measured.
ChildCost measure_command(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), {cli_path(), command});
  sync();
  double idle_before = machine_idle_seconds();
  ChildCost c = g_launcher->run(args);
  c.machine_idle_s = machine_idle_seconds() - idle_before;
  return c;
}

ChildCost measure_cli(std::vector<std::string> args) {
  return measure_command("analyse", std::move(args));
}

// Records `events` events in one run under `dir`; returns the run directory.
std::string record(const std::string& dir, uint64_t events, int rank) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", "8", 1);
  trainprof::ProfilerOptions o;
  o.output_path = dir;
  o.buffer_mb = static_cast<uint32_t>(std::max<uint64_t>(64, events * 32 / (1 << 20) + 64));
  trainprof::Profiler prof(o);
  const int steps = 100;
  const uint64_t per_step_per_thread = events / steps / 2 / 4;  // 4 events per iteration
  for (int s = 0; s < steps; ++s) {
    auto work = [&] {
      for (uint64_t i = 0; i < per_step_per_thread; ++i) {
        TRAINPROF_RANGE("layer");
        {
          TRAINPROF_RANGE("conv2d");
          { TRAINPROF_RANGE("im2col"); }
        }
        { TRAINPROF_RANGE("relu"); }
      }
    };
    std::thread other(work);
    work();
    other.join();
    prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

uint64_t raw_bytes(const std::string& run) {
  return fs::file_size(run + "/raw/host.tpraw");
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// What no analysis writing these outputs can go below, measured here (CPU s):
// the raw file decoded (the reader alone, every event dropped), and `bytes`
// written to a file beside the outputs in 1 MiB write(2)s, as the writers do.
struct Floor {
  double decode_s = 0;
  double write_s = 0;
};

Floor measure_floor(const std::string& run, uint64_t bytes) {
  Floor f;
  sync();
  double t0 = process_cpu_seconds();
  std::string error;
  raw::EventSink drop = [](const raw::RawEvent*, size_t) {};
  if (!raw::read_raw_file(run + "/raw/host.tpraw", &error, &drop))
    std::fprintf(stderr, "%s\n", error.c_str());
  f.decode_s = process_cpu_seconds() - t0;
  std::string path = run + "/PROFILER_OUTPUT/floor.tmp";
  std::string block(1 << 20, 'x');
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return f;
  int fd = fileno(out);
  t0 = process_cpu_seconds();
  for (uint64_t done = 0; done < bytes; done += block.size()) {
    if (write(fd, block.data(), std::min<uint64_t>(block.size(), bytes - done)) < 0) break;
  }
  f.write_s = process_cpu_seconds() - t0;
  std::fclose(out);
  fs::remove(path);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Launcher launcher;  // first, while this process is small
  g_launcher = &launcher;
  uint64_t events = 10'000'000;
  std::string dir =
      (fs::temp_directory_path() / ("trainprof_analysis_bench_" + std::to_string(getpid()))).string();
  bool ranks = true;
  bool keep = false;  // leave the recorded runs for profiling the analysis by hand
  int rounds = 7;     // of --jobs 1 then --jobs 2 on the 8 ranks
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--events") == 0 && i + 1 < argc) events = std::strtoull(argv[++i], nullptr, 10);
    if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
    if (std::strcmp(argv[i], "--single") == 0) ranks = false;
    if (std::strcmp(argv[i], "--keep") == 0) keep = true;
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
  }
  fs::remove_all(dir);
  std::printf("trainprof %s analysis benchmark, %llu events, cores: %u\n",
              std::string(trainprof::version()).c_str(), static_cast<unsigned long long>(events),
              std::thread::hardware_concurrency());

  // 1. One run.
  std::string run = record(dir + "/single", events, 0);
  uint64_t raw = raw_bytes(run);
  // The same run analysed `rounds` times (each replaces the outputs): the
  // median by CPU time.
  std::vector<ChildCost> singles;
  for (int r = 0; r < rounds; ++r) singles.push_back(measure_cli({run, "--jobs", "1"}));
  std::sort(singles.begin(), singles.end(),
            [](const ChildCost& a, const ChildCost& b) { return a.cpu_s < b.cpu_s; });
  ChildCost one = singles[singles.size() / 2];
  for (const ChildCost& c : singles) {
    one.ok = one.ok && c.ok;
    one.max_rss_mb = std::max(one.max_rss_mb, c.max_rss_mb);  // the largest of all
  }
  uint64_t trace = fs::file_size(run + "/PROFILER_OUTPUT/trace_view.json");
  std::printf("single run: raw %.1f MB (%.2f bytes/event), trace_view.json %.1f MB\n", raw / 1e6,
              static_cast<double>(raw) / static_cast<double>(events), trace / 1e6);
  std::printf("  analysis CPU s, %d times:", rounds);
  for (const ChildCost& c : singles) std::printf(" %.2f", c.cpu_s);
  std::printf("\n");
  std::printf(
      "  analysis %s (median): wall %.2f s, cpu %.2f s, %.2f M events/s per core (%.2f-%.2f over the %d), "
      "peak RSS %.0f MB (2x raw + 100 MB = %.0f MB)\n",
      one.ok ? "ok" : "FAILED", one.wall_s, one.cpu_s, static_cast<double>(events) / one.cpu_s / 1e6,
      static_cast<double>(events) / singles.back().cpu_s / 1e6,
      static_cast<double>(events) / singles[0].cpu_s / 1e6, rounds, one.max_rss_mb,
      2.0 * static_cast<double>(raw) / (1 << 20) + 100);

  // One thread against every core (--jobs: the default), alternated; the
  // outputs are the same bytes (tests/analysis_test.cc, Threads.*).
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<double> wall_one, wall_all, cpu_all, rss_all;
  for (int r = 0; r < rounds; ++r) {
    ChildCost a = measure_cli({run, "--jobs", "1"});
    ChildCost b = measure_cli({run, "--jobs", std::to_string(cores)});
    one.ok = one.ok && a.ok && b.ok;
    wall_one.push_back(a.wall_s);
    wall_all.push_back(b.wall_s);
    cpu_all.push_back(b.cpu_s);
    rss_all.push_back(b.max_rss_mb);
  }
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "  one run on %u cores (--jobs %u): wall %.2f s against %.2f s on one (medians of %d alternated, "
      "%.2fx), cpu %.2f s, peak RSS %.0f MB (the largest)\n",
      cores, cores, median_of(wall_all), median_of(wall_one), rounds,
      median_of(wall_one) / median_of(wall_all), median_of(cpu_all),
      *std::max_element(rss_all.begin(), rss_all.end()));
  // The floor of these outputs.
  uint64_t written = fs::file_size(run + "/PROFILER_OUTPUT/trace_view.json") +
                     fs::file_size(run + "/PROFILER_OUTPUT/trace_view.pftrace");
  Floor floor = measure_floor(run, written);
  std::printf(
      "  floor in this run: the raw data decoded %.2f s cpu (twice, as the analysis reads it: %.2f s), "
      "%.0f MB of outputs written %.2f s cpu: %.2f s in all, %.2f M events/s per core at best; "
      "the target 20 M events/s is %.2f s\n",
      floor.decode_s, 2 * floor.decode_s, written / 1e6, floor.write_s, 2 * floor.decode_s + floor.write_s,
      static_cast<double>(events) / (2 * floor.decode_s + floor.write_s) / 1e6,
      static_cast<double>(events) / 20e6);

  // The critical path and its what-if estimates: the same run with and
  // without them, alternated; the median of the pairs' CPU ratios.
  std::vector<double> path_ratios;
  for (int r = 0; r < rounds; ++r) {
    ChildCost without = measure_cli({run, "--no-critical-path"});
    ChildCost with = measure_cli({run});
    if (without.ok && with.ok && without.cpu_s > 0) path_ratios.push_back(with.cpu_s / without.cpu_s);
  }
  if (!path_ratios.empty()) {
    std::sort(path_ratios.begin(), path_ratios.end());
    std::printf(
        "  critical path + what-if: analysis CPU with / without, median of %zu pairs %.3fx (%.3f-%.3f)\n",
        path_ratios.size(), path_ratios[path_ratios.size() / 2], path_ratios.front(), path_ratios.back());
  }

  // The critical path, what-ifs and advisor together (issue 33's bound):
  // everything against --no-critical-path --no-advice, alternated.
  std::vector<double> answer_ratios;
  for (int r = 0; r < rounds; ++r) {
    ChildCost without = measure_cli({run, "--no-critical-path", "--no-advice"});
    ChildCost with = measure_cli({run});
    if (without.ok && with.ok && without.cpu_s > 0) answer_ratios.push_back(with.cpu_s / without.cpu_s);
  }
  if (!answer_ratios.empty()) {
    std::sort(answer_ratios.begin(), answer_ratios.end());
    std::printf(
        "  critical path + what-if + advisor: analysis CPU with / without, median of %zu pairs %.3fx "
        "(%.3f-%.3f)\n",
        answer_ratios.size(), answer_ratios[answer_ratios.size() / 2], answer_ratios.front(),
        answer_ratios.back());
  }

  // trainprof diff of this run and a second one of the same size, both
  // analysed (the diff reads their tables), then of two raw runs (the diff
  // analyses both first: the analyses are its floor).
  std::string other = record(dir + "/single_b", events, 0);
  measure_cli({other});
  std::vector<double> diff_wall;
  for (int r = 0; r < rounds; ++r) diff_wall.push_back(measure_command("diff", {run, other}).wall_s);
  std::sort(diff_wall.begin(), diff_wall.end());
  fs::remove_all(run + "/PROFILER_OUTPUT");
  fs::remove_all(other + "/PROFILER_OUTPUT");
  ChildCost raw_diff = measure_command("diff", {run, other});
  std::printf(
      "  trainprof diff of two analysed %llu-event runs: wall %.3f s (median of %d, %.3f-%.3f); of the same "
      "two raw runs (each analysed first): wall %.2f s, cpu %.2f s (%s)\n",
      static_cast<unsigned long long>(events), diff_wall[diff_wall.size() / 2], rounds, diff_wall.front(),
      diff_wall.back(), raw_diff.wall_s, raw_diff.cpu_s, raw_diff.ok ? "ok" : "FAILED");

  std::printf("RESULT single_wall_s=%.3f events=%llu\n", one.wall_s, static_cast<unsigned long long>(events));
  if (!ranks) {
    if (!keep) fs::remove_all(dir);
    return one.ok ? 0 : 1;
  }

  // 2. Eight ranks, --jobs 1 vs --jobs 2.
  for (int rank = 0; rank < 8; ++rank) record(dir + "/ranks/rank" + std::to_string(rank), events / 8, rank);
  auto analyse_tree = [&](int jobs) { return measure_cli({dir + "/ranks", "--jobs", std::to_string(jobs)}); };
  // Alternate the two so that both replace earlier outputs and share the
  // machine's state; medians over the rounds.
  std::vector<double> w1, w2, pair_ratios;
  bool ok = true;
  for (int round = 0; round < rounds; ++round) {
    for (int jobs : {1, 2}) {
      ChildCost c = analyse_tree(jobs);
      ok = ok && c.ok;
      (jobs == 1 ? w1 : w2).push_back(c.wall_s);
      if (jobs == 2) pair_ratios.push_back(w1.back() / c.wall_s);
      std::printf("  --jobs %d: wall %.2f s, cpu %.2f s, cores idle %.2f of %.2f core-s\n", jobs, c.wall_s,
                  c.cpu_s, c.machine_idle_s, c.wall_s * std::thread::hardware_concurrency());
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "8 ranks x %llu events: --jobs 1 %.2f s, --jobs 2 %.2f s (medians of %d), speed-up %.2fx; "
      "median of the rounds' speed-ups %.2fx (%s)\n",
      static_cast<unsigned long long>(events / 8), median(w1), median(w2), rounds, median(w1) / median(w2),
      median(pair_ratios), ok ? "ok" : "FAILED");
  if (!keep) fs::remove_all(dir);
  return one.ok && ok ? 0 : 1;
}
