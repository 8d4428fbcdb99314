// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The `trainprof` command.
//
//   trainprof analyse PATH [--pretty] [--steps 3-5|3,4,5] [--jobs N] [--simplify] [--trace-limit-mb N]
//                          [--window-mb N] [--export-type text|db|text,db] [--trace-format
//                          json|perfetto|json,perfetto] [--mpi [--mpi-wait-minutes N]]
//   trainprof summary PATH
//   trainprof cluster PATH [--jobs N] [--msprof-layout DIR] [--mpi] [--full-json] [--progress]
//   trainprof --version | --help
//
// Exit status: 0 success, 1 a run failed (or nothing to do), 2 bad usage.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "analyse_mpi.h"
#include "mpi_exchange.h"
#include "trainprof/advise.h"
#include "trainprof/analyse.h"
#include "trainprof/diff.h"
#include "trainprof/mcp.h"
#include "trainprof/profiler.h"
#include "trainprof/what_if.h"

namespace {

namespace fs = std::filesystem;

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

const char* kMainHelp =
    "usage: trainprof <command> [options]\n"
    "\n"
    "commands:\n"
    "  analyse PATH   turn raw runs into timeline, statistics and step breakdown\n"
    "  summary PATH   print what an analysed run shows: top ranges, steps, outputs\n"
    "  cluster PATH   match the collectives of several ranks' runs, name the straggler\n"
    "  report PATH    write report.html: the analysed runs on one self-contained page\n"
    "  diff A B       compare two runs per step: what changed the step time\n"
    "  whatif RUN     estimate the step time with some work made shorter\n"
    "  advise PATH    what to change, the largest saving first, with its evidence\n"
    "  sql PATH QUERY run SQL on a cluster's trainprof.db, its part files joined\n"
    "  mcp ROOT       serve the runs under ROOT to an agent (Model Context Protocol, stdio)\n"
    "  options        list the profiler's options: name, type, default, range, meaning\n"
    "  run SCRIPT     profile a Python script unchanged (the Python package's command:\n"
    "                 pip install . puts it on PATH; also python -m trainprof run)\n"
    "\n"
    "options:\n"
    "  --version      print the version\n"
    "  --help         this help; 'trainprof <command> --help' for a command\n";

const char* kAnalyseHelp =
    "usage: trainprof analyse PATH [options]\n"
    "\n"
    "PATH is a run directory (*_trainprof) or any directory above run directories;\n"
    "every run below it is analysed, one worker process each. Outputs go to\n"
    "{run}/PROFILER_OUTPUT/: trace_view.json, op_statistic.csv, operator_details.csv,\n"
    "step_trace_time.csv, profiler_info.json, profiler_metadata.json.\n"
    "\n"
    "options:\n"
    "  --pretty             indent JSON outputs\n"
    "  --steps A-B|A,B,C    only these (consecutive) steps in every output\n"
    "  --jobs N             cores used, 1 to 1024: up to N runs at once, each run's\n"
    "                       passes and writers side by side on its share (default: every\n"
    "                       core, up to cores / 2 runs at once); outputs do not depend on it\n"
    "  --simplify           remove raw/ after a successful analysis (never of a run still\n"
    "                       being recorded: its raw/ is kept, with a warning)\n"
    "  --trace-limit-mb N   cut trace_view.json (at a whole step when one fits) to stay under\n"
    "                       N MiB, 1 to 1048576 (default 500)\n"
    "  --window-mb N        hold the slices of about N MiB of the run at a time (16 bytes\n"
    "                       each; the raw data is read twice), 1 to 1048576 (default 16)\n"
    "  --export-type T      text (the timeline JSON and CSV tables, the default), db\n"
    "                       (PROFILER_OUTPUT/trainprof.db, SQLite: docs/DB_SCHEMA.md) or text,db\n"
    "  --trace-format F     the timeline as json (trace_view.json), perfetto\n"
    "                       (trace_view.pftrace, Perfetto's protobuf trace) or json,perfetto\n"
    "                       (the default)\n"
    "  --no-critical-path   leave out each step's critical path (critical_path.csv, its\n"
    "                       timeline track) and the what-if estimates\n"
    "  --no-advice          leave out the advisor's findings (trainprof advise)\n"
    "  --mpi                under `mpirun -np K` (or srun): each process analyses every K-th\n"
    "                       run, then the cluster pass (trainprof cluster) on the ranks'\n"
    "                       summaries is spread over the K processes (as cluster --mpi).\n"
    "                       The processes meet through files under\n"
    "                       PATH/cluster_analysis_output/: PATH must be on a file system\n"
    "                       all of them see\n"
    "  --mpi-wait-minutes N with --mpi: how long the first process waits for the others\n"
    "                       before the cluster pass goes on without them, on the first\n"
    "                       process alone (default 60); the others wait as long for the\n"
    "                       first, then leave the pass to it\n"
    "\n"
    "A run still being recorded is analysed up to its last flush, with a warning that\n"
    "the outputs are partial. One analysis of a run runs at a time: another one of the\n"
    "same run fails at once, saying so. PROFILER_OUTPUT must not be a symlink.\n"
    "\n"
    "exit status: 0 all runs analysed, 1 a run failed or no run found, 2 bad usage\n";

const char* kSummaryHelp =
    "usage: trainprof summary PATH\n"
    "\n"
    "For every analysed run at or below PATH: the ranges and operators with the\n"
    "most self time, the time breakdown of each step, and where the outputs are.\n"
    "Runs that were not analysed yet are listed with the command that does it.\n";

const char* kClusterHelp =
    "usage: trainprof cluster PATH [--jobs N] [--job-id ID] [--msprof-layout DIR] [--mpi] [--full-json]\n"
    "                         [--progress]\n"
    "\n"
    "PATH holds the runs of several ranks (an MPI job's output directory). Runs not\n"
    "analysed yet are analysed first (--jobs at once). Every collective is matched\n"
    "across the ranks of its group (group, sequence number); the report says how long\n"
    "each rank waited at collectives and for whom, names the straggler (the rank the\n"
    "others lost at least half of their waiting to), the steps it was late in, and its\n"
    "cause (compute, data loading or communication: what it did longer than the others'\n"
    "median in those steps), and names the ranks of the world with no run.\n"
    "It also lists the slow links: bytes over transit time per link (a collective as\n"
    "its rank's own link), below half the median of their transport.\n"
    "Outputs: PATH/cluster_analysis_output/straggler_report.txt,\n"
    "cluster_analysis.json, cluster_step_trace_time.csv, cluster_critical_path.csv,\n"
    "cluster_communication_summary.json (per group and operation: percentiles of\n"
    "wait, transit and bandwidth; the slowest collectives, transfers and links in\n"
    "full), trainprof.db (every rank's part in every operation, SQLite, indexed),\n"
    "cluster_trace_view.json and .pftrace (the timeline). For jobs of up to 1,024\n"
    "ranks also msprof-analyze's cluster_communication.json and\n"
    "cluster_communication_matrix.json, and in each rank's PROFILER_OUTPUT/ its\n"
    "communication.json and communication_matrix.json; above, those go to\n"
    "trainprof.db only and the timeline draws the 64 ranks that matter most.\n"
    "\n"
    "  --job-id ID          when PATH holds the runs of several jobs (each run records\n"
    "                       its launcher's job id: TRAINPROF_JOB_ID, TORCHELASTIC_RUN_ID,\n"
    "                       PMIX_NAMESPACE, SLURM_JOB_ID.SLURM_STEP_ID, ...), analyse\n"
    "                       job ID's; by default the job with the most ranks (the\n"
    "                       latest started among equals), the others named and left out\n"
    "  --msprof-layout DIR  also lay the ranks' tables out as msprof-analyze reads them\n"
    "                       (DIR/{worker}_{stamp}_ascend_pt/ per rank), so that\n"
    "                       `msprof-analyze cluster -d DIR -m all` works on them\n"
    "  --mpi                spread the pass over the processes of an MPI job:\n"
    "                       `mpirun -np K trainprof cluster --mpi PATH`; each reads\n"
    "                       (and analyses, where still to do) every K-th run, the\n"
    "                       first one prints the report and writes the outputs\n"
    "  --full-json          write msprof-analyze's JSON tables and every rank on the\n"
    "                       timeline whatever the job's size (about 1.1 KB a rank and\n"
    "                       operation)\n"
    "  --progress           each stage's end and seconds on stderr (always on a terminal)\n"
    "  --database-split-rows N  with --mpi: from N collectives and transfers on (default\n"
    "                       4000000), trainprof.db's communication rows are split over\n"
    "                       part files (trainprof.db.part1, ...) that up to 8 processes\n"
    "                       write at once; `trainprof sql` joins them\n"
    "\n"
    "exit status: 0 analysed, 1 nothing to analyse or outputs not written, 2 bad usage\n";

const char* kSqlHelp =
    "usage: trainprof sql PATH QUERY\n"
    "\n"
    "Runs QUERY, one statement that reads (SELECT, WITH, EXPLAIN, a PRAGMA that\n"
    "reads; a write or a second statement is refused), on a cluster's trainprof.db (docs/DB_SCHEMA.md,\n"
    "\"Cluster\"): PATH is the database, or a directory holding it or holding\n"
    "cluster_analysis_output/trainprof.db. A cluster pass spread over MPI processes\n"
    "splits the communication table of a large job over part files beside it\n"
    "(trainprof.db.part1, ...); here they are joined into one `communication`.\n"
    "Prints the rows as CSV, the column names first (NULL: an empty field). Any\n"
    "other trainprof.db (a run's, with --export-type db) is queried as it is.\n"
    "\n"
    "  trainprof sql job/ \"SELECT rank, SUM(wait_ns) FROM communication GROUP BY rank\"\n"
    "\n"
    "exit status: 0 done, 1 the database or a part cannot be read or the query\n"
    "failed, 2 bad usage\n";

// Numeric options: their ranges. 2^20 MB (1 TiB) is far above what any
// viewer opens or any machine holds, and keeps MB -> bytes far from overflowing.
constexpr uint64_t kMaxJobs = 1024;
constexpr uint64_t kMaxTraceLimitMb = 1ull << 20;
constexpr uint64_t kMaxWaitMinutes = 7 * 24 * 60;

// A decimal number from 1 to `max`: digits only (no sign, space or suffix),
// checked before it is converted, so that nothing wraps.
bool parse_number(const std::string* text, uint64_t max, uint64_t* out) {
  if (text == nullptr || text->empty() || text->size() > 19) return false;
  if (text->find_first_not_of("0123456789") != std::string::npos) return false;
  uint64_t n = std::strtoull(text->c_str(), nullptr, 10);  // < 10^19: fits
  if (n < 1 || n > max) return false;
  *out = n;
  return true;
}

int usage_error(const std::string& message, const char* help) {
  std::fprintf(stderr, "trainprof: %s\n\n%s", message.c_str(), help);
  return kUsage;
}

// ---------------------------------------------------------------------------
// analyse

void draw_progress(size_t done, size_t total) {
  const int width = 30;
  int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu runs", filled, "##############################", width - filled,
               "", done, total);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

int cmd_analyse(const std::vector<std::string>& args) {
  trainprof::AnalyseOptions options;
  std::string path;
  bool mpi = false;
  uint64_t mpi_wait_minutes = 60;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> const std::string* {
      if (i + 1 >= args.size()) return nullptr;
      (void)flag;
      return &args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kAnalyseHelp, stdout);
      return kOk;
    } else if (a == "--pretty") {
      options.pretty = true;
    } else if (a == "--simplify") {
      options.data_simplification = true;
    } else if (a == "--steps") {
      const std::string* v = value("--steps");
      if (v == nullptr) return usage_error("--steps needs a value such as 3-5 or 3,4,5", kAnalyseHelp);
      try {
        options.step_list = trainprof::parse_step_list(*v);
      } catch (const std::invalid_argument& e) {
        return usage_error(e.what(), kAnalyseHelp);
      }
    } else if (a == "--jobs" || a == "-j") {
      uint64_t n = 0;
      if (!parse_number(value("--jobs"), kMaxJobs, &n)) {
        return usage_error("--jobs needs a number from 1 to " + std::to_string(kMaxJobs), kAnalyseHelp);
      }
      options.max_workers = static_cast<int>(n);
    } else if (a == "--trace-limit-mb") {
      uint64_t n = 0;
      if (!parse_number(value("--trace-limit-mb"), kMaxTraceLimitMb, &n)) {
        return usage_error("--trace-limit-mb needs a number from 1 to " + std::to_string(kMaxTraceLimitMb),
                           kAnalyseHelp);
      }
      options.trace_size_limit_bytes = n << 20;
    } else if (a == "--no-critical-path") {
      options.critical_path = false;
    } else if (a == "--no-advice") {
      options.advise = false;
    } else if (a == "--window-mb") {
      uint64_t n = 0;
      if (!parse_number(value("--window-mb"), kMaxTraceLimitMb, &n)) {
        return usage_error("--window-mb needs a number from 1 to " + std::to_string(kMaxTraceLimitMb),
                           kAnalyseHelp);
      }
      options.window_slices = (n << 20) / 16;  // a slice is 16 bytes (analysis/trace_model.h)
    } else if (a == "--export-type") {
      const std::string* v = value("--export-type");
      options.export_text = v != nullptr && (*v == "text" || *v == "text,db" || *v == "db,text");
      options.export_db = v != nullptr && (*v == "db" || *v == "text,db" || *v == "db,text");
      if (!options.export_text && !options.export_db) {
        return usage_error("--export-type needs text, db or text,db", kAnalyseHelp);
      }
    } else if (a == "--trace-format") {
      const std::string* v = value("--trace-format");
      options.trace_json = v != nullptr && (*v == "json" || *v == "json,perfetto" || *v == "perfetto,json");
      options.trace_perfetto =
          v != nullptr && (*v == "perfetto" || *v == "json,perfetto" || *v == "perfetto,json");
      if (!options.trace_json && !options.trace_perfetto) {
        return usage_error("--trace-format needs json, perfetto or json,perfetto", kAnalyseHelp);
      }
    } else if (a == "--mpi") {
      mpi = true;
    } else if (a == "--mpi-wait-minutes") {
      if (!parse_number(value("--mpi-wait-minutes"), kMaxWaitMinutes, &mpi_wait_minutes)) {
        return usage_error("--mpi-wait-minutes needs a number from 1 to " + std::to_string(kMaxWaitMinutes),
                           kAnalyseHelp);
      }
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("unknown option '" + a + "'", kAnalyseHelp);
    } else if (path.empty()) {
      path = a;
    } else {
      return usage_error("only one PATH may be given (got '" + path + "' and '" + a + "')", kAnalyseHelp);
    }
  }
  if (path.empty()) return usage_error("analyse needs a PATH", kAnalyseHelp);
  if (mpi) return trainprof::cli::analyse_mpi(path, options, static_cast<int>(mpi_wait_minutes));

  bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<std::string> runs = trainprof::find_run_directories(path);
  if (tty && runs.size() > 1) {
    options.on_progress = draw_progress;
    draw_progress(0, runs.size());
  } else if (tty && runs.size() == 1) {
    // One run: say what is being done when it will take more than a moment.
    std::error_code ec;
    uint64_t raw = 0;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(runs[0]) / "raw", ec)) {
      raw += e.is_regular_file(ec) ? e.file_size(ec) : 0;
    }
    if (raw > (16u << 20)) {
      std::fprintf(stderr, "analysing %s (%.0f MB of raw data, about %.0f M events)...\n", runs[0].c_str(),
                   static_cast<double>(raw) / 1e6, static_cast<double>(raw) / 5e6);
    }
  }
  trainprof::AnalyseReport report = trainprof::analyse(path, options);
  if (!report.error.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", report.error.c_str());
    return kFailed;
  }
  size_t failed = 0;
  uint64_t events = 0;
  for (const auto& r : report.runs) {
    for (const std::string& w : r.warnings)
      std::fprintf(stderr, "warning: %s: %s\n", r.run_dir.c_str(), w.c_str());
    if (r.ok) {
      events += r.events;
      std::printf("analysed %s (%llu events, %.2f s) -> %s/PROFILER_OUTPUT\n", r.run_dir.c_str(),
                  static_cast<unsigned long long>(r.events), r.seconds, r.run_dir.c_str());
    } else {
      ++failed;
    }
  }
  std::printf("%zu of %zu run(s) analysed, %llu events\n", report.runs.size() - failed, report.runs.size(),
              static_cast<unsigned long long>(events));
  if (failed > 0) {
    std::fprintf(stderr, "\n%zu run(s) failed:\n", failed);
    for (const auto& r : report.runs) {
      if (!r.ok) std::fprintf(stderr, "  %s: %s\n", r.run_dir.c_str(), r.error.c_str());
    }
    return kFailed;
  }
  return kOk;
}

