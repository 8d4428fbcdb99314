// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Option validation and TRAINPROF_OPTIONS parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/json_limits.h"
#include "core/option_table.h"
#include "core/options_json.h"
#include "trainprof/dynamic.h"
#include "trainprof/env.h"
#include "trainprof/profiler.h"

namespace trainprof {
namespace {

std::string parse_error(const std::string& json) {
  try {
    parse_options_json(json);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// TRAINPROF_OPTIONS comes from outside: whatever it holds, the parser
// throws std::invalid_argument only (its contract), never deep recursion.
TEST(EnvOptions, HostileJsonIsInvalidArgumentOnly) {
  std::string arrays = R"({"start": true, "x": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::string objects = R"({"start": true)";
  for (int i = 0; i < 100000; ++i) objects += R"(, "a": {"b": 1)";
  objects += std::string(100000, '}') + "}";
  for (const std::string& text : {std::string(R"({"start": true, "buffer_mb": 1e999})"), arrays, objects}) {
    std::string error;
    try {
      parse_options_json(text);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("is not valid JSON"), std::string::npos) << error;
  }
  EXPECT_NE(parse_error(arrays).find("nested deeper than 128 levels"), std::string::npos);
}

TEST(JsonLimits, DepthIsCountedOutsideStringsOnly) {
  nlohmann::json j;
  EXPECT_EQ(base::parse_json_limited(std::string(128, '[') + std::string(128, ']'), &j), "");
  EXPECT_NE(base::parse_json_limited(std::string(129, '[') + std::string(129, ']'), &j), "");
  EXPECT_TRUE(j.is_null());
  // Brackets and escaped quotes inside strings are text.
  std::string text = R"({"s": "\"[[[[)" + std::string(500, '{') + R"("})";
  EXPECT_EQ(base::parse_json_limited(text, &j), "");
  EXPECT_EQ(j["s"].get<std::string>().size(), 505u);
  EXPECT_NE(base::parse_json_limited("1e999", &j).find("number overflow"), std::string::npos);
  EXPECT_NE(base::parse_json_limited("{\"a\": ", &j), "");
  EXPECT_NE(base::parse_json_limited("", &j), "");
}

TEST(EnvOptions, ParsesEveryKey) {
  EnvOptions env = parse_options_json(R"({
    "start": true, "output_path": "/tmp/x", "activities": ["CPU", "GPU"],
    "profile_memory": true, "record_shapes": true, "with_stack": true, "with_modules": true, "with_flops": true,
    "data_process": true, "profile_communication": true, "profiler_level": "Level2",
    "mstx_domain_include": ["a"], "mstx_domain_exclude": ["b", "c"],
    "data_simplification": true, "buffer_mb": 7, "flush_interval_ms": 250,
    "metadata_limit_bytes": 1000})");
  EXPECT_TRUE(env.start);
  const ProfilerOptions& o = env.options;
  EXPECT_EQ(o.output_path, "/tmp/x");
  EXPECT_EQ(o.activities.size(), 2u);
  EXPECT_TRUE(o.profile_memory && o.record_shapes && o.with_stack && o.with_modules && o.with_flops);
  EXPECT_TRUE(o.data_process && o.profile_communication && o.data_simplification);
  EXPECT_EQ(o.profiler_level, ProfilerLevel::Level2);
  EXPECT_EQ(o.mstx_domain_include, std::vector<std::string>{"a"});
  EXPECT_EQ(o.mstx_domain_exclude.size(), 2u);
  EXPECT_EQ(o.buffer_mb, 7u);
  EXPECT_EQ(o.flush_interval_ms, 250u);
  EXPECT_EQ(o.metadata_limit_bytes, 1000u);
}

// The options a run records (profiler_info.json's "options") can be given
// back as TRAINPROF_OPTIONS with "start" added: the same profiler again.
TEST(EnvOptions, RecordedOptionsParseBackToTheSame) {
  ProfilerOptions o;
  o.output_path = "/tmp/y";
  o.start_profile = false;
  o.activities = {Activity::CPU};
  o.record_shapes = true;
  o.with_modules = true;
  o.profiler_level = ProfilerLevel::Level1;
  o.mstx_domain_exclude = {"noisy"};
  o.buffer_mb = 9;
  o.host_sys = {HostSystem::Cpu, HostSystem::Network};
  o.host_sys_interval_ms = 20;
  o.export_db = true;
  o.schedule = Schedule{.wait = 2, .warmup = 1, .active = 4, .repeat = 3, .skip_first = 5};
  nlohmann::json recorded = core::options_to_json(o);
  recorded["start"] = true;
  EnvOptions env = parse_options_json(recorded.dump());
  EXPECT_EQ(core::options_to_json(env.options), core::options_to_json(o));
  EXPECT_FALSE(env.options.start_profile);
}

TEST(EnvOptions, ExportTypeNamesItsFormatsAndRefusesOthers) {
  EnvOptions env = parse_options_json(R"({"start": true, "export_type": ["db"]})");
  EXPECT_FALSE(env.options.export_text);
  EXPECT_TRUE(env.options.export_db);
  env = parse_options_json(R"({"start": true, "export_type": ["text", "db"]})");
  EXPECT_TRUE(env.options.export_text && env.options.export_db);
  try {
    parse_options_json(R"({"start": true, "export_type": ["csv"]})");
    ADD_FAILURE() << "csv accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"export_type\" has unknown format \"csv\""), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_options_json(R"({"start": true, "export_type": []})"), std::invalid_argument);
  ProfilerOptions o;
  o.export_text = false;
  EXPECT_THROW(o.validate(), std::invalid_argument);  // nothing would be written
}

TEST(EnvOptions, HostSysNamesItsPartsAndRefusesOthers) {
  EnvOptions env =
      parse_options_json(R"({"start": true, "host_sys": ["mem", "disk"], "host_sys_interval_ms": 100})");
  EXPECT_EQ(env.options.host_sys, (std::set<HostSystem>{HostSystem::Mem, HostSystem::Disk}));
  EXPECT_EQ(env.options.host_sys_interval_ms, 100u);
  EXPECT_THROW(parse_options_json(R"({"start": true, "host_sys": ["gpu"]})"), std::invalid_argument);
  EXPECT_THROW(parse_options_json(R"({"start": true, "host_sys": "cpu"})"), std::invalid_argument);
  EXPECT_THROW(parse_options_json(R"({"start": true, "host_sys_interval_ms": 0})"), std::invalid_argument);
  ProfilerOptions o;
  o.host_sys_interval_ms = 60001;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(EnvOptions, DefaultsWhenOnlyStart) {
  EnvOptions env = parse_options_json(R"({"start": false})");
  EXPECT_FALSE(env.start);
  EXPECT_EQ(env.options.output_path, "./data");
  EXPECT_LE(env.options.flush_interval_ms, 1000u);
}

TEST(EnvOptions, ScheduleAndAnalyse) {
  EnvOptions env = parse_options_json(
      R"({"start": true, "analyse": true, "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 2}})");
  EXPECT_TRUE(env.analyse);
  ASSERT_TRUE(env.options.schedule.has_value());
  EXPECT_EQ(env.options.schedule->wait, 1);
  EXPECT_EQ(env.options.schedule->active, 3);
  EXPECT_EQ(env.options.schedule->repeat, 2);
  EXPECT_EQ(env.options.schedule->skip_first, 0);
  EXPECT_FALSE(parse_options_json(R"({"start": true, "schedule": null})").options.schedule.has_value());
  EXPECT_FALSE(parse_options_json(R"({"start": true})").analyse);
  EXPECT_NE(parse_error(R"({"start": true, "schedule": {"wait": 1}})").find("needs \"active\""),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"start": true, "schedule": {"active": 1, "wiat": 1}})").find("unknown field \"wiat\""),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "schedule": {"active": 0}})").find("active"), std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "schedule": [1]})").find("must be an object"), std::string::npos);
}

