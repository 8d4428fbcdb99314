// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include <optional>
#include <stdexcept>
#include <string>

#include "base/json_limits.h"
#include "core/option_table.h"
#include "core/options_json.h"
#include "trainprof/env.h"
#include "trainprof/options.h"

namespace trainprof {

using nlohmann::json;

std::string_view to_string(Activity activity) {
  return activity == Activity::CPU ? "CPU" : "GPU";
}

std::string_view to_string(ProfilerLevel level) {
  switch (level) {
    case ProfilerLevel::None: return "None";
    case ProfilerLevel::Level0: return "Level0";
    case ProfilerLevel::Level1: return "Level1";
    case ProfilerLevel::Level2: return "Level2";
  }
  return "?";
}

std::string_view to_string(HostSystem part) {
  switch (part) {
    case HostSystem::Cpu: return "cpu";
    case HostSystem::Mem: return "mem";
    case HostSystem::Disk: return "disk";
    case HostSystem::Network: return "network";
  }
  return "?";
}

bool parse_host_system(std::string_view name, HostSystem* part) {
  for (HostSystem p : {HostSystem::Cpu, HostSystem::Mem, HostSystem::Disk, HostSystem::Network}) {
    if (name == to_string(p)) {
      *part = p;
      return true;
    }
  }
  return false;
}

void ProfilerOptions::validate() const {
  if (output_path.empty()) throw std::invalid_argument("ProfilerOptions.output_path must not be empty");
  for (const core::OptionSpec& row : core::option_table()) {
    if (std::string_view(row.type) != "uint") continue;
    uint64_t v = row.write(*this).get<uint64_t>();
    if (!core::uint_range(row).holds(v)) {
      throw std::invalid_argument(std::string("ProfilerOptions.") + row.fields + " must be in " + row.range +
                                  ", got " + std::to_string(v));
    }
  }
  if (!export_text && !export_db)
    throw std::invalid_argument("ProfilerOptions: export_text or export_db (or both) must be set");
  if (schedule) schedule->validate();
}

namespace core {

json options_to_json(const ProfilerOptions& o) {
  json j = json::object();
  for (const OptionSpec& spec : option_table()) j[spec.name] = spec.write(o);
  return j;
}

}  // namespace core

std::vector<OptionInfo> option_list() {
  const ProfilerOptions defaults;
  std::vector<OptionInfo> list;
  for (const core::OptionSpec& spec : core::option_table()) {
    list.push_back(OptionInfo{spec.name, spec.type, spec.write(defaults).dump(), spec.range, spec.fields,
                              spec.dynamic, spec.python, spec.doc});
  }
  return list;
}

namespace {

// A number `key` of "flight_recorder" in [min, max].
double flight_number(const json& v, const std::string& key, double min, double max) {
  if (!v.is_number() || !(v.get<double>() >= min) || !(v.get<double>() <= max)) {
    core::bad_option(
        key, "must be a number in [" + json(min).dump() + ", " + json(max).dump() + "], got " + v.dump());
  }
  return v.get<double>();
}

// An integer `key` of "flight_recorder" in [min, max].
uint32_t flight_uint(const json& v, const std::string& key, uint32_t min, uint32_t max) {
  if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
    core::bad_option(key, "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                              "], got " + v.dump());
  }
  return static_cast<uint32_t>(v.get<int64_t>());
}

// "flight_recorder": true, false, or an object of FlightRecorderOptions' fields.
bool read_flight_recorder(const json& v, FlightRecorderOptions* o) {
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_object())
    core::bad_option("flight_recorder", "must be true, false or an object, got " + v.dump());
  for (const auto& [field, value] : v.items()) {
    const std::string key = "flight_recorder." + field;
    if (field == "ring_mb") {
      o->ring_mb = flight_uint(value, key, 1, 1024 * 1024);
    } else if (field == "slow_step_factor") {
      o->slow_step_factor = flight_number(value, key, 0, 1e6);
    } else if (field == "slow_step_window") {
      o->slow_step_window = flight_uint(value, key, 1, 1'000'000);
    } else if (field == "slow_step_min_steps") {
      o->slow_step_min_steps = flight_uint(value, key, 1, 1'000'000);
    } else if (field == "cooldown_s") {
      o->cooldown_s = flight_number(value, key, 0, 1e9);
    } else if (field == "hang_timeout_s") {
      o->hang_timeout_s = flight_number(value, key, 0, 1e9);
    } else if (field == "dump_signal") {
      o->dump_signal = static_cast<int>(flight_uint(value, key, 0, 64));
    } else if (field == "dump_file") {
      if (!value.is_string()) core::bad_option(key, "must be a string, got " + value.dump());
      o->dump_file = value.get<std::string>();
    } else if (field == "analyse") {
      o->analyse = core::option_bool(value, key);
    } else if (field == "hang_native_stacks") {
      o->hang_native_stacks = core::option_bool(value, key);
    } else if (field == "health_steps") {
      o->health_steps = flight_uint(value, key, 1, 1'000'000);
    } else if (field == "metrics_file" || field == "metrics_address") {
      if (!value.is_string()) core::bad_option(key, "must be a string, got " + value.dump());
      (field == "metrics_file" ? o->metrics_file : o->metrics_address) = value.get<std::string>();
    } else if (field == "metrics_interval_s") {
      o->metrics_interval_s = flight_number(value, key, 0.01, 86400);
    } else if (field == "metrics_port") {
      o->metrics_port = static_cast<int>(flight_uint(value, key, 0, 65535));
    } else if (field == "all_ranks") {
      o->all_ranks = core::option_bool(value, key);
    } else if (field == "incident_wait_s") {
      o->incident_wait_s = flight_number(value, key, 0, 86400);
    } else if (field == "check_loss" || field == "check_gradients") {
      (field == "check_loss" ? o->check_loss : o->check_gradients) = core::option_bool(value, key);
    } else if (field == "loss_spike_factor") {
      o->loss_spike_factor = flight_number(value, key, 0, 1e9);
    } else {
      core::bad_option(key,
                       "is unknown; known keys: ring_mb, slow_step_factor, slow_step_window, "
                       "slow_step_min_steps, cooldown_s, hang_timeout_s, dump_signal, dump_file, analyse, "
                       "hang_native_stacks, health_steps, metrics_file, metrics_interval_s, metrics_port, "
                       "metrics_address, all_ranks, incident_wait_s, check_loss, check_gradients, "
                       "loss_spike_factor");
    }
  }
  return true;
}

}  // namespace

