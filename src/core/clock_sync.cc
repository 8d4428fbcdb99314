// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/clock_sync.h"

#include <fcntl.h>

#include <mutex>

#include "base/json_limits.h"
#include "base/log.h"
#include "base/run_directory.h"
#include "base/safe_file.h"

namespace trainprof::core {
namespace {

std::mutex g_mutex;
int g_reference_rank = 0;
std::vector<detail::ClockSyncPoint> g_points;
std::vector<std::string> g_closed_runs;
constexpr size_t kMaxClosedRuns = 4096;  // the amended ones: the last 4096 runs of the process
int64_t g_exchanges_started = 0, g_exchanges_running = 0, g_exchanges_failed = 0;
std::vector<std::string> g_failures;
constexpr size_t kMaxFailures = 8;  // the first ones: later ones repeat them

nlohmann::json points_json() {
  if (g_points.empty() && g_exchanges_started == 0) return nullptr;
  nlohmann::json points = nlohmann::json::array();
  for (const detail::ClockSyncPoint& p : g_points) {
    points.push_back({{"realtime_ns", p.realtime_ns}, {"offset_ns", p.offset_ns}, {"error_ns", p.error_ns}});
  }
  nlohmann::json sync = {{"reference_rank", g_reference_rank},
                         {"method",
                          "ping-pong with the reference rank (MPI, or torch.distributed's store), the "
                          "shortest of 10 round trips"},
                         {"points", points}};
  if (g_exchanges_started > 0) {
    sync["exchanges"] = {{"started", g_exchanges_started},
                         {"running", g_exchanges_running},
                         {"failed", g_exchanges_failed},
                         {"failures", g_failures}};
  }
  return sync;
}

// Rewrites a closed run's profiler_info.json with `change` applied (false:
// nothing to change); `what` names the change in a warning.
template <typename Change>
void amend(const std::string& run_dir, const char* what, Change change) {
  base::UniqueFd dir(base::open_directory_at(AT_FDCWD, run_dir));
  if (!dir.valid()) return;  // moved or removed since: nothing to amend
  std::string text = base::read_regular_file_at(dir.get(), "profiler_info.json", /*follow=*/false);
  nlohmann::json info;
  if (text.empty() || !base::parse_json_limited(text, &info).empty() || !info.is_object()) return;
  if (!change(info)) return;
  std::string error = base::write_file_atomically_at(
      dir.get(), "profiler_info.json",
      info.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
      run_dir + "/profiler_info.json");
  if (!error.empty()) base::log_warning(std::string("cannot add ") + what + " to a closed run: " + error);
}

void amend(const std::string& run_dir, const nlohmann::json& sync) {
  amend(run_dir, "the clock alignment", [&](nlohmann::json& info) {
    info["clock_sync"] = sync;
    return true;
  });
}

// Applies `change` to the state, then rewrites the closed runs' clock_sync.
template <typename Change>
void change_and_amend(Change change) noexcept {
  try {
    std::vector<std::string> runs;
    nlohmann::json sync;
    {
      std::lock_guard lock(g_mutex);
      change();
      runs = g_closed_runs;
      sync = points_json();
    }
    for (const std::string& run : runs) amend(run, sync);
  } catch (...) {
  }
}

}  // namespace

}  // namespace trainprof::core

namespace trainprof::detail {

void add_clock_sync_point(int reference_rank, const detail::ClockSyncPoint& point) noexcept {
  core::change_and_amend([&] {
    core::g_reference_rank = reference_rank;
    core::g_points.push_back(point);
  });
}

void note_clock_exchange_started() noexcept {
  core::change_and_amend([] {
    ++core::g_exchanges_started;
    ++core::g_exchanges_running;
  });
}

void set_runtime_job(const std::string& id, const char* source) noexcept {
  try {
    base::remember_runtime_job(id, source != nullptr ? source : "runtime");
    base::JobInfo job = base::detect_job();  // the environment's, when it names one
    std::vector<std::string> runs;
    {
      std::lock_guard lock(core::g_mutex);
      runs = core::g_closed_runs;
    }
    for (const std::string& run : runs) {
      core::amend(run, "the job id", [&](nlohmann::json& info) {
        if (info.contains("job") || job.id.empty()) return false;
        info["job"] = job.id;
        info["job_source"] = job.source;
        return true;
      });
    }
  } catch (...) {
  }
}

void note_clock_exchange_ended(bool failed, const std::string& reason) noexcept {
  core::change_and_amend([&] {
    if (core::g_exchanges_running > 0) --core::g_exchanges_running;
    if (!failed) return;
    ++core::g_exchanges_failed;
    if (core::g_failures.size() < core::kMaxFailures) core::g_failures.push_back(reason.substr(0, 500));
  });
}

}  // namespace trainprof::detail

namespace trainprof::core {

nlohmann::json clock_sync_json() {
  std::lock_guard lock(g_mutex);
  return points_json();
}

void note_closed_run(const std::string& run_dir) noexcept {
  try {
    std::lock_guard lock(g_mutex);
    if (g_closed_runs.size() == kMaxClosedRuns) g_closed_runs.erase(g_closed_runs.begin());
    g_closed_runs.push_back(run_dir);
  } catch (...) {
  }
}

}  // namespace trainprof::core