// Each unsigned option's range is written once, in its row: TRAINPROF_OPTIONS
// and ProfilerOptions::validate both hold every option to it.
TEST(EnvOptions, EveryUnsignedOptionIsHeldToItsRowsRange) {
  size_t rows = 0;
  for (const core::OptionSpec& row : core::option_table()) {
    if (std::string(row.type) != "uint") continue;
    ++rows;
    core::UintRange r = core::uint_range(row);
    ASSERT_LT(r.min, r.max) << row.name << " " << row.range;
    std::string key = std::string("\"") + row.name + "\"";
    for (uint64_t good : {r.min, r.max}) {
      EXPECT_EQ(parse_error(R"({"start": true, )" + key + ": " + std::to_string(good) + "}"), "") << row.name;
    }
    std::vector<uint64_t> bad;
    if (r.min > 0) bad.push_back(r.min - 1);
    if (r.max < UINT64_MAX) bad.push_back(r.max + 1);
    for (uint64_t v : bad) {
      std::string e = parse_error(R"({"start": true, )" + key + ": " + std::to_string(v) + "}");
      EXPECT_NE(e.find(key + " must be in " + row.range + ", got " + std::to_string(v)), std::string::npos)
          << e;
    }
  }
  EXPECT_EQ(rows, 6u);
  // The same bounds hold for options set in C++.
  ProfilerOptions o;
  o.output_path = "x";
  o.flush_interval_ms = 60001;
  try {
    o.validate();
    ADD_FAILURE() << "validate() took flush_interval_ms 60001";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "ProfilerOptions.flush_interval_ms must be in [1, 60000], got 60001");
  }
  o.flush_interval_ms = 100;
  o.python_stack_sampling_ms = 1001;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(EnvOptions, ClearErrors) {
  EXPECT_NE(parse_error(R"({"start": true,)").find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error(R"([1, 2])").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"output_path": "x"})").find("\"start\" is mandatory"), std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "ouput_path": "x"})").find("\"ouput_path\" is unknown"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"start": "yes"})").find("\"start\" must be true or false"), std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "buffer_mb": -3})").find("\"buffer_mb\" must be a non-negative"),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"start": true, "buffer_mb": 0})").find("\"buffer_mb\" must be in [1, 1048576], got 0"),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "activities": ["TPU"]})").find("unknown activity \"TPU\""),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "profiler_level": "Level9"})").find("profiler_level"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"start": true, "mstx_domain_include": "a"})").find("array of strings"),
            std::string::npos);
}

