// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A communication group's members, shared by every rank summary that holds the
// same list.
//
// Each member of a group records the group's whole member list, so a group
// of the world appears in every rank's summary: at 100,000 ranks that is
// 400 KB a summary and 40 GB in all for one list. Summaries store and send
// a list as runs of consecutive ranks (a world is one run), and lists are
// interned by their runs: equal lists share one copy, freed with the last
// summary holding it, and reading a summary costs its runs, not its members.
#ifndef TRAINPROF_ANALYSIS_GROUP_MEMBERS_H_
#define TRAINPROF_ANALYSIS_GROUP_MEMBERS_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace trainprof::analysis {

// Ranks first..last, consecutive.
struct MemberRun {
  int32_t first = 0, last = 0;
  bool operator==(const MemberRun&) const = default;
};

class GroupMembers {
 public:
  GroupMembers();  // no member
  // World ranks in group-rank order; an equal list already held anywhere
  // in the process is shared (thread-safe).
  GroupMembers(const std::vector<int32_t>& ranks);  // NOLINT(google-explicit-constructor): a list is members
  GroupMembers(std::initializer_list<int32_t> ranks) : GroupMembers(std::vector<int32_t>(ranks)) {}
  // Ranks first, first + 1, ..., first + count - 1.
  static GroupMembers consecutive(int32_t first, int32_t count);
  // The list of `runs`, into `out`: "" or why not (a run that ends before it
  // starts; more than 2^24 members, more than any job and a bound on what
  // damaged input can make us allocate).
  static std::string from_runs(std::vector<MemberRun> runs, GroupMembers* out);

  const std::vector<int32_t>& list() const { return shared_->list; }
  const std::vector<MemberRun>& runs() const { return shared_->runs; }
  size_t size() const { return shared_->list.size(); }
  bool empty() const { return shared_->list.empty(); }
  int32_t operator[](size_t i) const { return shared_->list[i]; }
  std::vector<int32_t>::const_iterator begin() const { return shared_->list.begin(); }
  std::vector<int32_t>::const_iterator end() const { return shared_->list.end(); }
  bool operator==(const GroupMembers& other) const {
    return shared_ == other.shared_ || runs() == other.runs();
  }
  bool operator==(const std::vector<int32_t>& other) const { return list() == other; }

  struct Shared {
    std::vector<MemberRun> runs;
    std::vector<int32_t> list;
  };

 private:
  explicit GroupMembers(std::vector<MemberRun> runs);  // interned; the runs checked
  std::shared_ptr<const Shared> shared_;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_GROUP_MEMBERS_H_
