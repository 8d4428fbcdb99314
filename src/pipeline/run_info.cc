// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/run_info.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/json_limits.h"
#include "base/run_directory.h"
#include "base/safe_file.h"
#include "pipeline/run_outputs.h"
#include "trainprof/version.h"

namespace trainprof::pipeline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxWarnings = 50;

// The type each field of a run's profiler_info.json has (session.cc writes
// them); "null" allows null as well (a run still open).
constexpr std::pair<const char*, json::value_t> kInfoFields[] = {
    {"trainprof_version", json::value_t::string},
    {"raw_format_version", json::value_t::number_unsigned},
    {"host", json::value_t::string},
    {"pid", json::value_t::number_unsigned},
    {"rank", json::value_t::number_unsigned},
    {"world_size", json::value_t::number_unsigned},
    {"rank_source", json::value_t::string},
    {"job", json::value_t::string},
    {"job_source", json::value_t::string},
    {"clock", json::value_t::object},
    {"start_time_ns", json::value_t::number_unsigned},
    {"start_monotonic_ns", json::value_t::number_unsigned},
    {"stop_time_ns", json::value_t::number_unsigned},
    {"stop_reason", json::value_t::string},
    {"events_recorded", json::value_t::number_unsigned},
    {"events_dropped", json::value_t::number_unsigned},
    {"events_lost", json::value_t::number_unsigned},
    {"raw_bytes", json::value_t::number_unsigned},
    {"complete", json::value_t::boolean},
    {"io_error", json::value_t::string},
    {"raw_files", json::value_t::array},
    {"options", json::value_t::object},
    {"collectors", json::value_t::object},
    {"flight_recorder", json::value_t::object},
};

const char* type_name(json::value_t t) {
  switch (t) {
    case json::value_t::string: return "a string";
    case json::value_t::number_unsigned: return "a non-negative integer";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::boolean: return "true or false";
    default: return "another type";
  }
}

// What profiler_info.json's clock_sync.exchanges says went short: an
// exchange still running (the run was analysed before it ended) or failed,
// with the first reason given ("": none).
std::string clock_exchange_problem(const json& sync) {
  auto ex = sync.find("exchanges");
  if (ex == sync.end() || !ex->is_object()) return "";
  auto count = [&](const char* key) -> int64_t {
    auto v = ex->find(key);
    return v != ex->end() && v->is_number_integer() ? v->get<int64_t>() : 0;
  };
  std::string problem;
  if (int64_t failed = count("failed"); failed > 0) {
    problem = std::to_string(failed) + " of " + std::to_string(count("started")) +
              " clock exchange(s) with the reference rank failed";
    auto reasons = ex->find("failures");
    if (reasons != ex->end() && reasons->is_array() && !reasons->empty() && reasons->front().is_string())
      problem += " (" + reasons->front().get<std::string>() + ")";
  }
  if (int64_t running = count("running"); running > 0) {
    if (!problem.empty()) problem += "; ";
    problem += std::to_string(running) +
               " clock exchange(s) with the reference rank still running when the run was analysed "
               "(`trainprof cluster` analyses it again once they have ended)";
  }
  return problem;
}

}  // namespace

void add_warning(RunAnalysis& r, std::string w) {
  if (r.warnings.size() < kMaxWarnings) r.warnings.push_back(std::move(w));
  if (r.warnings.size() == kMaxWarnings) r.warnings.back() = "(more warnings omitted)";
}

// The run's own profiler_info.json, checked: it is informational (the raw
// data is what is analysed), so what is wrong with it is a warning naming
// the file and the field, and the output keeps only the fields that are right.
json read_run_info(int run_fd, const std::string& run_path, RunAnalysis& r) {
  std::string file = run_path + "/profiler_info.json";
  std::string text = base::read_regular_file_at(run_fd, "profiler_info.json", /*follow=*/false);
  if (text.empty()) return json::object();  // a run killed before its info was written
  // The depth limit keeps dump() of the output from recursing without bound.
  json info;
  if (!base::parse_json_limited(text, &info).empty() || !info.is_object()) {
    add_warning(r, "'" + file + "' is not a JSON object; it is left out of the output's profiler_info.json");
    return json::object();
  }
  for (const auto& [field, type] : kInfoFields) {
    auto it = info.find(field);
    if (it == info.end() || it->is_null()) continue;
    json::value_t t = it->type();
    bool ok = t == type || (type == json::value_t::number_unsigned && t == json::value_t::number_integer &&
                            it->get<int64_t>() >= 0);
    if (ok) continue;
    add_warning(r, "'" + file + "': field \"" + field + "\" should be " + type_name(type) + ", is " +
                       it->dump(-1, ' ', false, json::error_handler_t::replace) + "; it is left out");
    info.erase(it);
  }
  return info;
}

// What the GPU collector said of the run (profiler_info.json's
// "collectors": {"cupti": ...}): GPU activity asked for and not recorded, or
// records CUPTI dropped, are warnings of the analysis, so the user who reads
// the tables knows what they miss.
void warn_about_gpu(const json& info, RunAnalysis& r) {
  auto collectors = info.find("collectors");
  if (collectors == info.end() || !collectors->is_object()) return;
  auto cupti = collectors->find("cupti");
  if (cupti == collectors->end() || !cupti->is_object()) return;
  auto why = cupti->find("why_not");
  if (cupti->value("recorded", true) == false && why != cupti->end() && why->is_string()) {
    add_warning(r, "GPU activity was asked for but not recorded: " + why->get<std::string>());
  }
  auto dropped = cupti->find("records_dropped");
  if (dropped != cupti->end() && dropped->is_number_unsigned() && dropped->get<uint64_t>() > 0) {
    add_warning(r, "CUPTI dropped " + std::to_string(dropped->get<uint64_t>()) +
                       " GPU activity records (its buffers were full): the GPU tables and tracks miss them");
  }
}

