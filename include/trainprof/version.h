// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The library's version, which every output records (profiler_info.json
// "trainprof_version").
#ifndef TRAINPROF_VERSION_H_
#define TRAINPROF_VERSION_H_

#include <string_view>

namespace trainprof {

// The library version, "MAJOR.MINOR.PATCH".
std::string_view version();

}  // namespace trainprof

#endif  // TRAINPROF_VERSION_H_