EnvOptions parse_options_json(std::string_view text) {
  json root;
  std::string error = base::parse_json_limited(text, &root);
  if (!error.empty())
    throw std::invalid_argument(std::string(kOptionsEnvVar) + " is not valid JSON: " + error);
  if (!root.is_object()) {
    throw std::invalid_argument(std::string(kOptionsEnvVar) + " must be a JSON object, got " + root.dump());
  }
  if (!root.contains("start")) {
    throw std::invalid_argument(std::string(kOptionsEnvVar) +
                                ": key \"start\" is mandatory (true to profile this process)");
  }
  EnvOptions env;
  ProfilerOptions& o = env.options;
  bool analyse_given = false, flight_analyse_given = false;
  for (const auto& [key, v] : root.items()) {
    if (key == "start") {
      env.start = core::option_bool(v, key);
    } else if (key == "analyse") {
      env.analyse = core::option_bool(v, key);
      analyse_given = true;
    } else if (key == "flight_recorder") {
      env.flight_recorder = read_flight_recorder(v, &env.flight);
      flight_analyse_given = v.is_object() && v.contains("analyse");
    } else if (const core::OptionSpec* spec = core::find_option(key)) {
      core::read_option(*spec, v, key, o);
    } else {
      std::string known = "start, analyse, flight_recorder";
      for (const core::OptionSpec& row : core::option_table()) known += std::string(", ") + row.name;
      core::bad_option(key, "is unknown; known keys: " + known);
    }
  }
  if (env.flight_recorder) {
    if (o.schedule)
      core::bad_option("schedule", "is not used by a flight recorder (it records all the time)");
    if (analyse_given && !flight_analyse_given) env.flight.analyse = env.analyse;
  }
  try {
    o.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(kOptionsEnvVar) + ": " + e.what());
  }
  if (env.flight_recorder) env.flight.profiler = o;
  return env;
}

}  // namespace trainprof
