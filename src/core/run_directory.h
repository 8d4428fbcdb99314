// Copyright trainprof authors. Where a run goes and who recorded it.
#ifndef TRAINPROF_CORE_RUN_DIRECTORY_H_
#define TRAINPROF_CORE_RUN_DIRECTORY_H_

#include <cstdint>
#include <string>

namespace trainprof::detail {

// Rank and world size from the launcher's environment: RANK/WORLD_SIZE,
// OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS (first found).
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  std::string source = "default";  // which variables gave them
};
RankInfo detect_rank();

std::string host_name();

// "{prefix}_{yyyymmddHHMMSSmmm}_trainprof" for `realtime_ns`.
std::string run_directory_name(const std::string& prefix, uint64_t realtime_ns);

// Creates `path` and its missing parents with mode 0700. Returns "" or an
// error message naming the path and the reason.
std::string make_private_directories(const std::string& path);

// Creates a fresh run directory under `parent` (0700), bumping the timestamp
// by a millisecond while the name is taken. Returns the path, or "" and sets
// `error`.
std::string create_run_directory(const std::string& parent, const std::string& prefix, std::string* error);

// Writes `text` to `path` atomically (temporary file + rename).
std::string write_file_atomically(const std::string& path, const std::string& text);

}  // namespace trainprof::detail

#endif  // TRAINPROF_CORE_RUN_DIRECTORY_H_
