// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Session: one open run directory.
//
// Opening a session creates {output_path}/{prefix}_{timestamp}_trainprof/ with
// raw/ and profiler_info.json, hands the raw file to the flusher and turns
// recording on. Closing turns recording off, has the flusher write everything,
// and completes profiler_info.json. At most one session is open per process;
// exit, SIGTERM and SIGINT flush it (previous signal handlers are chained).
#ifndef TRAINPROF_CORE_SESSION_H_
#define TRAINPROF_CORE_SESSION_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/run_directory.h"
#include "base/safe_file.h"
#include "core/clock.h"
#include "core/flusher.h"
#include "trainprof/options.h"
#include "trainprof/profiler.h"

namespace trainprof {

class Session {
 public:
  // Returns nullptr after logging why (another session open, unwritable path...).
  static std::shared_ptr<Session> open(const ProfilerOptions& options, const std::string& prefix);
  // A flight recorder's session: records into the flusher's ring of
  // `ring_mb` MiB and writes nothing until dump(). nullptr after logging why.
  // A signal that ends the process (a crash, or one whose action is the
  // default) dumps the ring first, from the flusher thread, with the
  // "flight_recorder" object that `crash_trigger(signal)` returns (JSON
  // text; it must not wait for a lock the crashed thread may hold), under
  // its parent_dir ("": output_path), and tells `crash_dumped` where the
  // run went ("" when it could not be written).
  struct CrashDump {
    std::string trigger_json;
    std::string parent_dir;
  };
  using CrashTrigger = std::function<CrashDump(int signal)>;
  using CrashDumped = std::function<void(const std::string& run_dir)>;
  static std::shared_ptr<Session> open_ring(const ProfilerOptions& options, uint32_t ring_mb,
                                            const std::string& prefix, CrashTrigger crash_trigger,
                                            CrashDumped crash_dumped);
  // Ring sessions: writes what the ring holds as a new run directory under
  // the options' output_path, its profiler_info.json holding
  // `flight_recorder_json` (an object) as "flight_recorder", with the time
  // from which the dump is complete added. Returns the run directory, or ""
  // with `error` (nothing is left of a run that could not be written).
  // `extra_files` (name, content) are written beside profiler_info.json; one
  // that cannot be is a warning, not a failed dump. `parent_dir`: where the
  // run goes instead of output_path (an incident of all ranks).
  std::string dump(const std::string& flight_recorder_json, std::string* error,
                   const std::vector<std::pair<std::string, std::string>>& extra_files = {},
                   const std::string& parent_dir = "");
  ~Session();

  // Idempotent; `reason` goes into profiler_info.json ("stop", "exit", ...).
  RunSummary close(std::string_view reason);
  bool is_closed() const;
  const std::string& run_dir() const { return run_dir_; }
  // Writes `name` in the run directory atomically, relative to the directory
  // opened when the session began: a run directory renamed or replaced by a
  // symlink since is not followed. Works after close() too. Returns "" or
  // the error.
  std::string write_run_file(const std::string& name, const std::string& text) const;

  // Records a ProfilerStep#N range on the calling thread (even without CPU
  // activity); `flags`: raw::kStepStartUp, raw::kStepTail.
  static void record_step(int64_t step_number, uint64_t start_ticks, uint64_t end_ticks, uint8_t flags = 0);

 private:
  Session() = default;
  void remove_unopened_run();
  void release_recording_lock();
  // The warning for dropped events: how many, on which threads, and why.
  std::string drop_message(const core::FlushStats& st) const;
  std::string info_json(std::string_view stop_reason, uint64_t stop_realtime_ns, const core::FlushStats& st,
                        bool complete) const;
  base::UniqueFd create_run(const std::string& output_path, const std::string& prefix, std::string* error);
  // dump() with mu_ held.
  std::string dump_locked(const std::string& flight_recorder_json, std::string* error,
                          const std::vector<std::pair<std::string, std::string>>& extra_files,
                          const std::string& parent_dir = "");
  // On the flusher thread, after a signal's flush: a ring session's crash dump.
  void dump_on_signal();
  // What open() and open_ring() share: identity, buffers. False after logging.
  bool set_up(const ProfilerOptions& options, uint32_t extra_buffer_mb);
  // What open() and open_ring() share at the end: recording starts.
  void start_recording(const ProfilerOptions& options);

  mutable std::mutex mu_;
  pid_t pid_ = 0;        // the recording process (a fork() child is another)
  bool opened_ = false;  // the run was fully set up (else close() has nothing to do)
  bool closed_ = false;
  bool ring_ = false;
  std::string output_path_;  // ring sessions: where dumps go
  CrashTrigger crash_trigger_;
  CrashDumped crash_dumped_;
  std::string prefix_;
  std::string run_dir_;
  base::UniqueFd run_fd_;          // the run directory, open for the session's life
  base::UniqueFd recording_lock_;  // flock(LOCK_EX) until close()
  std::string raw_path_;
  std::string options_json_;
  std::string host_;
  int rank_ = 0;
  int world_size_ = 1;
  std::string rank_source_;
  base::JobInfo job_;  // the launcher's job, so that two jobs' runs in one directory are told apart
  core::ClockAnchor anchor_;
  uint64_t start_monotonic_ns_ = 0;
  RunSummary summary_;
};

namespace core {
// Whether a marker in `domain` records under the open session's filter.
bool domain_enabled(std::string_view domain);
}  // namespace core

}  // namespace trainprof

#endif  // TRAINPROF_CORE_SESSION_H_
