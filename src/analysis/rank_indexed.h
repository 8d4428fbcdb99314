// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A value per rank, kept by index: ranks are small numbers, and at 10^5 ranks
// the cluster pass looks a rank's entry up once per rank and operation (10^7
// times), where a hash lookup missed the cache at every step. Ranks outside [0,
// kIndexedRanks) go to a map.
#ifndef TRAINPROF_ANALYSIS_RANK_INDEXED_H_
#define TRAINPROF_ANALYSIS_RANK_INDEXED_H_

#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

namespace trainprof::analysis {

template <typename T>
class RankIndexed {
 public:
  static constexpr int kIndexedRanks = 1 << 24;

  // The entry of `rank`, value-initialised when first asked for.
  T& operator[](int rank) {
    if (rank < 0 || rank >= kIndexedRanks) return others_[rank];
    auto r = static_cast<size_t>(rank);
    if (r >= indexed_.size()) indexed_.resize(std::max(r + 1, 2 * indexed_.size()));
    return indexed_[r];
  }

  // Calls f(rank, entry) for each indexed slot (value-initialised where no
  // rank asked for it), then for each other rank's entry.
  template <typename F>
  void for_each(F f) const {
    for (size_t r = 0; r < indexed_.size(); ++r) f(static_cast<int>(r), indexed_[r]);
    for (const auto& [rank, value] : others_) f(rank, value);
  }

 private:
  std::vector<T> indexed_;
  std::map<int, T> others_;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_RANK_INDEXED_H_
