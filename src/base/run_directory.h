// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Where a run goes and who recorded it.
#ifndef TRAINPROF_BASE_RUN_DIRECTORY_H_
#define TRAINPROF_BASE_RUN_DIRECTORY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "trainprof/frontend.h"

namespace trainprof::base {

// Rank and world size: those a communication runtime gave
// (set_runtime_rank), else from the launcher's environment: RANK/WORLD_SIZE,
// OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS (first found).
// The largest world a rank, a rank summary or an incident may name (16.7 M
// ranks, far above any job run today): what reads a world size from outside
// bytes refuses more, so a damaged file cannot make it list billions of
// missing ranks.
constexpr int kMaxWorldSize = 1 << 24;

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  std::string source = "default";  // which variables gave them
};
RankInfo detect_rank();

// The job this process belongs to, as its launcher names it, so that the
// runs of two jobs written to one directory are told apart (the cluster
// pass analyses one job). The first set of: TRAINPROF_JOB_ID (the user's
// own), TORCHELASTIC_RUN_ID (torchrun's rendezvous id; its default "none"
// names no job), PMIX_NAMESPACE and OMPI_MCA_ess_base_jobid (an mpirun),
// SLURM_JOB_ID with SLURM_STEP_ID (an srun step), LSB_JOBID, PBS_JOBID,
// FLUX_JOB_ID. The launcher nearest the process comes first: two mpiruns in
// one Slurm allocation are two jobs. When none of them is set, the job the
// front end's runtime agreed on (detail::set_runtime_job), if it did; else
// an empty id. At most kMaxJobIdBytes bytes; bytes other than printable
// ASCII become '?'.
constexpr size_t kMaxJobIdBytes = 128;
struct JobInfo {
  std::string id;
  std::string source;  // the variable(s) that gave it
};
JobInfo detect_job();
// detail::set_runtime_job's part here: what detect_job falls back on.
// Lock-free to read (profiler_info.json may be written from a signal handler).
void remember_runtime_job(const std::string& id, const std::string& source);
// `raw` as a job id: cut to kMaxJobIdBytes, bytes other than printable
// ASCII as '?' (a job id read back from a file is held to the same rule).
std::string clean_job_id(std::string_view raw);

// set_runtime_rank: trainprof/frontend.h.

std::string host_name();

// "yyyymmddHHMMSSmmm", local time, for `realtime_ns`.
std::string local_stamp(uint64_t realtime_ns);

// "{prefix}_{local_stamp}_trainprof" for `realtime_ns`.
std::string run_directory_name(const std::string& prefix, uint64_t realtime_ns);

// `path` made absolute against the current directory now, so that a later
// chdir() of the program moves nothing (leading "./" dropped). An absolute
// path, or one the current directory cannot be found for, is returned as it is.
std::string absolute_path(const std::string& path);

// Creates `path` and its missing parents with mode 0700. Returns "" or an
// error message naming the path and the reason.
std::string make_private_directories(const std::string& path);

// Creates a fresh run directory under `parent` (0700), bumping the timestamp
// by a millisecond while the name is taken, and opens it O_DIRECTORY|
// O_NOFOLLOW: every file of the run is then created relative to that
// descriptor. Returns the descriptor and sets `path`, or -1 and sets `error`.
int create_run_directory(const std::string& parent, const std::string& prefix, std::string* path,
                         std::string* error);

// The recording lock: the process recording a run holds flock(LOCK_EX) on
// this file of its run directory from before raw/ exists until the run is
// closed (or the process ends). Analysis respects it: a run whose lock is
// held is partial, and its raw data is never removed.
inline constexpr const char* kRecordingLockName = ".recording.lock";
// The analysis lock: one analysis of a run at a time writes its outputs.
inline constexpr const char* kAnalysisLockName = ".analysis.lock";

// Creates and locks the recording lock in the fresh run directory `run_fd`.
// Returns the lock's descriptor (close it, or flock(LOCK_UN), to release),
// or -1 and sets `error`.
int take_recording_lock(int run_fd, std::string* error);

// Whether a process holds the recording lock of the run directory `run_fd`.
bool run_is_being_recorded(int run_fd);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_RUN_DIRECTORY_H_
