// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof report: the analysed runs under a path (two, compared, for a
// diff report) made into one page by the exporter, written whole.
#include <fcntl.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/safe_file.h"
#include "base/shell_quote.h"
#include "exporter/html_report.h"
#include "trainprof/analyse.h"
#include "trainprof/diff.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

// The analysed runs at or below `path`, or an error naming why there are none.
std::vector<std::string> analysed_runs(const std::string& path, std::string* error) {
  std::vector<std::string> runs = find_run_directories(path);
  std::vector<std::string> analysed;
  for (const std::string& run : runs) {
    std::error_code ec;
    if (fs::exists(fs::path(run) / "PROFILER_OUTPUT" / "step_trace_time.csv", ec)) analysed.push_back(run);
  }
  if (analysed.empty()) {
    *error = runs.empty() ? no_run_directory_error(path)
                          : "no analysed run at or below '" + path + "' (trainprof analyse " +
                                base::shell_quote(path) + ")";
  }
  return analysed;
}

// Where a report of `path` goes by default: a run's PROFILER_OUTPUT, or the
// directory of several.
std::string default_file(const std::string& path, const std::vector<std::string>& analysed,
                         const char* name) {
  bool single = analysed.size() == 1 && fs::path(analysed[0]) == fs::path(path);
  return single ? (fs::path(path) / "PROFILER_OUTPUT" / name).string() : (fs::path(path) / name).string();
}

// Writes `html` to `file`, replaced whole.
std::string write_page(const std::string& file, const std::string& html) {
  fs::path p(file);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  base::UniqueFd fd(base::open_directory_at(AT_FDCWD, dir));
  if (!fd.valid()) return "cannot open the directory of " + file;
  return base::write_file_atomically_at(fd.get(), p.filename().string(), html, file);
}

}  // namespace

ReportResult write_report(const std::string& path, const std::string& output_file) {
  ReportResult result;
  std::vector<std::string> analysed = analysed_runs(path, &result.error);
  if (analysed.empty()) return result;
  result.file = !output_file.empty() ? output_file : default_file(path, analysed, "report.html");
  result.error = write_page(result.file, exporter::report_page(path, analysed, result.file));
  result.runs = analysed.size();
  return result;
}

ReportResult write_diff_report(const std::string& path_a, const std::string& path_b,
                               const std::string& output_file) {
  ReportResult result;
  DiffReport d = diff_runs(path_a, path_b);  // analyses what is not
  if (!d.ok()) {
    result.error = d.error;
    return result;
  }
  std::vector<std::string> a = analysed_runs(path_a, &result.error);
  std::vector<std::string> b = analysed_runs(path_b, &result.error);
  if (a.empty() || b.empty()) return result;
  result.file = !output_file.empty() ? output_file : default_file(path_b, b, "diff_report.html");
  result.error = write_page(result.file, exporter::diff_report_page(d, path_a, a, path_b, b, result.file));
  result.runs = a.size() + b.size();
  return result;
}

}  // namespace trainprof
