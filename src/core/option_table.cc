// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/option_table.h"

#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>

#include "trainprof/env.h"

namespace trainprof::core {
namespace {

using nlohmann::json;

uint64_t get_uint(const json& v, const std::string& key, uint64_t max) {
  bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (!v.is_number_integer() || negative) bad_option(key, "must be a non-negative integer, got " + v.dump());
  uint64_t x = v.get<uint64_t>();
  if (x > max) bad_option(key, "must be <= " + std::to_string(max) + ", got " + v.dump());
  return x;
}

std::vector<std::string> get_strings(const json& v, const std::string& key) {
  if (!v.is_array()) bad_option(key, "must be an array of strings, got " + v.dump());
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) bad_option(key, "must be an array of strings, got element " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "schedule": {"wait": W, "active": A, ...} (warmup, repeat, skip_first
// default to 0) or null.
std::optional<Schedule> get_schedule(const json& v, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object())
    bad_option(key,
               "must be an object {\"wait\": W, \"warmup\": W, \"active\": A, ...} or null, got " + v.dump());
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
      bad_option(key,
                 "has unknown field \"" + field + "\" (known: wait, warmup, active, repeat, skip_first)");
  }
  if (!v.contains("active")) bad_option(key, "needs \"active\" (recorded steps per cycle, >= 1)");
  return s;
}

json schedule_json(const std::optional<Schedule>& s) {
  if (!s) return nullptr;
  return {{"wait", s->wait},
          {"warmup", s->warmup},
          {"active", s->active},
          {"repeat", s->repeat},
          {"skip_first", s->skip_first}};
}

// A boolean member: its row's read and write.
#define TRAINPROF_BOOL_OPTION(member)                                                                 \
  +[](const json& v, const std::string& key, ProfilerOptions& o) { o.member = option_bool(v, key); }, \
      +[](const ProfilerOptions& o) { return json(o.member); }

// An unsigned member, taken when its type holds it; its row's range is
// checked by read_option and ProfilerOptions::validate.
#define TRAINPROF_UINT_OPTION(member)                                                                      \
  +[](const json& v, const std::string& key, ProfilerOptions& o) {                                         \
    o.member =                                                                                             \
        static_cast<decltype(o.member)>(get_uint(v, key, std::numeric_limits<decltype(o.member)>::max())); \
  },                                                                                                       \
      +[](const ProfilerOptions& o) { return json(o.member); }

std::vector<OptionSpec> make_table() {
  return {
      {"output_path", "string", "", "output_path", false, "",
       "parent of the run directories; relative: resolved when the profiler is made",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         if (!v.is_string()) bad_option(key, "must be a string, got " + v.dump());
         o.output_path = v.get<std::string>();
       },
       +[](const ProfilerOptions& o) { return json(o.output_path); }},
      {"start_profile", "bool", "", "start_profile", false, "profile(start_profile)",
       "start recording when the profiler is made (Python's `profile` defaults to `false`, as "
       "torch.profiler: recording starts at `start()` / `with`)",
       TRAINPROF_BOOL_OPTION(start_profile)},
      {"activities", "choices", "CPU|GPU", "activities", true, "profile(activities)",
       "what is recorded: the host (operators, ranges) and the GPU (CUPTI)",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         o.activities.clear();
         for (const std::string& a : get_strings(v, key)) {
           if (a == "CPU")
             o.activities.insert(Activity::CPU);
           else if (a == "GPU")
             o.activities.insert(Activity::GPU);
           else
             bad_option(key, "has unknown activity \"" + a + "\" (known: \"CPU\", \"GPU\")");
         }
       },
       +[](const ProfilerOptions& o) {
         json a = json::array();
         for (Activity x : o.activities) a.push_back(std::string(to_string(x)));
         return a;
       }},
      {"schedule", "schedule", "", "schedule", false, "profile(schedule)",
       "{wait, warmup, active, repeat, skip_first} in steps, or null: record from start to stop",
       +[](const json& v, const std::string& key, ProfilerOptions& o) { o.schedule = get_schedule(v, key); },
       +[](const ProfilerOptions& o) { return schedule_json(o.schedule); }},
      {"profile_memory", "bool", "", "profile_memory", true, "profile(profile_memory)",
       "every allocation and free of the framework's allocators, by operator",
       TRAINPROF_BOOL_OPTION(profile_memory)},
      {"record_shapes", "bool", "", "record_shapes", true, "profile(record_shapes)",
       "operators' input shapes and types", TRAINPROF_BOOL_OPTION(record_shapes)},
      {"with_stack", "bool", "", "with_stack", true, "profile(with_stack)",
       "operators' call stacks (Python's, else native, symbolized at analysis)",
       TRAINPROF_BOOL_OPTION(with_stack)},
      {"with_modules", "bool", "", "with_modules", true, "profile(with_modules)",
       "operators' module hierarchy (the front end's: nn.Module)", TRAINPROF_BOOL_OPTION(with_modules)},
      {"with_flops", "bool", "", "with_flops", true, "profile(with_flops)",
       "FLOPs of conv2d, mm, addmm, bmm, baddbmm, add, mul", TRAINPROF_BOOL_OPTION(with_flops)},
      {"data_process", "bool", "", "data_process", true, "profile(data_process)",
       "data-pipeline stages (dataset, transform, collate, the loop's wait)",
       TRAINPROF_BOOL_OPTION(data_process)},
      {"profile_communication", "bool", "", "profile_communication", true, "",
       "communication calls of the framework (torch.distributed); MPI's are recorded by libtrainprof_mpi",
       TRAINPROF_BOOL_OPTION(profile_communication)},
      {"sync_enable", "bool", "", "sync_enable", false, "profile(sync_enable)",
       "each outermost operator waits for the GPU, so its time includes the device's",
       TRAINPROF_BOOL_OPTION(sync_enable)},
      {"profiler_level", "choice", "None|Level0|Level1|Level2", "profiler_level", true,
       "_ExperimentalConfig(profiler_level)",
       "how much the framework collectors record (Level1: every call's inputs and communication)",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
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
           bad_option(key, "must be one of \"None\", \"Level0\", \"Level1\", \"Level2\", got " + v.dump());
       },
       +[](const ProfilerOptions& o) { return json(std::string(to_string(o.profiler_level))); }},
      {"mstx_domain_include", "strings", "", "mstx_domain_include", true,
       "_ExperimentalConfig(mstx_domain_include)", "marker domains recorded (empty: all but the excluded)",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         o.mstx_domain_include = get_strings(v, key);
       },
       +[](const ProfilerOptions& o) { return json(o.mstx_domain_include); }},
      {"mstx_domain_exclude", "strings", "", "mstx_domain_exclude", true,
       "_ExperimentalConfig(mstx_domain_exclude)", "marker domains not recorded",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         o.mstx_domain_exclude = get_strings(v, key);
       },
       +[](const ProfilerOptions& o) { return json(o.mstx_domain_exclude); }},
      {"data_simplification", "bool", "", "data_simplification", true,
       "_ExperimentalConfig(data_simplification)", "remove raw/ after a successful analysis",
       TRAINPROF_BOOL_OPTION(data_simplification)},
      {"export_type", "choices", "text|db", "export_text, export_db", false,
       "_ExperimentalConfig(export_type)",
       "what the analysis writes: the timeline and CSV tables, trainprof.db (SQLite), or both",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         o.export_text = o.export_db = false;
         for (const std::string& name : get_strings(v, key)) {
           if (name == "text")
             o.export_text = true;
           else if (name == "db")
             o.export_db = true;
           else
             bad_option(key, "has unknown format \"" + name + "\" (known: \"text\", \"db\")");
         }
         if (!o.export_text && !o.export_db) bad_option(key, "must name \"text\", \"db\" or both");
       },
       +[](const ProfilerOptions& o) {
         json e = json::array();
         if (o.export_text) e.push_back("text");
         if (o.export_db) e.push_back("db");
         return e;
       }},
      {"host_sys", "choices", "cpu|mem|disk|network", "host_sys", true, "_ExperimentalConfig(host_sys)",
       "host system usage sampled while recording (empty: none)",
       +[](const json& v, const std::string& key, ProfilerOptions& o) {
         o.host_sys.clear();
         for (const std::string& name : get_strings(v, key)) {
           HostSystem part;
           if (!parse_host_system(name, &part))
             bad_option(key,
                        "has unknown part \"" + name + "\" (known: \"cpu\", \"mem\", \"disk\", \"network\")");
           o.host_sys.insert(part);
         }
       },
       +[](const ProfilerOptions& o) {
         json h = json::array();
         for (HostSystem x : o.host_sys) h.push_back(std::string(to_string(x)));
         return h;
       }},
      {"host_sys_interval_ms", "uint", "[1, 60000]", "host_sys_interval_ms", false,
       "_ExperimentalConfig(host_sys_interval_ms)", "how often host usage is sampled, ms",
       TRAINPROF_UINT_OPTION(host_sys_interval_ms)},
      {"sample_operators", "uint", "[0, 1000000]", "sample_operators", false,
       "_ExperimentalConfig(sample_operators)",
       "about 1 operator call in N recorded (LibTorch's sampling); the analysis scales operators by N; "
       "0: a profile records every call, the flight recorder 1 in 100 unless it records "
       "torch.distributed's calls (`profile_communication`, Level1 and above) or memory "
       "(`profile_memory`)",
       TRAINPROF_UINT_OPTION(sample_operators)},
      {"python_stack_sampling_ms", "uint", "[0, 1000]", "python_stack_sampling_ms", false,
       "_ExperimentalConfig(python_stack_sampling_ms)",
       "Python only: every Python thread's stack read this often, ms, to name the functions that spend "
       "host time outside operators; 0: off",
       TRAINPROF_UINT_OPTION(python_stack_sampling_ms)},
      {"buffer_mb", "uint", "[1, 1048576]", "buffer_mb", false, "",
       "memory for event buffers, MiB; when full, events are dropped and counted, never waited for",
       TRAINPROF_UINT_OPTION(buffer_mb)},
      {"flush_interval_ms", "uint", "[1, 60000]", "flush_interval_ms", false, "",
       "raw data reaches the disk at least this often, ms", TRAINPROF_UINT_OPTION(flush_interval_ms)},
      {"metadata_limit_bytes", "uint", "[0, 18446744073709551615]", "metadata_limit_bytes", false, "",
       "cap on the total size of add_metadata() values, bytes", TRAINPROF_UINT_OPTION(metadata_limit_bytes)},
  };
}

#undef TRAINPROF_BOOL_OPTION
#undef TRAINPROF_UINT_OPTION

}  // namespace

bool option_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) bad_option(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

void bad_option(const std::string& key, const std::string& what) {
  throw std::invalid_argument(std::string(kOptionsEnvVar) + ": key \"" + key + "\" " + what);
}

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = make_table();
  return table;
}

const OptionSpec* find_option(const std::string& name) {
  for (const OptionSpec& o : option_table()) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

UintRange uint_range(const OptionSpec& spec) {
  UintRange r;
  unsigned long long min = 0, max = 0;
  if (std::sscanf(spec.range, "[%llu, %llu]", &min, &max) == 2) r = UintRange{min, max};
  return r;
}

void read_option(const OptionSpec& spec, const json& value, const std::string& key,
                 ProfilerOptions& options) {
  if (std::string_view(spec.type) == "uint" && value.is_number_unsigned()) {
    if (!uint_range(spec).holds(value.get<uint64_t>()))
      bad_option(key, std::string("must be in ") + spec.range + ", got " + value.dump());
  }
  spec.read(value, key, options);
}

}  // namespace trainprof::core
