// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The one table of ProfilerOptions' options: for each, its JSON name
// (TRAINPROF_OPTIONS, profiler_info.json "options"), type, range or values,
// whether the dynamic profiler's profiler_config.json sets it, where the Python
// API sets it, a line of documentation, and how it is read from and written to
// JSON.
//
// Made from it: the TRAINPROF_OPTIONS parser and options_to_json
// (core/options.cc), ProfilerOptions::validate's bounds, option_list() and
// so `trainprof options`, the option table of docs/GUIDE.md and the Python
// API's bounds (its check_option). Checked against it by tests: the dynamic
// config's fields, the Python binding's attributes and the Python API's
// parameters. A new option is a member of ProfilerOptions and a row here.
#ifndef TRAINPROF_CORE_OPTION_TABLE_H_
#define TRAINPROF_CORE_OPTION_TABLE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainprof/options.h"

namespace trainprof::core {

struct OptionSpec {
  const char* name;    // the JSON key
  const char* type;    // "bool", "uint", "string", "strings", "choice", "choices", "schedule"
  const char* range;   // uint: "[min, max]"; choice(s): the values, "|"-separated; else ""
  const char* fields;  // ProfilerOptions' member(s) it sets, ", "-separated
  bool dynamic;        // a field of profiler_config.json (DynamicProfilerMonitor) too
  const char* python;  // where the Python API sets it: "profile(x)", "_ExperimentalConfig(x)", or ""
  const char* doc;     // one line
  // Sets the option from its JSON value; throws std::invalid_argument
  // naming the key (through `bad`) when the value is not one it takes.
  void (*read)(const nlohmann::json& value, const std::string& key, ProfilerOptions& options);
  nlohmann::json (*write)(const ProfilerOptions& options);
};

// Every option, in the order the documentation lists them.
const std::vector<OptionSpec>& option_table();

// The row of `name`, or nullptr.
const OptionSpec* find_option(const std::string& name);

// A "uint" row's bounds, from its range "[min, max]": the one place they
// are written (ProfilerOptions::validate and the Python API read them).
struct UintRange {
  uint64_t min = 0;
  uint64_t max = 0;
  bool holds(uint64_t v) const { return v >= min && v <= max; }
};
UintRange uint_range(const OptionSpec& spec);

// Sets the option of `spec` from its JSON value, a number checked against
// the row's range first; throws std::invalid_argument naming `key`.
void read_option(const OptionSpec& spec, const nlohmann::json& value, const std::string& key,
                 ProfilerOptions& options);

// The value of a true-or-false key; else bad_option naming it.
bool option_bool(const nlohmann::json& value, const std::string& key);

// Throws std::invalid_argument: `TRAINPROF_OPTIONS: key "KEY" WHAT`.
[[noreturn]] void bad_option(const std::string& key, const std::string& what);

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_OPTION_TABLE_H_
