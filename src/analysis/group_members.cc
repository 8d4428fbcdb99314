// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/group_members.h"

#include <mutex>
#include <unordered_map>
#include <utility>

namespace trainprof::analysis {
namespace {

constexpr uint64_t kMaxGroupMembers = uint64_t{1} << 24;

std::vector<MemberRun> runs_of(const std::vector<int32_t>& ranks) {
  std::vector<MemberRun> runs;
  for (int32_t r : ranks) {
    if (!runs.empty() && runs.back().last != INT32_MAX && runs.back().last + 1 == r) {
      runs.back().last = r;
    } else {
      runs.push_back({r, r});
    }
  }
  return runs;
}

uint64_t hash_of(const std::vector<MemberRun>& runs) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the runs
  for (const MemberRun& run : runs) {
    for (int32_t v : {run.first, run.last}) {
      h ^= static_cast<uint32_t>(v);
      h *= 1099511628211ull;
    }
  }
  return h;
}

// The lists alive, by their runs' hash. An entry whose list is gone is
// dropped when its hash comes again.
struct Interned {
  std::mutex mutex;
  std::unordered_multimap<uint64_t, std::weak_ptr<const GroupMembers::Shared>> lists;
};

Interned& interned() {
  static Interned* table = new Interned();  // never destroyed: summaries may outlive statics
  return *table;
}

}  // namespace

GroupMembers::GroupMembers() : GroupMembers(std::vector<MemberRun>{}) {}

GroupMembers::GroupMembers(const std::vector<int32_t>& ranks) : GroupMembers(runs_of(ranks)) {}

GroupMembers GroupMembers::consecutive(int32_t first, int32_t count) {
  if (count <= 0) return GroupMembers();
  return GroupMembers(std::vector<MemberRun>{{first, first + (count - 1)}});
}

std::string GroupMembers::from_runs(std::vector<MemberRun> runs, GroupMembers* out) {
  uint64_t members = 0;
  for (const MemberRun& run : runs) {
    if (run.last < run.first) return "a group's run of ranks ends before it starts";
    members += static_cast<uint64_t>(static_cast<int64_t>(run.last) - run.first) + 1;
    if (members > kMaxGroupMembers) return "a group has more than 2^24 ranks";
  }
  // Runs as written may be split where they need not be ([0, 3], [4, 7]):
  // the canonical form, so that equal lists meet.
  std::vector<MemberRun> joined;
  for (const MemberRun& run : runs) {
    if (!joined.empty() && joined.back().last != INT32_MAX && joined.back().last + 1 == run.first) {
      joined.back().last = run.last;
    } else {
      joined.push_back(run);
    }
  }
  *out = GroupMembers(std::move(joined));
  return "";
}

GroupMembers::GroupMembers(std::vector<MemberRun> runs) {
  uint64_t h = hash_of(runs);
  Interned& table = interned();
  std::lock_guard<std::mutex> lock(table.mutex);
  auto [first, last] = table.lists.equal_range(h);
  for (auto it = first; it != last;) {
    std::shared_ptr<const Shared> held = it->second.lock();
    if (held == nullptr) {
      it = table.lists.erase(it);
      continue;
    }
    if (held->runs == runs) {
      shared_ = std::move(held);
      return;
    }
    ++it;
  }
  auto made = std::make_shared<Shared>();
  for (const MemberRun& run : runs) {
    for (int64_t r = run.first; r <= run.last; ++r) made->list.push_back(static_cast<int32_t>(r));
  }
  made->runs = std::move(runs);
  shared_ = std::move(made);
  table.lists.emplace(h, shared_);
}

}  // namespace trainprof::analysis