// ---------------------------------------------------------------------------
// summary

int cmd_summary(const std::vector<std::string>& args) {
  std::string path;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kSummaryHelp, stdout);
      return kOk;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kSummaryHelp);
    if (!path.empty()) return usage_error("only one PATH may be given", kSummaryHelp);
    path = a;
  }
  if (path.empty()) return usage_error("summary needs a PATH", kSummaryHelp);
  std::vector<std::string> runs = trainprof::find_run_directories(path);
  if (runs.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", trainprof::no_run_directory_error(path).c_str());
    return kFailed;
  }
  int status = kOk;
  for (const std::string& run : runs) {
    std::error_code ec;
    // A run not analysed yet is said so, with the command that analyses it.
    if (!fs::exists(fs::path(run) / "PROFILER_OUTPUT" / "operator_details.csv", ec)) status = kFailed;
    std::fputs(trainprof::summarize_run(run).c_str(), stdout);
  }
  return status;
}

// ---------------------------------------------------------------------------
// diff

const char* kDiffHelp =
    "usage: trainprof diff RUN_A RUN_B [--csv FILE]\n"
    "\n"
    "Compares two runs per step (each analysed first when it is not): the mean\n"
    "step and its parts (computing, communication not overlapped, data wait,\n"
    "free), then every host operator and range (by self time) and every GPU\n"
    "kernel, copy and set whose time per step changed, largest change first;\n"
    "what is only in one run, and input shapes (record_shapes) seen in one only.\n"
    "\n"
    "options:\n"
    "  --csv FILE     also write every row as CSV (docs/OUTPUTS.md, diff.csv)\n"
    "\n"
    "exit status: 0 compared, 1 a run missing or not analysable, 2 bad usage\n";

