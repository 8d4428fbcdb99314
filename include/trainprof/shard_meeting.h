// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Where processes that each analyse a share of the same runs
// (AnalyseOptions::shard_index / shard_count) meet, so that the first runs the
// cluster pass once the others are done. They meet through files, not through a
// communication library:
// PATH/cluster_analysis_output/.analyse_mpi_{job}/{shard}.done or .failed. PATH
// must be on a file system every process sees (as the runs already are).
// `trainprof analyse --mpi` is built on it.
//
//   ShardMeeting meeting(path, job, shards);
//   if (!meeting.ok()) ... meeting.error() ...
//   meeting.mark(my_shard, all_ok, runs_analysed);
//   // on the first process, until every shard is marked or it gives up:
//   int failed = 0;
//   std::vector<bool> marked = meeting.marked(&failed);
//   ...
//   std::string error;
//   ShardMeeting::Decision d = meeting.decide(
//       every_shard_marked ? ShardMeeting::Decision::kSpread : ShardMeeting::Decision::kAlone, &error);
//   // on the others, until the first has decided (or, given up on, decide kAlone):
//   ShardMeeting::Decision d = meeting.decision();
//   ...
//   meeting.remove();  // the first, once the others have read it
#ifndef TRAINPROF_SHARD_MEETING_H_
#define TRAINPROF_SHARD_MEETING_H_

#include <cstddef>
#include <string>
#include <vector>

namespace trainprof {

class ShardMeeting {
 public:
  // Opens the meeting place of `job` (any text: it is made safe as a file
  // name) for `shards` shards, creating it where missing; never through a
  // symbolic link planted on the way.
  ShardMeeting(const std::string& path, const std::string& job, int shards);
  ~ShardMeeting();
  ShardMeeting(const ShardMeeting&) = delete;
  ShardMeeting& operator=(const ShardMeeting&) = delete;

  bool ok() const { return error_.empty(); }
  // Why the processes cannot meet there ("" when they can).
  const std::string& error() const { return error_; }
  // Where they meet (PATH/cluster_analysis_output).
  const std::string& output_dir() const { return output_dir_; }

  // Marks shard `shard` done (`succeeded`: every run of it analysed) after
  // analysing `runs` runs. Returns "" or the error.
  std::string mark(int shard, bool succeeded, size_t runs);
  // The shards marked so far, by index; `failed`: how many of them failed.
  std::vector<bool> marked(int* failed) const;
  // How the cluster pass goes on, as the first process decides once every
  // shard is marked or it gave up waiting: spread over the processes (all
  // of them are there to take part), or run by the first alone (the others
  // end). kNone: not decided yet.
  enum class Decision { kNone, kAlone, kSpread };
  // The first decision made stands: `wanted` is written unless one is there
  // already (another process that gave up waiting for the first decides
  // kAlone, and the first then follows it). Returns the decision in force;
  // kAlone, with `*error` set, when none could be written.
  Decision decide(Decision wanted, std::string* error);
  // The decision in force: kNone while none is made; kAlone for "alone",
  // for anything else found in its place, and once the place is removed.
  Decision decision() const;
  // Removes the marks, the decision and the meeting place (once the wait is
  // over, and the others have read the decision).
  void remove();

 private:
  int shards_ = 0;
  int output_fd_ = -1;   // PATH/cluster_analysis_output
  int meeting_fd_ = -1;  // its .analyse_mpi_{job}
  std::string name_;
  std::string output_dir_;
  std::string error_;
};

}  // namespace trainprof

#endif  // TRAINPROF_SHARD_MEETING_H_
