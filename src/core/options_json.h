// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// ProfilerOptions <-> JSON (profiler_info.json, TRAINPROF_OPTIONS).
#ifndef TRAINPROF_CORE_OPTIONS_JSON_H_
#define TRAINPROF_CORE_OPTIONS_JSON_H_

#include <nlohmann/json.hpp>

#include "trainprof/options.h"

namespace trainprof::core {

nlohmann::json options_to_json(const ProfilerOptions& options);

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_OPTIONS_JSON_H_