int cmd_diff(const std::vector<std::string>& args) {
  std::vector<std::string> runs;
  std::string csv;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kDiffHelp, stdout);
      return kOk;
    }
    if (a == "--csv") {
      if (i + 1 >= args.size() || args[i + 1].empty()) return usage_error("--csv needs a file", kDiffHelp);
      csv = args[++i];
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kDiffHelp);
    runs.push_back(a);
  }
  if (runs.size() != 2) return usage_error("diff needs two runs, RUN_A and RUN_B", kDiffHelp);
  trainprof::DiffReport d = trainprof::diff_runs(runs[0], runs[1], csv);
  std::fputs(d.text.c_str(), stdout);
  if (!d.ok()) {
    std::fprintf(stderr, "trainprof: %s\n", d.error.c_str());
    return kFailed;
  }
  if (!csv.empty()) std::printf("every row: %s\n", csv.c_str());
  return kOk;
}

// ---------------------------------------------------------------------------
// advise

const char* kAdviseHelp =
    "usage: trainprof advise PATH [--json]\n"
    "\n"
    "What to change, from fixed rules over the analysis (docs/ADVICE.md: each rule,\n"
    "its threshold and why): each finding with its evidence, what the change\n"
    "would save per step (re-timed, or bounded by the time the problem takes) and\n"
    "the change itself, the largest saving first. PATH is a run (analysed first\n"
    "when it is not) or a directory of runs: several ranks' runs also get the\n"
    "cluster's findings (the straggler, slow links).\n"
    "\n"
    "options:\n"
    "  --json         print the findings as a JSON array\n"
    "\n"
    "exit status: 0 advised (findings or none), 1 no run or nothing analysable, 2 bad usage\n";