TEST(ProfilerOptions, ValidateNamesTheField) {
  ProfilerOptions o;
  o.buffer_mb = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = ProfilerOptions{};
  o.flush_interval_ms = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = ProfilerOptions{};
  o.output_path = "";
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = ProfilerOptions{};
  o.schedule = Schedule{.active = 0};
  try {
    Profiler p(o);
    FAIL() << "a Profiler with an invalid schedule must not construct";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("active"), std::string::npos);
  }
}

// A value of the option other than `current` (its value now), in
// TRAINPROF_OPTIONS' form: every type the table has is covered, so a new
// type fails here until it is.
nlohmann::json other_value(const core::OptionSpec& spec, const nlohmann::json& current) {
  const std::string type = spec.type;
  if (type == "bool") return !current.get<bool>();
  if (type == "uint") return current == 7 ? 8 : 7;  // inside every option's range
  if (type == "string") return "/tmp/elsewhere";
  if (type == "strings") return nlohmann::json::array({"a", "b"});
  if (type == "schedule")
    return {{"wait", 1}, {"warmup", 1}, {"active", 2}, {"repeat", 3}, {"skip_first", 4}};
  std::vector<std::string> values;
  std::string range = spec.range;
  for (size_t start = 0; start <= range.size();) {
    size_t bar = std::min(range.find('|', start), range.size());
    values.push_back(range.substr(start, bar - start));
    start = bar + 1;
  }
  if (type == "choice") return values[0] == current ? values[1] : values[0];
  if (type == "choices") return values;  // all of them: no default holds every value
  ADD_FAILURE() << spec.name << ": no test value for type " << type;
  return nullptr;
}

