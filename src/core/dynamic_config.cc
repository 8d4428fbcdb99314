// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// profiler_config.json: the text a user edits to start and stop collection of a
// running job (include/trainprof/dynamic.h).
#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

#include "base/close_names.h"
#include "base/json_limits.h"
#include "trainprof/dynamic.h"

namespace trainprof {
namespace {

using nlohmann::json;

[[noreturn]] void bad_field(const std::string& field, const std::string& what, const json& value) {
  throw std::invalid_argument(std::string(kDynamicConfigFileName) + ": \"" + field + "\" " + what + ", got " +
                              value.dump());
}

bool as_bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) bad_field(field, "must be true or false", v);
  return v.get<bool>();
}

// An integer in [low, high]; MindSpore writes every number as an integer.
int64_t as_int(const json& v, const std::string& field, int64_t low, int64_t high) {
  if (!v.is_number_integer()) bad_field(field, "must be an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(high))
    bad_field(field, "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "]", v);
  int64_t x = v.get<int64_t>();
  if (x < low || x > high)
    bad_field(field, "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "]", v);
  return x;
}

std::vector<std::string> as_strings(const json& v, const std::string& field) {
  if (!v.is_array()) bad_field(field, "must be a list of strings", v);
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) bad_field(field, "must be a list of strings", v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "CPU", "gpu", "ProfilerActivity.CPU" (how torch_npu records them).
std::set<Activity> as_activities(const json& v, const std::string& field) {
  std::set<Activity> out;
  for (std::string name : as_strings(v, field)) {
    if (size_t dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (name == "CPU")
      out.insert(Activity::CPU);
    else if (name == "GPU" || name == "CUDA")
      out.insert(Activity::GPU);
    else
      bad_field(field, "must list \"CPU\" and/or \"GPU\"", v);
  }
  if (out.empty()) bad_field(field, "must name at least one activity", v);
  return out;
}

// ["cpu", "mem", "disk", "network"], as torch_npu's dynamic config.
std::set<HostSystem> as_host_sys(const json& v, const std::string& field) {
  std::set<HostSystem> out;
  for (std::string name : as_strings(v, field)) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    HostSystem part;
    if (!parse_host_system(name, &part))
      bad_field(field, "must list \"cpu\", \"mem\", \"disk\", \"network\"", v);
    out.insert(part);
  }
  return out;
}

ProfilerLevel as_level(const json& v, const std::string& field) {
  switch (as_int(v, field, -1, 2)) {
    case 1: return ProfilerLevel::Level1;
    case 2: return ProfilerLevel::Level2;
    default: return ProfilerLevel::Level0;  // -1: not controlled, the default level
  }
}

// MindSpore's fields that describe Ascend hardware or MindSpore internals:
// accepted, and reported when they ask for something (their "off" value is
// the one given here).
bool is_inert_field(const std::string& field, const json& v) {
  if (field == "aicore_metrics" || field == "profile_framework") return !(v.is_number_integer() && v == -1);
  if (field == "parallel_strategy" || field == "mstx") return !(v.is_boolean() && !v.get<bool>());
  return false;
}

void apply_field(DynamicConfig& c, const std::string& field, const json& v) {
  ProfilerOptions& o = c.options;
  if (field == "start_step")
    c.start_step = as_int(v, field, -1, INT64_MAX / 2);
  else if (field == "stop_step")
    c.stop_step = as_int(v, field, -1, INT64_MAX / 2);
  else if (field == "analyse_mode")
    c.analyse_mode = static_cast<int>(as_int(v, field, -1, 1));
  else if (field == "profiler_level")
    o.profiler_level = as_level(v, field);
  else if (field == "with_stack")
    o.with_stack = as_bool(v, field);
  else if (field == "profile_communication")
    o.profile_communication = as_bool(v, field);
  else if (field == "data_simplification")
    o.data_simplification = as_bool(v, field);
  else if (field == "record_shapes")
    o.record_shapes = as_bool(v, field);
  else if (field == "profile_memory")
    o.profile_memory = as_bool(v, field);
  else if (field == "with_modules")
    o.with_modules = as_bool(v, field);
  else if (field == "with_flops")
    o.with_flops = as_bool(v, field);
  else if (field == "data_process")
    o.data_process = as_bool(v, field);
  else if (field == "activities")
    o.activities = as_activities(v, field);
  else if (field == "host_sys")
    o.host_sys = as_host_sys(v, field);
  else if (field == "mstx_domain_include")
    o.mstx_domain_include = as_strings(v, field);
  else if (field == "mstx_domain_exclude")
    o.mstx_domain_exclude = as_strings(v, field);
  else if (field == "aicore_metrics" || field == "profile_framework" || field == "parallel_strategy" ||
           field == "mstx") {
    if (is_inert_field(field, v)) c.ignored.push_back(field);
  } else {
    // A newer MindSpore field, a typo: said, not fatal (the job goes on).
    c.unknown.push_back(field + base::did_you_mean(field, dynamic_config_fields()));
  }
}

}  // namespace

const std::vector<std::string>& dynamic_config_fields() {
  static const std::vector<std::string> fields = {"start_step",
                                                  "stop_step",
                                                  "aicore_metrics",
                                                  "profiler_level",
                                                  "profile_framework",
                                                  "analyse_mode",
                                                  "profile_communication",
                                                  "parallel_strategy",
                                                  "with_stack",
                                                  "data_simplification",
                                                  "mstx",
                                                  "record_shapes",
                                                  "profile_memory",
                                                  "with_modules",
                                                  "with_flops",
                                                  "data_process",
                                                  "activities",
                                                  "host_sys",
                                                  "mstx_domain_include",
                                                  "mstx_domain_exclude"};
  return fields;
}

DynamicConfig parse_dynamic_config(std::string_view text) {
  json root;
  if (std::string error = base::parse_json_limited(text, &root); !error.empty())
    throw std::invalid_argument(std::string(kDynamicConfigFileName) + " is not valid JSON: " + error);
  if (!root.is_object())
    throw std::invalid_argument(std::string(kDynamicConfigFileName) + " must hold a JSON object");
  DynamicConfig c;
  c.options.data_simplification = true;  // MindSpore's default for this file
  for (const auto& [field, value] : root.items()) apply_field(c, field, value);
  if (c.start_step == 0)
    bad_field("start_step", "must be -1 (nothing) or a step >= 1 (steps count from 1)", 0);
  if (c.start_step > 0 && c.stop_step < c.start_step)
    bad_field("stop_step", "must be >= start_step (" + std::to_string(c.start_step) + ")", c.stop_step);
  if (!c.options.mstx_domain_include.empty() && !c.options.mstx_domain_exclude.empty())
    bad_field("mstx_domain_exclude", "cannot be given with mstx_domain_include", root["mstx_domain_exclude"]);
  return c;
}

std::string default_dynamic_config() {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  // MindSpore's fields, in its order, then trainprof's.
  j["start_step"] = -1;
  j["stop_step"] = -1;
  j["aicore_metrics"] = -1;
  j["profiler_level"] = -1;
  j["profile_framework"] = -1;
  j["analyse_mode"] = -1;
  j["profile_communication"] = false;
  j["parallel_strategy"] = false;
  j["with_stack"] = false;
  j["data_simplification"] = true;
  j["record_shapes"] = false;
  j["profile_memory"] = false;
  j["activities"] = nlohmann::ordered_json::array({"CPU"});
  j["host_sys"] = nlohmann::ordered_json::array();
  j["mstx"] = false;
  return base::json_text(j, 2) + "\n";
}

}  // namespace trainprof
