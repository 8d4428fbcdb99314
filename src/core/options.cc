// Copyright trainprof authors.
#include <optional>
#include <stdexcept>
#include <string>

#include "base/json_limits.h"
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

namespace detail {

json options_to_json(const ProfilerOptions& o) {
  json activities = json::array();
  for (Activity a : o.activities) activities.push_back(std::string(to_string(a)));
  json host_sys = json::array();
  for (HostSystem h : o.host_sys) host_sys.push_back(std::string(to_string(h)));
  json export_type = json::array();
  if (o.export_text) export_type.push_back("text");
  if (o.export_db) export_type.push_back("db");
  json j = {
      {"output_path", o.output_path},
      {"start_profile", o.start_profile},
      {"activities", activities},
      {"profile_memory", o.profile_memory},
      {"record_shapes", o.record_shapes},
      {"with_stack", o.with_stack},
      {"with_modules", o.with_modules},
      {"with_flops", o.with_flops},
      {"data_process", o.data_process},
      {"profile_communication", o.profile_communication},
      {"sync_enable", o.sync_enable},
      {"profiler_level", std::string(to_string(o.profiler_level))},
      {"mstx_domain_include", o.mstx_domain_include},
      {"mstx_domain_exclude", o.mstx_domain_exclude},
      {"data_simplification", o.data_simplification},
      {"export_type", export_type},
      {"host_sys", host_sys},
      {"host_sys_interval_ms", o.host_sys_interval_ms},
      {"buffer_mb", o.buffer_mb},
      {"flush_interval_ms", o.flush_interval_ms},
      {"metadata_limit_bytes", o.metadata_limit_bytes},
  };
  if (o.schedule) {
    j["schedule"] = {{"wait", o.schedule->wait},
                     {"warmup", o.schedule->warmup},
                     {"active", o.schedule->active},
                     {"repeat", o.schedule->repeat},
                     {"skip_first", o.schedule->skip_first}};
  } else {
    j["schedule"] = nullptr;
  }
  return j;
}

}  // namespace detail

namespace {

[[noreturn]] void bad(const std::string& key, const std::string& what) {
  throw std::invalid_argument(std::string(kOptionsEnvVar) + ": key \"" + key + "\" " + what);
}

bool get_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) bad(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

uint64_t get_uint(const json& v, const std::string& key, uint64_t max) {
  bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (!v.is_number_integer() || negative) bad(key, "must be a non-negative integer, got " + v.dump());
  uint64_t x = v.get<uint64_t>();
  if (x > max) bad(key, "must be <= " + std::to_string(max) + ", got " + v.dump());
  return x;
}

// "schedule": {"wait": W, "active": A, ...} (warmup, repeat, skip_first
// default to 0) or null; the keys of options_to_json's "schedule".
std::optional<Schedule> get_schedule(const json& v, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object())
    bad(key, "must be an object {\"wait\": W, \"warmup\": W, \"active\": A, ...} or null, got " + v.dump());
  Schedule s{};
  for (const auto& [field, x] : v.items()) {
    int value = static_cast<int>(get_uint(x, key + "." + field, 0x7fffffff));
    if (field == "wait")
      s.wait = value;
    else if (field == "warmup")
      s.warmup = value;
    else if (field == "active")
      s.active = value;
    else if (field == "repeat")
      s.repeat = value;
    else if (field == "skip_first")
      s.skip_first = value;
    else
      bad(key, "has unknown field \"" + field + "\" (known: wait, warmup, active, repeat, skip_first)");
  }
  if (!v.contains("active")) bad(key, "needs \"active\" (recorded steps per cycle, >= 1)");
  return s;
}