int cmd_advise(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  bool as_json = false;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kAdviseHelp, stdout);
      return kOk;
    }
    if (a == "--json") {
      as_json = true;
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kAdviseHelp);
    paths.push_back(a);
  }
  if (paths.size() != 1) return usage_error("advise needs one PATH", kAdviseHelp);
  trainprof::AdviceReport a = trainprof::advise(paths[0]);
  for (const std::string& w : a.warnings) std::fprintf(stderr, "trainprof: warning: %s\n", w.c_str());
  if (!a.ok()) {
    std::fprintf(stderr, "trainprof: %s\n", a.error.c_str());
    return kFailed;
  }
  if (!as_json) {
    std::fputs(a.text.c_str(), stdout);
    return kOk;
  }
  std::fputs(a.json.c_str(), stdout);
  return kOk;
}

// ---------------------------------------------------------------------------
// whatif

const char* kWhatIfHelp =
    "usage: trainprof whatif RUN [--hide-data-wait] [--overlap-communication]\n"
    "                            [--faster NAME [--speedup K]]\n"
    "\n"
    "Estimates each step's time with some of its work made shorter, re-timed\n"
    "through the dependencies its critical path follows (critical_path.csv):\n"
    "each thread's order, launches, stream order and synchronizations. Work\n"
    "off the critical path saves nothing; the rest of the step is held as\n"
    "recorded. Reads the run's raw data. RUN may be a run, its PROFILER_OUTPUT or\n"
    "a directory of runs (each estimated in turn).\n"
    "\n"
    "options:\n"
    "  --hide-data-wait          the loop never waits for a batch\n"
    "  --overlap-communication   communication costs the step nothing\n"
    "  --faster NAME             every range, operator or kernel named NAME ...\n"
    "  --speedup K               ... runs K times faster (default 2)\n"
    "\n"
    "exit status: 0 estimated, 1 the run missing or not readable, 2 bad usage\n";

