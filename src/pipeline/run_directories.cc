// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/run_directories.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/run_directory.h"
#include "raw/format.h"
#include "trainprof/analyse.h"

namespace trainprof {

namespace fs = std::filesystem;

namespace pipeline {

// "a/b/" and "a/./b" name the same directory as "a/b".
fs::path normalized(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

// The analysis lock of a run (kAnalysisLockName): held while an analysis
// reads raw/ and writes PROFILER_OUTPUT, so that two analyses of one run
// never mix their outputs or remove raw/ under each other. A second analysis
// does not wait (an analysis can take minutes): it fails at once, saying so.
base::UniqueFd take_analysis_lock(int run_fd, const std::string& run_path, std::string* error) {
  std::string file = run_path + "/" + base::kAnalysisLockName;
  base::UniqueFd fd(::openat(run_fd, base::kAnalysisLockName,
                             O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "cannot open the analysis lock '" + file +
             "': " + (fd.valid() ? std::string("not a regular file") : std::strerror(errno));
    return {};
  }
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    *error = errno == EWOULDBLOCK ? "another analysis of this run is in progress (it holds '" + file +
                                        "'); run this one again when it has finished"
                                  : "cannot lock '" + file + "': " + std::strerror(errno);
    return {};
  }
  return fd;
}

// Removes raw/ of the run `run_fd` without following a symlink at raw/ or in
// it. Returns "" or what could not be removed.
std::string remove_raw_data(int run_fd) {
  base::UniqueFd raw_fd(base::open_directory_at(run_fd, raw::kRawDirName));
  if (!raw_fd.valid()) return errno == ENOENT ? "" : std::string("cannot open raw/: ") + std::strerror(errno);
  int scan_fd = fcntl(raw_fd.get(), F_DUPFD_CLOEXEC, 0);  // closedir closes it
  DIR* dir = scan_fd >= 0 ? fdopendir(scan_fd) : nullptr;
  if (dir == nullptr) {
    std::string error = std::string("cannot list raw/: ") + std::strerror(errno);
    if (scan_fd >= 0) ::close(scan_fd);
    return error;
  }
  std::string error;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (unlinkat(raw_fd.get(), name.c_str(), 0) != 0 && error.empty()) {
      error = "cannot remove raw/" + name + ": " + std::strerror(errno);
    }
  }
  closedir(dir);
  if (error.empty() && unlinkat(run_fd, raw::kRawDirName, AT_REMOVEDIR) != 0) {
    error = std::string("cannot remove raw/: ") + std::strerror(errno);
  }
  return error;
}

// AnalyseOptions::link_trace_for_peers: "{worker}_{stamp}_trainprof" ->
// "{parent}/{worker}.{stamp}.pt.trace.json", a hard link to the trace
// (TensorBoard's plugin reads the stamp as the span). Returns a warning.
std::string link_trace_for_peers(const fs::path& run, int out_fd) {
  std::string name = run.filename().string();
  const std::string suffix = "_trainprof";
  if (name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  if (size_t us = name.rfind('_'); us != std::string::npos && us + 1 < name.size() &&
                                   name.find_first_not_of("0123456789", us + 1) == std::string::npos) {
    name[us] = '.';
  }
  name += ".pt.trace.json";
  base::UniqueFd parent(::open(run.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent.valid())
    return "cannot open the run's parent directory to link the trace: " + std::string(std::strerror(errno));
  unlinkat(parent.get(), name.c_str(), 0);  // of an earlier analysis
  if (linkat(out_fd, "trace_view.json", parent.get(), name.c_str(), 0) != 0) {
    return "cannot link the trace as " + (run.parent_path() / name).string() +
           " for TensorBoard and HTA: " + std::strerror(errno);
  }
  return "";
}

bool is_analysed(const std::string& run) {
  std::error_code ec;
  return fs::exists(fs::path(run) / "PROFILER_OUTPUT" / "operator_details.csv", ec);
}

std::string analyse_missing(const std::vector<std::string>& runs) {
  std::vector<std::string> missing;
  for (const std::string& run : runs)
    if (!is_analysed(run) && std::find(missing.begin(), missing.end(), run) == missing.end())
      missing.push_back(run);
  if (missing.empty()) return "";
  AnalyseOptions options;
  options.max_workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const RunAnalysis& r : analyse_runs(missing, options).runs) {
    if (!r.ok) return "cannot analyse '" + r.run_dir + "': " + r.error;
  }
  return "";
}

}  // namespace pipeline

namespace {

bool is_run_directory(const fs::path& p) {
  std::error_code ec;
  std::string name = p.filename().string();
  if (name.size() <= 10 || !name.ends_with("_trainprof") || !fs::is_directory(p, ec)) return false;
  return fs::exists(p / "profiler_info.json", ec) || fs::exists(p / raw::kRawDirName, ec);
}

}  // namespace

std::vector<std::string> find_run_directories(const std::string& path) {
  std::vector<std::string> runs;
  std::error_code ec;
  fs::path root = pipeline::normalized(path);
  if (is_run_directory(root)) return {root.string()};
  // A run's outputs or raw data stand for the run: what a reader looking
  // at the tables has at hand.
  if ((root.filename() == "PROFILER_OUTPUT" || root.filename() == raw::kRawDirName) &&
      is_run_directory(root.parent_path()))
    return {root.parent_path().string()};
  if (!fs::is_directory(root, ec)) return runs;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    // A symlink found below PATH is not followed: it could lead anywhere.
    if (it->is_symlink(ec) || !it->is_directory(ec)) continue;
    if (is_run_directory(it->path())) {
      runs.push_back(it->path().lexically_normal().string());
      it.disable_recursion_pending();  // raw/ and PROFILER_OUTPUT/ hold no runs
    }
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::string no_run_directory_error(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "'" + path + "' does not exist";
  return "no trainprof run directory (*_trainprof) at or below '" + path + "'";
}

}  // namespace trainprof