std::vector<std::string> get_strings(const json& v, const std::string& key) {
  if (!v.is_array()) bad(key, "must be an array of strings, got " + v.dump());
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) bad(key, "must be an array of strings, got element " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

EnvOptions parse_options_json(std::string_view text) {
  json root;
  std::string error = detail::parse_json_limited(text, &root);
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
      env.start = get_bool(v, key);
    } else if (key == "analyse") {
      env.analyse = get_bool(v, key);
    } else if (key == "schedule") {
      o.schedule = get_schedule(v, key);
    } else if (key == "output_path") {
      if (!v.is_string()) bad(key, "must be a string, got " + v.dump());
      o.output_path = v.get<std::string>();
    } else if (key == "activities") {
      o.activities.clear();
      for (const std::string& a : get_strings(v, key)) {
        if (a == "CPU")
          o.activities.insert(Activity::CPU);
        else if (a == "GPU")
          o.activities.insert(Activity::GPU);
        else
          bad(key, "has unknown activity \"" + a + "\" (known: \"CPU\", \"GPU\")");
      }
    } else if (key == "start_profile") {
      o.start_profile = get_bool(v, key);
    } else if (key == "profile_memory") {
      o.profile_memory = get_bool(v, key);
    } else if (key == "record_shapes") {
      o.record_shapes = get_bool(v, key);
    } else if (key == "with_stack") {
      o.with_stack = get_bool(v, key);
    } else if (key == "with_modules") {
      o.with_modules = get_bool(v, key);
    } else if (key == "with_flops") {
      o.with_flops = get_bool(v, key);
    } else if (key == "data_process") {
      o.data_process = get_bool(v, key);
    } else if (key == "profile_communication") {
      o.profile_communication = get_bool(v, key);
    } else if (key == "sync_enable") {
      o.sync_enable = get_bool(v, key);
    } else if (key == "data_simplification") {
      o.data_simplification = get_bool(v, key);
    } else if (key == "profiler_level") {
      std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s == "None")
        o.profiler_level = ProfilerLevel::None;
      else if (s == "Level0")
        o.profiler_level = ProfilerLevel::Level0;
      else if (s == "Level1")
        o.profiler_level = ProfilerLevel::Level1;
      else if (s == "Level2")
        o.profiler_level = ProfilerLevel::Level2;
      else
        bad(key, "must be one of \"None\", \"Level0\", \"Level1\", \"Level2\", got " + v.dump());
    } else if (key == "mstx_domain_include") {
      o.mstx_domain_include = get_strings(v, key);
    } else if (key == "mstx_domain_exclude") {
      o.mstx_domain_exclude = get_strings(v, key);
    } else if (key == "export_type") {
      o.export_text = o.export_db = false;
      for (const std::string& name : get_strings(v, key)) {
        if (name == "text") {
          o.export_text = true;
        } else if (name == "db") {
          o.export_db = true;
        } else {
          bad(key, "has unknown format \"" + name + "\" (known: \"text\", \"db\")");
        }
      }
      if (!o.export_text && !o.export_db) bad(key, "must name \"text\", \"db\" or both");
    } else if (key == "host_sys") {
      o.host_sys.clear();
      for (const std::string& name : get_strings(v, key)) {
        HostSystem part;
        if (!parse_host_system(name, &part))
          bad(key, "has unknown part \"" + name + "\" (known: \"cpu\", \"mem\", \"disk\", \"network\")");
        o.host_sys.insert(part);
      }
    } else if (key == "host_sys_interval_ms") {
      o.host_sys_interval_ms = static_cast<uint32_t>(get_uint(v, key, 60000));
    } else if (key == "buffer_mb") {
      o.buffer_mb = static_cast<uint32_t>(get_uint(v, key, 1024 * 1024));
    } else if (key == "flush_interval_ms") {
      o.flush_interval_ms = static_cast<uint32_t>(get_uint(v, key, 60000));
    } else if (key == "metadata_limit_bytes") {
      o.metadata_limit_bytes = get_uint(v, key, ~0ull);
    } else {
      bad(key,
          "is unknown; known keys: start, analyse, schedule, output_path, start_profile, activities, "
          "profile_memory, "
          "record_shapes, with_stack, with_modules, with_flops, data_process, profile_communication, "
          "sync_enable, profiler_level, mstx_domain_include, mstx_domain_exclude, data_simplification, "
          "export_type, "
          "host_sys, "
          "host_sys_interval_ms, buffer_mb, flush_interval_ms, metadata_limit_bytes");
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