// The runs `path` names, as every command takes it (find_run_directories: a
// run, its PROFILER_OUTPUT or raw/, a directory of runs), each estimated in
// turn; a directory holding raw/ is a run whatever its name.
std::vector<std::string> whatif_runs(const std::string& path, std::string* error) {
  std::error_code ec;
  if (std::filesystem::is_directory(std::filesystem::path(path) / "raw", ec)) return {path};
  std::vector<std::string> runs = trainprof::find_run_directories(path);
  if (runs.empty()) *error = trainprof::no_run_directory_error(path);
  return runs;
}

int cmd_whatif(const std::vector<std::string>& args) {
  trainprof::WhatIfRequest request;
  std::string run;
  bool speedup_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kWhatIfHelp, stdout);
      return kOk;
    }
    if (a == "--hide-data-wait") {
      request.hide_data_wait = true;
    } else if (a == "--overlap-communication") {
      request.overlap_communication = true;
    } else if (a == "--faster") {
      if (i + 1 >= args.size() || args[i + 1].empty())
        return usage_error("--faster needs a name", kWhatIfHelp);
      request.faster = args[++i];
    } else if (a == "--speedup") {
      char* end = nullptr;
      double k = i + 1 < args.size() ? std::strtod(args[i + 1].c_str(), &end) : 0.0;
      if (i + 1 >= args.size() || end == args[i + 1].c_str() || *end != '\0' || !(k > 0) || k > 1e9)
        return usage_error("--speedup needs a number above 0 (2: twice as fast)", kWhatIfHelp);
      request.speedup = k;
      speedup_given = true;
      ++i;
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("unknown option '" + a + "'", kWhatIfHelp);
    } else if (run.empty()) {
      run = a;
    } else {
      return usage_error("whatif takes one run", kWhatIfHelp);
    }
  }
  if (run.empty()) return usage_error("whatif needs a run", kWhatIfHelp);
  if (speedup_given && request.faster.empty())
    return usage_error("--speedup needs --faster NAME", kWhatIfHelp);
  if (!request.hide_data_wait && !request.overlap_communication && request.faster.empty())
    return usage_error("say what changes: --hide-data-wait, --overlap-communication or --faster NAME",
                       kWhatIfHelp);
  std::string error;
  std::vector<std::string> runs = whatif_runs(run, &error);
  if (runs.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", error.c_str());
    return kFailed;
  }
  int status = kOk;
  for (const std::string& one : runs) {
    trainprof::WhatIfReport r = trainprof::estimate_what_if(one, request);
    if (!r.ok()) {
      std::fprintf(stderr, "trainprof: %s\n", r.error.c_str());
      status = kFailed;
      continue;
    }
    std::fputs(r.text.c_str(), stdout);
  }
  return status;
}

