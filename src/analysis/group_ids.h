// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Communication group names numbered in the order first seen, for the cluster
// pass's keys: keyed by name, each of the 10^7 collective calls of 10^5 ranks
// would compare strings in an ordered map; numbered, it hashes a number, and
// the names still give the order.
#ifndef TRAINPROF_ANALYSIS_GROUP_IDS_H_
#define TRAINPROF_ANALYSIS_GROUP_IDS_H_

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace trainprof::analysis {

class GroupIds {
 public:
  // The number of `name`, given it when first seen.
  size_t of(const std::string& name) {
    auto [it, fresh] = ids_.try_emplace(name, names_.size());
    if (fresh) names_.push_back(&it->first);
    return it->second;
  }
  const std::string& name(size_t id) const { return *names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  std::unordered_map<std::string, size_t> ids_;
  std::vector<const std::string*> names_;  // the map's keys: nodes stay put
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_GROUP_IDS_H_
