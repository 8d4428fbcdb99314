// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#ifndef TRAINPROF_BASE_CLOSE_NAMES_H_
#define TRAINPROF_BASE_CLOSE_NAMES_H_

#include <string>
#include <string_view>
#include <vector>

namespace trainprof::base {

// The names of `candidates` a mistyped `word` may have meant, closest first,
// at most `limit`: those within a few edits of it (a third of its length,
// at least 1) and those that contain it or that it contains, ignoring case.
// For messages such as "unknown key 'start_stpe' (did you mean start_step?)".
std::vector<std::string> close_names(std::string_view word, const std::vector<std::string>& candidates,
                                     size_t limit = 3);

// close_names as message text: " (did you mean a, b?)", or "" when none.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_CLOSE_NAMES_H_
