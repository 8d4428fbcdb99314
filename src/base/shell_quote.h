// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#ifndef TRAINPROF_BASE_SHELL_QUOTE_H_
#define TRAINPROF_BASE_SHELL_QUOTE_H_

#include <string>

namespace trainprof::base {

// `word` as one shell word, for the commands trainprof's messages suggest
// ("trainprof report PATH"): as it is when it holds only characters no shell
// treats specially, else in single quotes (a quote inside as '\''), so that
// a path with spaces, quotes, '$' or bytes that are not UTF-8 pastes as one.
std::string shell_quote(const std::string& word);

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_SHELL_QUOTE_H_