// ---------------------------------------------------------------------------
// cluster

int cmd_cluster(const std::vector<std::string>& args) {
  trainprof::AnalyseOptions options;
  trainprof::ClusterOptions cluster_options;
  std::string path;
  bool mpi = false, progress = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kClusterHelp, stdout);
      return kOk;
    }
    if (a == "--mpi") {
      mpi = true;
      continue;
    }
    if (a == "--progress") {
      progress = true;
      continue;
    }
    if (a == "--full-json") {
      cluster_options.full_json_max_ranks = SIZE_MAX;
      continue;
    }
    if (a == "--database-split-rows") {
      uint64_t rows = 0;
      if (!parse_number(i + 1 < args.size() ? &args[++i] : nullptr, UINT64_MAX / 2, &rows)) {
        return usage_error("--database-split-rows needs a number of rows, at least 1", kClusterHelp);
      }
      cluster_options.database_split_rows = rows;
      continue;
    }
    if (a == "--job-id") {
      if (i + 1 >= args.size() || args[i + 1].empty())
        return usage_error("--job-id needs a job id", kClusterHelp);
      cluster_options.job_id = args[++i];
      continue;
    }
    if (a == "--msprof-layout") {
      if (i + 1 >= args.size() || args[i + 1].empty()) {
        return usage_error("--msprof-layout needs a directory", kClusterHelp);
      }
      cluster_options.msprof_dir = args[++i];
      continue;
    }
    if (a == "--jobs") {
      uint64_t jobs = 0;
      if (!parse_number(i + 1 < args.size() ? &args[++i] : nullptr, kMaxJobs, &jobs)) {
        return usage_error("--jobs needs a number from 1 to " + std::to_string(kMaxJobs), kClusterHelp);
      }
      options.max_workers = static_cast<int>(jobs);
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kClusterHelp);
    if (!path.empty()) return usage_error("only one PATH may be given", kClusterHelp);
    path = a;
  }
  if (path.empty()) return usage_error("cluster needs a PATH", kClusterHelp);
  if (progress || isatty(STDERR_FILENO) != 0) {
    cluster_options.on_stage = [](const std::string& stage, double seconds) {
      std::fprintf(stderr, "[cluster] %s: %.2f s\n", stage.c_str(), seconds);
    };
  }
  if (!mpi) {
    return trainprof::cli::print_cluster_report(trainprof::cluster(path, options, cluster_options)) ? kOk
                                                                                                    : kFailed;
  }
  // A launcher is enough: MPI itself gives the place (the job id matters to
  // analyse --mpi's files only).
  if (trainprof::cli::LaunchPlace place = trainprof::cli::launch_place_from_environment("cluster");
      place.rank < 0) {
    std::fprintf(stderr, "trainprof: %s\n", place.error.c_str());
    return kUsage;
  }
  std::string error;
  std::unique_ptr<trainprof::ClusterExchange> exchange = trainprof::cli::make_mpi_exchange(&error);
  if (exchange == nullptr) {
    std::fprintf(stderr, "trainprof: %s\n", error.c_str());
    return kUsage;
  }
  cluster_options.exchange = exchange.get();
  trainprof::ClusterReport report = trainprof::cluster(path, options, cluster_options);
  if (exchange->index() == 0) return trainprof::cli::print_cluster_report(report) ? kOk : kFailed;
  for (const std::string& w : report.warnings) {
    std::fprintf(stderr, "trainprof: [cluster process %d] warning: %s\n", exchange->index(), w.c_str());
  }
  return kOk;
}

// ---------------------------------------------------------------------------
// report

