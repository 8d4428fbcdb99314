// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Analysis: raw runs to timeline and tables.
//
//   trainprof::AnalyseReport report = trainprof::analyse("./data");
//   for (const auto& run : report.runs)
//     if (!run.ok) std::cerr << run.run_dir << ": " << run.error << "\n";
//
// `path` is one run directory ({...}_trainprof) or any ancestor of run
// directories: each run is analysed on its own (one worker process each, at
// most max_workers at a time), and one failing run does not stop the others.
// Outputs go to {run}/PROFILER_OUTPUT/ (see docs/OUTPUTS.md).
#ifndef TRAINPROF_ANALYSE_H_
#define TRAINPROF_ANALYSE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainprof/cluster_exchange.h"

namespace trainprof {

struct AnalyseOptions {
  // Indent the JSON outputs for reading by eye.
  bool pretty = false;
  // Only these steps (consecutive step numbers) in every output; empty: all.
  std::vector<int64_t> step_list;
  // Remove raw/ after a successful analysis.
  bool data_simplification = false;
  // What is written (MindSpore's export_type): text, the timeline JSON and
  // the CSV tables; db, PROFILER_OUTPUT/trainprof.db (docs/DB_SCHEMA.md); or
  // both. profiler_info.json, profiler_metadata.json and rank_summary.json
  // are written either way.
  bool export_text = true;
  bool export_db = false;
  // The timeline's formats, with export_text: trace_view.json (Kineto's
  // Chrome trace JSON, cut at trace_size_limit_bytes) and trace_view.pftrace
  // (Perfetto's protobuf trace, about a tenth of its size, never cut).
  bool trace_json = true;
  bool trace_perfetto = true;
  // Each step's critical path (critical_path.csv, the timeline's track) and
  // the what-if estimates made from it; false leaves them out.
  bool critical_path = true;
  // The advisor's findings (profiler_info.json's "advice", docs/ADVICE.md):
  // false leaves them out (`trainprof advise` analyses again to make them).
  bool advise = true;
  // Runs analysed at once; 0 means cores / 2, at least 1.
  int max_workers = 0;
  // Threads each run's analysis uses: its raw data decoded on one while the
  // passes and output writers of each window of time run side by side on
  // the others. 0 means every core this process may run on, shared out
  // among the runs analysed at once. Outputs do not depend on it.
  int threads = 0;
  // trace_view.json is cut at a whole step so that it stays under this size.
  uint64_t trace_size_limit_bytes = 500ull << 20;
  // The analysis holds about this many slices (ranges and operators, 16
  // bytes each) at a time: it reads the raw data once to plan windows of
  // time, then again window by window (docs/ARCHITECTURE.md). 0 holds the
  // whole run at once. The tables and trace_view.json do not depend on it;
  // trace_view.pftrace and trainprof.db hold the same slices in another
  // order (packets written thread by thread per window; row ids).
  uint64_t window_slices = 1u << 20;
  // After a successful analysis, also name the run's trace where
  // TensorBoard's profiler plugin and HTA look for it: a hard link
  // {run's parent}/{worker}.{timestamp}.pt.trace.json to
  // PROFILER_OUTPUT/trace_view.json (torch's tensorboard_trace_handler's
  // layout). trace_handler() sets it.
  bool link_trace_for_peers = false;
  // Called after each run finishes (from the calling thread): done, total.
  std::function<void(size_t, size_t)> on_progress;
  // Of the runs found (sorted), analyse only every shard_count-th one from
  // shard_index: how `trainprof analyse --mpi` spreads the runs over the
  // processes of a job. A shard may get no run (report.runs empty, ok).
  int shard_count = 1;
  int shard_index = 0;
};

struct RunAnalysis {
  std::string run_dir;
  bool ok = false;
  std::string error;                  // why it failed (when !ok)
  std::vector<std::string> warnings;  // truncated raw data, trace cut, ...
  uint64_t events = 0;                // events analysed
  double seconds = 0;                 // wall time of this run's analysis
};

struct AnalyseReport {
  std::vector<RunAnalysis> runs;
  std::string error;  // set when nothing could be analysed (no run under path, ...)
  bool ok() const;    // no error and every run ok
};

AnalyseReport analyse(const std::string& path, const AnalyseOptions& options = {});
// The same for the run directories `runs` themselves (no search below
// them, no shards): `trainprof diff` analyses both sides' runs at once.
AnalyseReport analyse_runs(const std::vector<std::string>& runs, const AnalyseOptions& options = {});

// Run directories at or below `path` (sorted); a run directory's own
// subdirectories are not searched.
std::vector<std::string> find_run_directories(const std::string& path);

// Why `path` has no run directory at or below it, as every command says it:
// "'PATH' does not exist" or "no trainprof run directory (*_trainprof) at or
// below 'PATH'".
std::string no_run_directory_error(const std::string& path);

// A terminal report of an analysed run (what `trainprof summary` prints): the
// top operators and ranges by self time, the step-time breakdown per step,
// where the output files are. Says so when the run is not analysed yet.
std::string summarize_run(const std::string& run_dir);

// report.html: one self-contained page (inline CSS, SVG and script; no
// network when viewed) of the analysed runs at or below `path`: per run the
// step-time breakdown as stacked bars with its table, the top operators
// (sortable), the allocator's total over time with its peak, the data
// pipeline's stages and a timeline of the slowest step; for a parent of
// several ranks with a cluster analysis, each rank's waiting and the
// straggler report. Written to `output_file`, else {run}/PROFILER_OUTPUT/
// report.html for one run directory, {path}/report.html for a parent.
struct ReportResult {
  std::string error;  // empty on success
  std::string file;   // where it was written
  size_t runs = 0;    // analysed runs in it
};
ReportResult write_report(const std::string& path, const std::string& output_file = "");
// Two runs (or jobs' directories) on one page, opened by what changed from
// A to B (diff_runs, trainprof/diff.h); by default B's diff_report.html
// (PROFILER_OUTPUT/ of a run, or the directory of several).
ReportResult write_diff_report(const std::string& path_a, const std::string& path_b,
                               const std::string& output_file = "");

struct ClusterOptions {
  // Also lay the ranks' tables out the way msprof-analyze (MindSpore's
  // cluster tool) reads them in text mode, under this directory (made when
  // missing; empty: not): one {worker}_{stamp}_ascend_pt/ per rank with
  // profiler_info_{rank}.json and ASCEND_PROFILER_OUTPUT/{step_trace_time.csv,
  // communication.json, communication_matrix.json}. Then
  // `msprof-analyze cluster -d DIR -m all` works on it.
  std::string msprof_dir;
  // Analyse the runs not analysed yet first (with the AnalyseOptions), and
  // again those whose clock alignment changed after their analysis (an
  // exchange with rank 0 that ended later); false: leave the first out and
  // use the second as they are, each with a warning (`analyse --mpi`
  // analysed every run already, and one that failed there would only fail
  // again).
  bool analyse_missing = true;
  // The job to analyse when the runs are of several (each run records its
  // launcher's job id: TRAINPROF_JOB_ID, torchrun's TORCHELASTIC_RUN_ID,
  // mpirun's PMIX_NAMESPACE, Slurm's SLURM_JOB_ID.SLURM_STEP_ID, ...; its
  // profiler_info.json "job"). Empty: the job with the most ranks, the
  // latest started among equals; the report names the others, left out.
  // A job no run recorded is an error.
  std::string job_id;
  // Spread the pass over the processes this connects (cluster_exchange.h;
  // nullptr: this process alone). Every process calls cluster() with the
  // same path and options; each reads its share of the runs (and analyses
  // those of them still to analyse) and process 0 writes the outputs and
  // returns the report (the others return an empty one, or their warnings).
  ClusterExchange* exchange = nullptr;
  // The communication tables of every rank and operation in msprof-analyze's
  // JSON layout (cluster_communication.json, cluster_communication_matrix.json,
  // each rank's communication.json and communication_matrix.json, about
  // 1.1 KB a rank and operation) and a timeline of every rank are written for
  // jobs of at most this many ranks (1,024: msprof-analyze's own limit).
  // Above, those tables are in cluster_analysis_output/trainprof.db only, and
  // the timeline draws the straggler and the ranks the others waited for
  // most (64). SIZE_MAX: always (`--full-json`).
  size_t full_json_max_ranks = 1024;
  // Spread over processes, with at least this many collectives and
  // transfers recorded, trainprof.db's communication table is split over
  // up to 8 files (trainprof.db.part1 ... beside trainprof.db, which names
  // them) that as many processes write at once: SQLite writes a file on one
  // core, about 2.3 us a row (24 M rows at 100,000 ranks: 55 s). `trainprof
  // sql` and trainprof.open_cluster_database() join them again. SIZE_MAX:
  // always one file.
  size_t database_split_rows = 4000000;
  // Called on process 0 as each stage of the pass ends (from the calling
  // thread): what was done ("read 1024 summaries", "wrote
  // cluster_communication.json") and the seconds it took. The command
  // prints them, so that a pass of minutes shows where it is.
  std::function<void(const std::string& stage, double seconds)> on_stage;
};

// The cluster analysis of the runs of several ranks at or below `path`
// (those never analysed are analysed first, with `options`): every
// collective matched across its group's ranks, how long each rank waited
// at them and for whom, and the straggler with its cause. Writes
// {path}/cluster_analysis_output/: straggler_report.txt (the text below),
// cluster_analysis.json, cluster_step_trace_time.csv (every rank's steps),
// cluster_critical_path.csv, cluster_communication_summary.json (per group
// and operation the distributions of wait, transit and bandwidth; the
// slowest operations and links in full), trainprof.db (every rank's part in
// every operation, SQLite) and the timeline; for jobs of at most
// ClusterOptions::full_json_max_ranks also cluster_communication.json (each
// collective's and transfer's wait and transit per rank),
// cluster_communication_matrix.json (bytes, time and bandwidth per link) and
// into each rank's PROFILER_OUTPUT/ its communication.json and
// communication_matrix.json (their waits need every rank's data, so the
// cluster pass writes them).
struct ClusterReport {
  std::string error;  // nothing could be done (no run, no communication, unwritable output)
  std::vector<std::string> warnings;
  std::string text;                // the report as `trainprof cluster` prints it
  std::string output_dir;          // {path}/cluster_analysis_output
  int straggler = -1;              // the rank the others wait for, -1: none stands out
  std::string cause;               // the straggler's: "compute", "data loading", "communication" or "unknown"
  std::vector<int> missing_ranks;  // of the world, with no analysed run with communication
  bool ok() const { return error.empty(); }
};
ClusterReport cluster(const std::string& path, const AnalyseOptions& options = {},
                      const ClusterOptions& cluster_options = {});

// Runs `sql` (read-only) on a cluster's trainprof.db with its part files
// joined into one `communication` (ClusterOptions::database_split_rows):
// `on_row` gets the column names once, then each row (NULL: std::nullopt).
// `path`: the database, or a directory holding it (or holding
// cluster_analysis_output/trainprof.db). Returns "" or the error (a part
// missing or of another pass is named).
using QueryRow = std::vector<std::optional<std::string>>;
std::string query_cluster_database(const std::string& path, const std::string& sql,
                                   const std::function<void(const QueryRow& row)>& on_row);
// A row as a line of CSV (no line break): a field quoted when it holds a
// comma, a quote or a line break; NULL an empty field.
std::string query_row_csv(const QueryRow& row);

// Parses "3-5" or "3,4,5" (or "7") into step numbers; throws
// std::invalid_argument naming the problem.
std::vector<int64_t> parse_step_list(const std::string& text);

}  // namespace trainprof

#endif  // TRAINPROF_ANALYSE_H_