// The run's profiler_info.json as an object (empty when it is missing or
// not one: read_run_info warns about that).
json run_info_object(int run_fd) {
  std::string text = base::read_regular_file_at(run_fd, "profiler_info.json", /*follow=*/false);
  json info;
  if (text.empty() || !base::parse_json_limited(text, &info).empty() || !info.is_object()) {
    return json::object();
  }
  return info;
}

// How the run ended, from its profiler_info.json `info`: why it stopped,
// and the write the disk refused with the events it lost (read before the
// raw files, whose warnings name it).
void read_run_end(const json& info, analysis::TraceModel& model) {
  if (auto reason = info.find("stop_reason"); reason != info.end() && reason->is_string()) {
    model.stop_reason = reason->get<std::string>();
  }
  if (auto error = info.find("io_error"); error != info.end() && error->is_string()) {
    model.io_error = error->get<std::string>();
  }
  if (auto lost = info.find("events_lost"); lost != info.end() && lost->is_number_unsigned()) {
    model.events_lost = lost->get<uint64_t>();
  }
  if (auto job = info.find("job"); job != info.end() && job->is_string()) {
    model.job = base::clean_job_id(job->get<std::string>());
  }
  if (auto options = info.find("options"); options != info.end() && options->is_object()) {
    auto n = options->find("sample_operators");
    if (n != options->end() && n->is_number_unsigned() && n->get<uint64_t>() >= 1 &&
        n->get<uint64_t>() <= 1'000'000) {
      model.operator_sampling = static_cast<uint32_t>(n->get<uint64_t>());
    }
  }
}

// The clock alignment measured ("clock_sync": libtrainprof_mpi, or the
// Python front end through torch.distributed) from the run's
// profiler_info.json `info`: each field checked, a bad alignment point left
// out, an exchange unfinished or failed warned about.
void read_clock_offsets(const json& info, analysis::TraceModel& model, RunAnalysis& r) {
  auto sync = info.find("clock_sync");
  if (sync == info.end() || !sync->is_object()) return;
  model.clock_problem = clock_exchange_problem(*sync);
  if (!model.clock_problem.empty()) add_warning(r, "clock alignment: " + model.clock_problem);
  auto points = sync->find("points");
  if (points == sync->end() || !points->is_array()) return;
  for (const json& p : *points) {
    auto when = p.find("realtime_ns"), offset = p.find("offset_ns"), error = p.find("error_ns");
    if (!p.is_object() || when == p.end() || offset == p.end() || error == p.end() ||
        !when->is_number_unsigned() || !offset->is_number_integer() || !error->is_number_integer() ||
        error->get<int64_t>() < 0) {
      add_warning(r, "a clock alignment point of profiler_info.json is malformed; it is left out");
      continue;
    }
    model.clock_offsets.push_back(analysis::ClockOffset{when->get<uint64_t>(), offset->get<int64_t>(),
                                                        static_cast<uint64_t>(error->get<int64_t>())});
  }
  std::sort(model.clock_offsets.begin(), model.clock_offsets.end(),
            [](const auto& a, const auto& b) { return a.realtime_ns < b.realtime_ns; });
}

// profiler_info.json of the output: the run's own, plus what the analysis did.
std::string output_info(const json& run_info, const analysis::TraceModel& model,
                        const analysis::RunLoader& loader, const RunAnalysis& r,
                        const AnalyseOptions& options, bool pretty, const json& extra) {
  json info = run_info;
  json steps = json::array();
  for (const auto& s : model.steps) steps.push_back(s.number);
  json warnings = r.warnings;
  info["analysis"] = {
      {"trainprof_version", std::string(version())},
      {"events", r.events},
      {"slices", loader.slices_loaded()},
      // Windows the slices were analysed in (AnalyseOptions::window_slices).
      {"windows", loader.windows_loaded()},
      {"steps", steps},
      {"step_list", options.step_list},
      {"analysis_seconds", r.seconds},
      {"analysis_threads", analysis_threads(options)},
      {"analysed_at_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count()},
      {"warnings", warnings},
      // Raw chunks the reader's sequence check found duplicated (dropped),
      // missing or out of order (docs/FORMAT.md, "Damage").
      {"raw_chunks",
       {{"duplicated", model.chunks_duplicated},
        {"missing", model.chunks_missing},
        {"reordered", model.chunks_reordered}}},
      // Events holding a string id no string table defines (kept, unnamed),
      // and string tables with bytes past their counted records.
      {"raw_strings",
       {{"events_with_undefined_ids", model.events_with_undefined_ids},
        {"chunks_with_unread_bytes", model.string_chunks_with_unread_bytes}}},
  };
  for (const auto& [key, value] : extra.items()) info["analysis"][key] = value;  // memory, host
  return info.dump(pretty ? 2 : -1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace trainprof::pipeline
