// Copyright trainprof authors.
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
  if (buffer_mb < 1) throw std::invalid_argument("ProfilerOptions.buffer_mb must be >= 1 (MiB)");
  if (buffer_mb > 1024 * 1024) {
    throw std::invalid_argument("ProfilerOptions.buffer_mb must be <= 1048576 (MiB), got " +
                                std::to_string(buffer_mb));
  }
  if (flush_interval_ms < 1 || flush_interval_ms > 60000) {
    throw std::invalid_argument("ProfilerOptions.flush_interval_ms must be in [1, 60000], got " +
                                std::to_string(flush_interval_ms));
  }
  if (host_sys_interval_ms < 1 || host_sys_interval_ms > 60000) {
    throw std::invalid_argument("ProfilerOptions.host_sys_interval_ms must be in [1, 60000], got " +
                                std::to_string(host_sys_interval_ms));
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
  for (const auto& [key, v] : root.items()) {
    if (key == "start") {
      env.start = core::option_bool(v, key);
    } else if (key == "analyse") {
      env.analyse = core::option_bool(v, key);
    } else if (const core::OptionSpec* spec = core::find_option(key)) {
      spec->read(v, key, o);
    } else {
      std::string known = "start, analyse";
      for (const core::OptionSpec& row : core::option_table()) known += std::string(", ") + row.name;
      core::bad_option(key, "is unknown; known keys: " + known);
    }
  }
  try {
    o.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(kOptionsEnvVar) + ": " + e.what());
  }
  return env;
}

}  // namespace trainprof
