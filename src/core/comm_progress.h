// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// How far this process got in each group's collectives: the last one it entered
// and the last one that returned.
//
// When a job hangs, the ranks blocked in a collective have entered it and
// the rank that never came has not: comparing what each rank entered names
// the collective (group, sequence number) and the missing rank, which the
// recorded events cannot (a call that never returned was never recorded).
// The collectors note every collective whether or not a run records (a
// lock and a scan of a few entries: collectives take microseconds at
// least), numbered as their COMM events are.
#ifndef TRAINPROF_CORE_COMM_PROGRESS_H_
#define TRAINPROF_CORE_COMM_PROGRESS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainprof::core {

// `group` and `name` are interned (they outlive the process's collectives).
void collective_entered(const char* group, uint32_t sequence, const char* name) noexcept;
void collective_returned(const char* group, uint32_t sequence) noexcept;

struct GroupProgress {
  std::string group;
  int64_t entered = -1;   // sequence of the last collective entered (-1: none)
  int64_t returned = -1;  // and of the last one that returned
  std::string entered_name;
  uint64_t entered_realtime_ns = 0;  // when the last one was entered, Unix time
};

// Every group this process called a collective of (at most 64 groups are
// followed; the first ones), in the order first seen.
std::vector<GroupProgress> comm_progress();

// Forgets every group (tests).
void reset_comm_progress_for_testing();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_COMM_PROGRESS_H_