const char* kReportHelp =
    "usage: trainprof report PATH [PATH_B] [--out FILE]\n"
    "\n"
    "Writes one self-contained HTML page (no network needed to view it) of the\n"
    "analysed runs at or below PATH: per run the advisor's findings, the step-time\n"
    "breakdown, the critical path, the top operators (sortable), memory over time\n"
    "with its peak, the data pipeline and a timeline of the slowest step; for\n"
    "several ranks with a cluster analysis (trainprof cluster), the waiting per\n"
    "rank and the straggler report. Default FILE: RUN/PROFILER_OUTPUT/report.html\n"
    "for a run directory, else PATH/report.html.\n"
    "With PATH_B, both on one page opened by what changed from PATH to PATH_B\n"
    "(trainprof diff); default FILE: PATH_B's diff_report.html, where report.html\n"
    "would go.\n";

int cmd_report(const std::vector<std::string>& args) {
  std::string path, path_b, out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kReportHelp, stdout);
      return kOk;
    }
    if (a == "--out") {
      if (i + 1 >= args.size() || args[i + 1].empty()) return usage_error("--out needs a file", kReportHelp);
      out = args[++i];
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kReportHelp);
    if (!path_b.empty()) return usage_error("at most two PATHs may be given", kReportHelp);
    (path.empty() ? path : path_b) = a;
  }
  if (path.empty()) return usage_error("report needs a PATH", kReportHelp);
  trainprof::ReportResult r =
      path_b.empty() ? trainprof::write_report(path, out) : trainprof::write_diff_report(path, path_b, out);
  if (!r.error.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", r.error.c_str());
    return kFailed;
  }
  std::printf("report of %zu run(s): %s\n", r.runs, r.file.c_str());
  return kOk;
}

// ---------------------------------------------------------------------------
// trainprof options

const char* kOptionsHelp =
    "usage: trainprof options [--markdown]\n"
    "\n"
    "The profiler's options, as TRAINPROF_OPTIONS, a run's profiler_info.json and\n"
    "ProfilerOptions name them: type, default, range or values, whether the\n"
    "dynamic profiler's profiler_config.json sets it, where the Python API sets it,\n"
    "and what it does. --markdown: as the table of docs/GUIDE.md.\n";

// "a|b" -> "a, b": the values of a choice, as a person reads them.
std::string listed(std::string values) {
  for (size_t at = values.find('|'); at != std::string::npos; at = values.find('|', at)) {
    values.replace(at, 1, ", ");
  }
  return values;
}

int cmd_options(const std::vector<std::string>& args) {
  bool markdown = false;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kOptionsHelp, stdout);
      return kOk;
    }
    if (a != "--markdown") return usage_error("unknown option '" + a + "'", kOptionsHelp);
    markdown = true;
  }
  std::vector<trainprof::OptionInfo> options = trainprof::option_list();
  if (markdown) {
    std::puts("| option | type | default | range or values | profiler_config.json | Python | what it does |");
    std::puts("|---|---|---|---|---|---|---|");
    for (const trainprof::OptionInfo& o : options) {
      std::string python = o.python.empty() ? "" : "`" + o.python + "`";
      std::printf("| `%s` | %s | `%s` | %s | %s | %s | %s |\n", o.name.c_str(), o.type.c_str(),
                  o.default_json.c_str(), listed(o.range).c_str(), o.dynamic ? "yes" : "", python.c_str(),
                  o.doc.c_str());
    }
    return kOk;
  }
  for (const trainprof::OptionInfo& o : options) {
    std::printf("%s (%s, default %s%s%s)\n    %s\n", o.name.c_str(), o.type.c_str(), o.default_json.c_str(),
                o.range.empty() ? "" : ", ", listed(o.range).c_str(), o.doc.c_str());
    if (o.dynamic) std::printf("    also a field of profiler_config.json (DynamicProfilerMonitor)\n");
    if (!o.python.empty()) std::printf("    Python: %s\n", o.python.c_str());
  }
  return kOk;
}

// ---------------------------------------------------------------------------
// sql

int cmd_sql(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kSqlHelp, stdout);
      return kOk;
    }
    positional.push_back(a);
  }
  if (positional.size() != 2) return usage_error("sql needs a PATH and a QUERY", kSqlHelp);
  std::string error =
      trainprof::query_cluster_database(positional[0], positional[1], [](const trainprof::QueryRow& row) {
        std::string line = trainprof::query_row_csv(row) + '\n';
        std::fwrite(line.data(), 1, line.size(), stdout);
      });
  if (!error.empty()) {
    std::fprintf(stderr, "trainprof: %s\n", error.c_str());
    return kFailed;
  }
  return kOk;
}

// ---------------------------------------------------------------------------
// mcp