// TRAINPROF_OPTIONS' parser and profiler_info.json's "options" are made
// from the table: each row's key is read into the option and written back
// as given, leaving every other option at its default; the written keys are
// exactly the table's; option_list() (`trainprof options`) is the table.
TEST(OptionTable, TheJsonParserAndWriterAreMadeFromIt) {
  const nlohmann::json defaults = core::options_to_json(ProfilerOptions{});
  std::vector<std::string> names;
  for (const core::OptionSpec& spec : core::option_table()) names.push_back(spec.name);
  std::vector<std::string> written;
  for (const auto& [key, value] : defaults.items()) written.push_back(key);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(written, sorted);
  for (const core::OptionSpec& spec : core::option_table()) {
    nlohmann::json value = other_value(spec, defaults[spec.name]);
    EnvOptions env = parse_options_json(nlohmann::json{{"start", true}, {spec.name, value}}.dump());
    nlohmann::json back = core::options_to_json(env.options);
    EXPECT_EQ(back[spec.name], value) << spec.name;
    for (const std::string& other : names) {
      if (other != spec.name) {
        EXPECT_EQ(back[other], defaults[other]) << spec.name << " changed " << other;
      }
    }
  }
  std::vector<OptionInfo> list = option_list();
  ASSERT_EQ(list.size(), names.size());
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(list[i].name, names[i]);
    EXPECT_EQ(nlohmann::json::parse(list[i].default_json), defaults[names[i]]) << names[i];
    EXPECT_FALSE(list[i].doc.empty()) << names[i];
  }
  std::string unknown = parse_error(R"({"start": true, "no_such_option": 1})");
  for (const std::string& name : names) EXPECT_NE(unknown.find(", " + name), std::string::npos) << name;
}

// The dynamic profiler's profiler_config.json is checked against the table:
// every option marked dynamic is a field that sets it, every other option
// is a field it ignores (said, not applied), and the default file holds
// only dynamic options and MindSpore's own fields.
TEST(OptionTable, TheDynamicConfigSetsTheDynamicOptionsAndNoOthers) {
  const nlohmann::json base = core::options_to_json(parse_dynamic_config("{}").options);
  for (const core::OptionSpec& spec : core::option_table()) {
    nlohmann::json value = other_value(spec, base[spec.name]);
    nlohmann::json given = value;
    if (std::string(spec.name) == "profiler_level") {  // the file gives levels as numbers, -1 to 2
      value = "Level1";
      given = 1;
    }
    DynamicConfig c = parse_dynamic_config(nlohmann::json{{spec.name, given}}.dump());
    // Not read: a MindSpore field without effect, or not a field of the file at all.
    bool ignored = std::find(c.ignored.begin(), c.ignored.end(), spec.name) != c.ignored.end() ||
                   std::any_of(c.unknown.begin(), c.unknown.end(), [&spec](const std::string& u) {
                     return u.substr(0, u.find(' ')) == spec.name;
                   });
    nlohmann::json back = core::options_to_json(c.options);
    if (spec.dynamic) {
      EXPECT_FALSE(ignored) << spec.name;
      EXPECT_EQ(back[spec.name], value) << spec.name;
    } else {
      EXPECT_TRUE(ignored) << spec.name << " is not marked dynamic, yet profiler_config.json takes it";
      EXPECT_EQ(back, base) << spec.name;
    }
  }
  const std::set<std::string> mindspore_fields = {
      "start_step",        "stop_step",         "analyse_mode", "aicore_metrics",
      "profile_framework", "parallel_strategy", "mstx"};
  const nlohmann::json default_file = nlohmann::json::parse(default_dynamic_config());
  for (const auto& [field, value] : default_file.items()) {
    const core::OptionSpec* spec = core::find_option(field);
    EXPECT_TRUE(mindspore_fields.count(field) == 1 || (spec != nullptr && spec->dynamic)) << field;
  }
}

}  // namespace
}  // namespace trainprof
