// Copyright trainprof authors. The analysis driver: finds runs, analyses each
// in a worker process (at most max_workers at once), collects the results.
#include "trainprof/analyse.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>

#include "analysis/gpu_kernels.h"
#include "analysis/gpu_launches.h"
#include "analysis/host_usage.h"
#include "analysis/memory.h"
#include "analysis/passes.h"
#include "analysis/rank_summary.h"
#include "analysis/run_loader.h"
#include "analysis/trace_model.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/run_directory.h"
#include "core/safe_file.h"
#include "core/write_all.h"
#include "export/chrome_trace.h"
#include "export/csv_tables.h"
#include "export/database.h"
#include "export/output_file.h"
#include "export/perfetto_trace.h"
#include "raw/format.h"
#include "raw/raw_reader.h"
#include "trainprof/profiler.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kOutputDirName = "PROFILER_OUTPUT";
constexpr const char* kDatabaseName = "trainprof.db";
constexpr size_t kMaxWarnings = 50;

// "a/b/" and "a/./b" name the same directory as "a/b".
fs::path normalized(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

bool is_run_directory(const fs::path& p) {
  std::error_code ec;
  std::string name = p.filename().string();
  if (name.size() <= 10 || !name.ends_with("_trainprof") || !fs::is_directory(p, ec)) return false;
  return fs::exists(p / "profiler_info.json", ec) || fs::exists(p / raw::kRawDirName, ec);
}

void add_warning(RunAnalysis& r, std::string w) {
  if (r.warnings.size() < kMaxWarnings) r.warnings.push_back(std::move(w));
  if (r.warnings.size() == kMaxWarnings) r.warnings.back() = "(more warnings omitted)";
}

// The "memory" object of the output's profiler_info.json: counts, and the
// peak allocated per step and device.
json memory_summary(const analysis::TraceModel& model, const analysis::MemoryMatch& match) {
  uint64_t allocations = model.memory.size() - match.frees;
  json steps = json::array();
  for (const analysis::StepMemoryPeak& p : analysis::step_memory_peaks(model)) {
    steps.push_back({{"Step", p.step},
                     {"Device Type", analysis::memory_device_name(p.device)},
                     {"Peak Memory(MB)", static_cast<double>(p.peak_allocated) / (1024.0 * 1024.0)},
                     {"Peak Memory(bytes)", p.peak_allocated}});
  }
  return {{"reports", model.memory.size()},
          {"allocations", allocations},
          {"frees", match.frees},
          {"frees_matched", match.frees_matched},
          {"steps", steps}};
}

// PROFILER_OUTPUT, open: every output is created relative to `fd`.
struct OutputDir {
  int fd;
  std::string path;  // for messages
  exporter::OutputPath file(const char* name) const { return {fd, path, name}; }
};

// Writes memory_record.csv and operator_memory.csv when the run has memory
// reports (`operators`: memory_operators of each); returns the first error and
// fills `summary`.
std::string write_memory_outputs(const analysis::TraceModel& model, const std::vector<uint32_t>& operators,
                                 const OutputDir& out, json* summary) {
  if (model.memory.empty()) {  // files of an earlier analysis of other steps would be stale
    unlinkat(out.fd, "memory_record.csv", 0);
    unlinkat(out.fd, "operator_memory.csv", 0);
    return "";
  }
  analysis::MemoryMatch match = analysis::match_allocations(model, operators);
  *summary = memory_summary(model, match);
  std::string e = exporter::write_memory_record(model, out.file("memory_record.csv"));
  std::string e2 = exporter::write_operator_memory(model, match, out.file("operator_memory.csv"));
  return e.empty() ? e2 : e;
}

// Writes the host_*_usage.csv of the parts the run sampled (host_sys) and
// sets (*extra)["host"]: the samples and the steps the host was the
// bottleneck of (the summary names them).
std::string write_host_outputs(const analysis::TraceModel& model, const OutputDir& out, json* extra) {
  std::string errors;
  bool any = false;
  std::vector<analysis::HostUsageTable> tables = analysis::host_usage_tables(model);
  for (const analysis::HostUsageTable& table : tables) {
    if (table.ts_ns.empty()) {
      unlinkat(out.fd, table.file, 0);  // of an earlier analysis
      continue;
    }
    any = true;
    std::string e = exporter::write_host_usage(table, model.realtime_offset_ns, out.file(table.file));
    if (errors.empty()) errors = e;
  }
  if (!any) return errors;
  analysis::HostBottlenecks b = analysis::host_bottlenecks(model, tables);
  (*extra)["host"] = {{"cpu_samples", b.samples},
                      {"saturated_cpu_percent", analysis::kSaturatedCpuPercent},
                      {"cpu_saturated_steps", b.cpu_saturated_steps},
                      {"cpu_saturated_mean_percent", b.cpu_saturated_percent},
                      {"cpu_saturated_data_wait_ns", b.cpu_saturated_data_wait_ns},
                      {"memory_pressure_percent", analysis::kMemoryPressurePercent},
                      {"memory_pressure_steps", b.memory_pressure_steps}};
  return errors;
}

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

// The run's own profiler_info.json, checked: it is informational (the raw
// data is what is analysed), so what is wrong with it is a warning naming
// the file and the field, and the output keeps only the fields that are right.
json read_run_info(int run_fd, const std::string& run_path, RunAnalysis& r) {
  std::string file = run_path + "/profiler_info.json";
  std::string text = detail::read_regular_file_at(run_fd, "profiler_info.json", /*follow=*/false);
  if (text.empty()) return json::object();  // a run killed before its info was written
  // The depth limit keeps dump() of the output from recursing without bound.
  json info;
  if (!detail::parse_json_limited(text, &info).empty() || !info.is_object()) {
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
  std::string text = detail::read_regular_file_at(run_fd, "profiler_info.json", /*follow=*/false);
  json info;
  if (text.empty() || !detail::parse_json_limited(text, &info).empty() || !info.is_object()) {
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

}  // namespace

bool AnalyseReport::ok() const {
  if (!error.empty()) return false;
  return std::all_of(runs.begin(), runs.end(), [](const RunAnalysis& r) { return r.ok; });
}

std::vector<std::string> find_run_directories(const std::string& path) {
  std::vector<std::string> runs;
  std::error_code ec;
  fs::path root = normalized(path);
  if (is_run_directory(root)) return {root.string()};
  if (!fs::is_directory(root, ec)) return runs;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    // A symlink found below PATH is not followed: it could lead anywhere.
    if (it->is_symlink(ec) || !it->is_directory(ec)) continue;
    if (is_run_directory(it->path())) {
      runs.push_back(it->path().lexically_normal().string());
      it.disable_recursion_pending();  // raw/ and PROFILER_OUTPUT/ hold no runs
    }
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::string no_run_directory_error(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "'" + path + "' does not exist";
  return "no trainprof run directory (*_trainprof) at or below '" + path + "'";
}

std::vector<int64_t> parse_step_list(const std::string& text) {
  auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15) {
      throw std::invalid_argument("bad step number '" + s + "' in step list '" + text +
                                  "' (expected N, A-B or A,B,C)");
    }
    return std::stoll(s);
  };
  std::vector<int64_t> steps;
  size_t dash = text.find('-');
  if (dash != std::string::npos) {
    int64_t a = number(text.substr(0, dash)), b = number(text.substr(dash + 1));
    if (b < a) throw std::invalid_argument("step range '" + text + "' ends before it starts");
    if (b - a > 10'000'000) throw std::invalid_argument("step range '" + text + "' is too long");
    for (int64_t s = a; s <= b; ++s) steps.push_back(s);
    return steps;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    steps.push_back(number(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return steps;
}

namespace {

// The analysis lock of a run (kAnalysisLockName): held while an analysis
// reads raw/ and writes PROFILER_OUTPUT, so that two analyses of one run
// never mix their outputs or remove raw/ under each other. A second analysis
// does not wait (an analysis can take minutes): it fails at once, saying so.
detail::UniqueFd take_analysis_lock(int run_fd, const std::string& run_path, std::string* error) {
  std::string file = run_path + "/" + detail::kAnalysisLockName;
  detail::UniqueFd fd(::openat(run_fd, detail::kAnalysisLockName,
                               O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "cannot open the analysis lock '" + file +
             "': " + (fd.valid() ? std::string("not a regular file") : std::strerror(errno));
    return {};
  }
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    *error = errno == EWOULDBLOCK ? "another analysis of this run is in progress (it holds '" + file +
                                        "'); run this one again when it has finished"
                                  : "cannot lock '" + file + "': " + std::strerror(errno);
    return {};
  }
  return fd;
}

// Removes raw/ of the run `run_fd` without following a symlink at raw/ or in
// it. Returns "" or what could not be removed.
std::string remove_raw_data(int run_fd) {
  detail::UniqueFd raw_fd(detail::open_directory_at(run_fd, raw::kRawDirName));
  if (!raw_fd.valid()) return errno == ENOENT ? "" : std::string("cannot open raw/: ") + std::strerror(errno);
  int scan_fd = fcntl(raw_fd.get(), F_DUPFD_CLOEXEC, 0);  // closedir closes it
  DIR* dir = scan_fd >= 0 ? fdopendir(scan_fd) : nullptr;
  if (dir == nullptr) {
    std::string error = std::string("cannot list raw/: ") + std::strerror(errno);
    if (scan_fd >= 0) ::close(scan_fd);
    return error;
  }
  std::string error;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (unlinkat(raw_fd.get(), name.c_str(), 0) != 0 && error.empty()) {
      error = "cannot remove raw/" + name + ": " + std::strerror(errno);
    }
  }
  closedir(dir);
  if (error.empty() && unlinkat(run_fd, raw::kRawDirName, AT_REMOVEDIR) != 0) {
    error = std::string("cannot remove raw/: ") + std::strerror(errno);
  }
  return error;
}

// What the passes collect over the windows of a run (analysis/run_loader.h).
class WindowPasses {
 public:
  // `trace`, `database`: the outputs fed window by window; null: not written.
  WindowPasses(const analysis::TraceModel& m, exporter::ChromeTraceWriter* trace,
               exporter::PerfettoTraceWriter* perfetto, exporter::DatabaseWriter* database)
      : self_(m),
        launches_(m),
        steps_(m),
        trace_(trace),
        perfetto_(perfetto),
        database_(database),
        memory_names_(m.memory.size(), 0) {}

  void add(const analysis::TraceModel& m, const analysis::Window& w) {
    self_.add_window(m);
    launches_.add_window(m);
    analysis::add_totals(m, &totals_);
    steps_.add_window(m, w.start_ns, w.end_ns);
    size_t first_report = next_report_;
    while (next_report_ < m.memory.size() && m.memory[next_report_].ts_ns < w.end_ns) ++next_report_;
    analysis::memory_operators(m, first_report, next_report_, &memory_names_);
    if (trace_ != nullptr) trace_->add_window(m, w.end_ns);
    if (perfetto_ != nullptr) perfetto_->add_window(m, w.end_ns);
    if (database_ != nullptr) database_->add_window(m);
  }

  // Self times, totals and step rows complete.
  void finish(analysis::TraceModel& m) {
    self_.finish(m);
    launches_.finish(m);
    analysis::finish_totals(m, &totals_);
    steps_.use_device_time(m);
    step_rows_ = steps_.finish();
  }

  const std::vector<analysis::SliceTotals>& totals() const { return totals_; }
  const std::vector<analysis::StepTraceRow>& step_rows() const { return step_rows_; }
  const std::vector<uint32_t>& memory_names() const { return memory_names_; }

 private:
  analysis::SelfTimeAccumulator self_;
  analysis::LaunchAttribution launches_;
  analysis::StepTraceAccumulator steps_;
  exporter::ChromeTraceWriter* trace_;
  exporter::PerfettoTraceWriter* perfetto_;
  exporter::DatabaseWriter* database_;
  std::vector<analysis::SliceTotals> totals_;
  std::vector<analysis::StepTraceRow> step_rows_;
  std::vector<uint32_t> memory_names_;  // per memory report: its operator
  size_t next_report_ = 0;
};

// Loads the run window by window through the passes and writes every
// output into `out`; returns the first error.
std::string write_outputs(analysis::TraceModel& model, analysis::RunLoader& loader, const fs::path& run,
                          const OutputDir& out, const AnalyseOptions& options, RunAnalysis& r, json* extra) {
  std::optional<exporter::ChromeTraceWriter> trace;
  if (options.export_text && options.trace_json) {
    trace.emplace(model, out.file("trace_view.json"), run.filename().string(), options.pretty,
                  options.trace_size_limit_bytes, loader.earliest_slice_ns());
  } else {
    unlinkat(out.fd, "trace_view.json", 0);  // of an earlier analysis
  }
  std::optional<exporter::PerfettoTraceWriter> perfetto;
  if (options.export_text && options.trace_perfetto) {
    perfetto.emplace(model, out.file("trace_view.pftrace"), loader.earliest_slice_ns(), /*compress=*/true);
  } else {
    unlinkat(out.fd, "trace_view.pftrace", 0);
  }
  std::optional<exporter::DatabaseWriter> database;
  if (options.export_db) database.emplace(out.file(kDatabaseName));
  WindowPasses passes(model, trace ? &*trace : nullptr, perfetto ? &*perfetto : nullptr,
                      database ? &*database : nullptr);
  std::string error;
  uint64_t window = options.window_slices > 0 ? options.window_slices : UINT64_MAX;
  if (!loader.load(
          &model, loader.plan_windows(window),
          [&passes](analysis::TraceModel& m, const analysis::Window& w) { passes.add(m, w); }, &error)) {
    return error;
  }
  passes.finish(model);
  for (const std::string& w : model.warnings) add_warning(r, w);  // reading's and the passes'
  std::string errors;
  auto note = [&](const std::string& e) {
    if (!e.empty() && errors.empty()) errors = e;
  };
  std::vector<analysis::OpStatisticRow> operators = analysis::op_statistics(model, passes.totals());
  if (database) {
    std::string info = detail::read_regular_file_at(AT_FDCWD, (run / "profiler_info.json").string(), false);
    note(database->finish(model, passes.step_rows(), operators, passes.memory_names(), info));
  } else {
    unlinkat(out.fd, kDatabaseName, 0);  // of an earlier analysis
  }
  if (perfetto) {
    exporter::PerfettoTraceResult result = perfetto->finish(model);
    note(result.error);
    if (result.clamped_slices > 0) {
      add_warning(
          r, "trace_view.pftrace: " + std::to_string(result.clamped_slices) +
                 " range(s) that crossed the end of an enclosing one end there (Perfetto's tracks nest)");
    }
  }
  if (trace) {
    exporter::ChromeTraceResult trace_result = trace->finish();
    if (!trace_result.cut_warning.empty()) add_warning(r, trace_result.cut_warning);
    note(trace_result.error);
  }
  if (options.export_text) {
    note(exporter::write_op_statistic(operators, out.file("op_statistic.csv")));
    note(exporter::write_operator_details(analysis::operator_details(model, passes.totals()),
                                          out.file("operator_details.csv")));
    note(exporter::write_step_trace_time(passes.step_rows(), out.file("step_trace_time.csv")));
    if (!model.data_stages.empty()) {
      note(exporter::write_dataset(analysis::dataset_statistics(model), out.file("dataset.csv")));
    } else {
      unlinkat(out.fd, "dataset.csv", 0);  // from an earlier analysis of other steps
    }
    std::vector<analysis::KernelRow> kernels = analysis::kernel_rows(model);
    if (!kernels.empty()) {
      note(exporter::write_kernel_details(kernels, model.realtime_offset_ns, out.file("kernel_details.csv")));
    } else {
      unlinkat(out.fd, "kernel_details.csv", 0);
    }
  }
  json memory;
  if (options.export_text) note(write_memory_outputs(model, passes.memory_names(), out, &memory));
  if (!memory.is_null()) (*extra)["memory"] = memory;
  if (options.export_text) note(write_host_outputs(model, out, extra));
  if (!model.comm_calls.empty()) {
    note(detail::write_file_atomically_at(
        out.fd, "rank_summary.json",
        analysis::rank_summary_json(analysis::rank_summary(model, passes.step_rows())),
        out.path + "/rank_summary.json"));
  } else {
    unlinkat(out.fd, "rank_summary.json", 0);  // of an earlier analysis
  }
  return errors;
}

// AnalyseOptions::link_trace_for_peers: "{worker}_{stamp}_trainprof" ->
// "{parent}/{worker}.{stamp}.pt.trace.json", a hard link to the trace
// (TensorBoard's plugin reads the stamp as the span). Returns a warning.
std::string link_trace_for_peers(const fs::path& run, int out_fd) {
  std::string name = run.filename().string();
  const std::string suffix = "_trainprof";
  if (name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  if (size_t us = name.rfind('_'); us != std::string::npos && us + 1 < name.size() &&
                                   name.find_first_not_of("0123456789", us + 1) == std::string::npos) {
    name[us] = '.';
  }
  name += ".pt.trace.json";
  detail::UniqueFd parent(::open(run.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent.valid())
    return "cannot open the run's parent directory to link the trace: " + std::string(std::strerror(errno));
  unlinkat(parent.get(), name.c_str(), 0);  // of an earlier analysis
  if (linkat(out_fd, "trace_view.json", parent.get(), name.c_str(), 0) != 0) {
    return "cannot link the trace as " + (run.parent_path() / name).string() +
           " for TensorBoard and HTA: " + std::strerror(errno);
  }
  return "";
}

// analyse_run without the exception guard.
RunAnalysis analyse_locked_run(const fs::path& run, int run_fd, const AnalyseOptions& options,
                               RunAnalysis r) {
  auto t0 = std::chrono::steady_clock::now();
  std::string dir = r.run_dir;
  OutputDir out{-1, (run / kOutputDirName).string()};
  struct stat st {};
  bool has_raw = fstatat(run_fd, raw::kRawDirName, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!has_raw && fstatat(run_fd, kOutputDirName, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    r.error = "the raw data of this run was removed by data simplification (--simplify); its outputs in '" +
              out.path + "' are what remains";
    return r;
  }
  // Checked before reading: a run closed meanwhile was still read as partial.
  bool recording = detail::run_is_being_recorded(run_fd);
  if (recording) {
    add_warning(r,
                "this run is still being recorded (its recording lock is held): the outputs are partial, "
                "up to the recorder's last flush; analyse it again when it has stopped");
  }
  std::string error;
  analysis::TraceModel model;
  analysis::RunLoader loader;
  json run_end = run_info_object(run_fd);  // one read for how it ended and its clocks
  read_run_end(run_end, model);
  if (!loader.scan(dir, &model, &error)) {
    r.error = error;
    return r;
  }
  r.events = model.event_count;
  read_clock_offsets(run_end, model, r);
  error = analysis::select_steps(model, options.step_list);
  if (!error.empty()) {
    r.error = error;
    return r;
  }
  analysis::symbolize_call_stacks(model);
  auto t_scanned = std::chrono::steady_clock::now();

  detail::UniqueFd out_fd(detail::make_directory_at(run_fd, kOutputDirName, out.path, &error));
  if (!out_fd.valid()) {
    r.error = error;
    return r;
  }
  out.fd = out_fd.get();
  detail::remove_temporaries_at(out.fd);  // of a killed analysis: this one holds the lock
  json extra = json::object();            // the output info's "memory" and "host"
  // The clock alignment used, which the run's own file may outgrow (an
  // exchange that ends after the analysis): `trainprof cluster` compares them.
  extra["clock_sync"] = run_end.contains("clock_sync") ? run_end["clock_sync"] : json(nullptr);
  std::string errors = write_outputs(model, loader, run, out, options, r, &extra);
  auto note = [&](const std::string& e) {
    if (!e.empty() && errors.empty()) errors = e;
  };
  auto t_tables = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) {
    return std::to_string(std::chrono::duration<double, std::milli>(b - a).count());
  };
  detail::log_debug(dir + ": scan " + ms(t0, t_scanned) + " ms, windows and outputs " +
                    ms(t_scanned, t_tables) + " ms");
  std::string metadata = detail::read_regular_file_at(run_fd, "profiler_metadata.json", /*follow=*/false);
  note(detail::write_file_atomically_at(out.fd, "profiler_metadata.json",
                                        metadata.empty() ? "{}\n" : metadata,
                                        out.path + "/profiler_metadata.json"));
  if (options.data_simplification && recording) {
    add_warning(
        r, "raw/ is kept: --simplify does not remove the raw data of a run that is still being recorded");
  }
  json run_info = read_run_info(run_fd, run.string(), r);
  warn_about_gpu(run_info, r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  note(detail::write_file_atomically_at(
      out.fd, "profiler_info.json", output_info(run_info, model, loader, r, options, options.pretty, extra),
      out.path + "/profiler_info.json"));
  if (!errors.empty()) {
    r.error = errors;
    return r;
  }
  if (options.data_simplification && !recording) {
    std::string e = remove_raw_data(run_fd);
    if (!e.empty()) add_warning(r, "could not remove raw data: " + e);
  }
  if (options.link_trace_for_peers && options.export_text) {
    std::string e = link_trace_for_peers(run, out.fd);
    if (!e.empty()) add_warning(r, e);
  }
  r.ok = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

// Analyses one run directory in this process: under the run's analysis lock,
// every file relative to the run directory's descriptor.
RunAnalysis analyse_run(const std::string& dir, const AnalyseOptions& options) {
  RunAnalysis r;
  r.run_dir = dir;
  fs::path run = normalized(dir);
  try {
    // The run directory itself was named by the caller (or found without
    // following symlinks): below it nothing is followed.
    detail::UniqueFd run_fd(::open(run.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!run_fd.valid()) {
      r.error = "cannot open run directory '" + run.string() + "': " + std::strerror(errno);
      return r;
    }
    detail::UniqueFd lock = take_analysis_lock(run_fd.get(), run.string(), &r.error);
    if (!lock.valid()) return r;
    return analyse_locked_run(run, run_fd.get(), options, std::move(r));
  } catch (const std::exception& e) {  // never take the caller (a training process) down
    RunAnalysis failed;
    failed.run_dir = dir;
    failed.error = std::string("analysis failed: ") + e.what();
    return failed;
  }
}

namespace {

json to_json(const RunAnalysis& r) {
  return {{"run_dir", r.run_dir},   {"ok", r.ok},         {"error", r.error},
          {"warnings", r.warnings}, {"events", r.events}, {"seconds", r.seconds}};
}

RunAnalysis from_json(const std::string& text, const std::string& dir) {
  RunAnalysis r;
  r.run_dir = dir;
  try {
    json j = json::parse(text);
    r.ok = j.at("ok").get<bool>();
    r.error = j.at("error").get<std::string>();
    r.warnings = j.at("warnings").get<std::vector<std::string>>();
    r.events = j.at("events").get<uint64_t>();
    r.seconds = j.at("seconds").get<double>();
  } catch (const json::exception&) {
    r.ok = false;
    r.error = "analysis worker ended without a result";
  }
  return r;
}

struct Worker {
  pid_t pid;
  int fd;
  size_t index;
  std::string output;
};

// Runs analyse_run in a child process: a crash there fails one run only.
Worker start_worker(const std::string& dir, size_t index, const AnalyseOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) return Worker{-1, -1, index, {}};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    std::string text =
        to_json(analyse_run(dir, options)).dump(-1, ' ', false, json::error_handler_t::replace);
    detail::write_all(fds[1], text.data(), text.size());
    _exit(0);  // no atexit handlers: they belong to the parent
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return Worker{-1, -1, index, {}};
  }
  return Worker{pid, fds[0], index, {}};
}

RunAnalysis finish_worker(Worker& w, const std::string& dir) {
  // Read until EOF (the child closed its end by exiting), then reap it.
  char buf[65536];
  ssize_t n;
  while ((n = read(w.fd, buf, sizeof(buf))) > 0) w.output.append(buf, static_cast<size_t>(n));
  close(w.fd);
  int status = 0;
  waitpid(w.pid, &status, 0);
  if (WIFSIGNALED(status)) {
    RunAnalysis r;
    r.run_dir = dir;
    r.error = std::string("analysis worker was killed by signal ") + strsignal(WTERMSIG(status));
    return r;
  }
  return from_json(w.output, dir);
}

}  // namespace

AnalyseReport analyse(const std::string& path, const AnalyseOptions& options) {
  AnalyseReport report;
  std::vector<std::string> runs = find_run_directories(path);
  if (runs.empty()) {
    report.error = no_run_directory_error(path);
    return report;
  }
  if (options.shard_count > 1) {
    if (options.shard_index < 0 || options.shard_index >= options.shard_count) {
      report.error = "shard " + std::to_string(options.shard_index) + " of " +
                     std::to_string(options.shard_count) + " does not exist";
      return report;
    }
    std::vector<std::string> mine;
    for (size_t i = static_cast<size_t>(options.shard_index); i < runs.size();
         i += static_cast<size_t>(options.shard_count)) {
      mine.push_back(runs[i]);
    }
    runs = std::move(mine);
    if (runs.empty()) return report;
  }
  size_t total = runs.size();
  report.runs.resize(total);
  if (total == 1) {
    report.runs[0] = analyse_run(runs[0], options);
    if (options.on_progress) options.on_progress(1, 1);
    return report;
  }
  size_t workers = options.max_workers > 0 ? static_cast<size_t>(options.max_workers)
                                           : std::max<size_t>(1, std::thread::hardware_concurrency() / 2);
  std::vector<Worker> active;
  size_t next = 0, done = 0;
  while (done < total) {
    while (next < total && active.size() < workers) {
      Worker w = start_worker(runs[next], next, options);
      if (w.pid < 0) {
        report.runs[next] =
            RunAnalysis{runs[next], false, "cannot start an analysis worker process", {}, 0, 0};
        ++done;
      } else {
        active.push_back(w);
      }
      ++next;
    }
    if (active.empty()) continue;
    // Wait for any worker's pipe to reach EOF.
    std::vector<pollfd> fds;
    for (const Worker& w : active) fds.push_back(pollfd{w.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), -1);
    for (size_t i = 0; i < active.size();) {
      if (fds[i].revents == 0) {
        ++i;
        continue;
      }
      char buf[65536];
      ssize_t n = read(active[i].fd, buf, sizeof(buf));
      if (n > 0) {
        active[i].output.append(buf, static_cast<size_t>(n));
        ++i;
        continue;
      }
      report.runs[active[i].index] = finish_worker(active[i], runs[active[i].index]);
      ++done;
      if (options.on_progress) options.on_progress(done, total);
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return report;
}

}  // namespace trainprof