const char* kMcpHelp =
    "usage: trainprof mcp ROOT [--max-answer-kb N]\n"
    "\n"
    "Serves the Model Context Protocol on stdin and stdout (JSON-RPC 2.0, one\n"
    "message a line), so that an agent can read the runs under ROOT. Its tools:\n"
    "  list_runs      the runs at or below a path, analysed or not, their ranks\n"
    "  summary        what `trainprof summary` prints (runs analysed first)\n"
    "  advise         the advisor's findings as JSON, the largest saving first\n"
    "  sql            one read-only statement on a run's or a cluster's trainprof.db\n"
    "  diff           two runs compared per step\n"
    "  critical_path  a step's critical path, times from the step's start, in ms\n"
    "  key_averages   torch.profiler's key_averages() of a run\n"
    "Paths are taken under ROOT and refused outside it (symlinks included); each\n"
    "answer is cut at --max-answer-kb KiB (default 64), saying so. stdout carries\n"
    "the protocol only: whatever else trainprof says goes to stderr.\n"
    "\n"
    "An agent starts it itself; in an MCP client's configuration:\n"
    "  {\"mcpServers\": {\"trainprof\": {\"command\": \"trainprof\",\n"
    "                                \"args\": [\"mcp\", \"/path/to/prof\"]}}}\n"
    "\n"
    "exit status: 0 when stdin ends, 1 ROOT is not a directory or stdout failed, 2 bad usage\n";

int cmd_mcp(const std::vector<std::string>& args) {
  trainprof::McpOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kMcpHelp, stdout);
      return kOk;
    }
    if (a == "--max-answer-kb") {
      char* end = nullptr;
      long kb = i + 1 < args.size() ? std::strtol(args[i + 1].c_str(), &end, 10) : 0;
      if (i + 1 >= args.size() || *end != '\0' || kb < 1 || kb > 1024 * 1024) {
        return usage_error("--max-answer-kb needs a number of KiB in [1, 1048576]", kMcpHelp);
      }
      options.max_answer_bytes = static_cast<size_t>(kb) * 1024;
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kMcpHelp);
    if (!options.root.empty()) return usage_error("only one ROOT may be given", kMcpHelp);
    options.root = a;
  }
  if (options.root.empty()) return usage_error("mcp needs a ROOT directory", kMcpHelp);
  std::unique_ptr<trainprof::McpServer> server;
  try {
    server = std::make_unique<trainprof::McpServer>(options);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "trainprof: %s\n", e.what());
    return kFailed;
  }
  // The protocol's own descriptor; whatever else writes to stdout (an
  // analysis, a library) goes to stderr instead of into the messages.
  std::fflush(stdout);
  int wire = dup(STDOUT_FILENO);
  std::FILE* out = wire >= 0 && dup2(STDERR_FILENO, STDOUT_FILENO) >= 0 ? fdopen(wire, "w") : nullptr;
  if (out == nullptr) {
    std::fprintf(stderr, "trainprof: cannot keep stdout for the protocol: %s\n", std::strerror(errno));
    return kFailed;
  }
  signal(SIGPIPE, SIG_IGN);  // a client gone: a failed write, not a signal
  for (std::string line; std::getline(std::cin, line);) {
    std::string reply = server->handle(line);
    if (reply.empty()) continue;
    reply += '\n';
    if (std::fwrite(reply.data(), 1, reply.size(), out) != reply.size() || std::fflush(out) != 0) {
      std::fprintf(stderr, "trainprof: the client no longer reads: %s\n", std::strerror(errno));
      return kFailed;
    }
  }
  return kOk;
}

int run_command(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("a command is needed", kMainHelp);
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "--version" || cmd == "version") {
    std::printf("trainprof %s\n", std::string(trainprof::version()).c_str());
    return kOk;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kMainHelp, stdout);
    return kOk;
  }
  if (cmd == "analyse" || cmd == "analyze") return cmd_analyse(rest);
  if (cmd == "summary") return cmd_summary(rest);
  if (cmd == "cluster") return cmd_cluster(rest);
  if (cmd == "report") return cmd_report(rest);
  if (cmd == "diff") return cmd_diff(rest);
  if (cmd == "whatif") return cmd_whatif(rest);
  if (cmd == "advise") return cmd_advise(rest);
  if (cmd == "options") return cmd_options(rest);
  if (cmd == "sql") return cmd_sql(rest);
  if (cmd == "mcp") return cmd_mcp(rest);
  if (cmd == "run") {
    std::fputs(
        "trainprof: run is the Python package's command (pip install . of this checkout puts\n"
        "`trainprof` on PATH with it; or: python -m trainprof run SCRIPT [ARGS...])\n",
        stderr);
    return kUsage;
  }
  return usage_error("unknown command '" + cmd + "'", kMainHelp);
}

}  // namespace

int main(int argc, char** argv) {
  // A last resort: whatever the inputs hold, the command says what went
  // wrong instead of aborting.
  try {
    return run_command(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainprof: %s\n", e.what());
    return kFailed;
  }
}
