// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof::McpServer (include/trainprof/mcp.h): the Model Context
// Protocol's handshake and its tools over the public analysis API, one
// JSON-RPC message at a time. Transport-free: `trainprof mcp` reads stdin.
#include "trainprof/mcp.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "base/close_names.h"
#include "base/json_limits.h"
#include "base/string_format.h"
#include "exporter/csv_reader.h"
#include "pipeline/run_directories.h"
#include "trainprof/advise.h"
#include "trainprof/analyse.h"
#include "trainprof/diff.h"
#include "trainprof/key_averages.h"
#include "trainprof/version.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// JSON-RPC 2.0's error codes.
constexpr int kParseError = -32700, kInvalidRequest = -32600, kMethodNotFound = -32601,
              kInvalidParams = -32602;

// The revisions of the initialize handshake this server speaks, oldest first.
const std::vector<std::string> kProtocolVersions = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"};

constexpr size_t kDefaultSqlRows = 100, kMaxSqlRows = 10000;
constexpr size_t kDefaultKeyRows = 30;

// What a tool failed at: said to the agent as a tool result (isError), not
// as a protocol error, so that it can correct its call.
struct ToolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

json text_content(const std::string& text, bool is_error) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", is_error}};
}

std::string size_text(size_t bytes) {
  return bytes < 1024 ? std::to_string(bytes) + " bytes" : std::to_string((bytes + 1023) / 1024) + " KiB";
}

// `text` cut at `limit` bytes on a character's boundary, saying so.
std::string bounded(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "\n[cut at " + size_text(limit) + " of " + size_text(text.size()) +
         ": ask for less, e.g. one run rather than a directory, or fewer rows]\n";
}

std::string string_argument(const json& args, const char* name, bool required) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null()) {
    if (required) throw ToolError(std::string("the argument '") + name + "' is required");
    return "";
  }
  if (!it->is_string()) throw ToolError(std::string("the argument '") + name + "' must be a string");
  return it->get<std::string>();
}

int64_t integer_argument(const json& args, const char* name, int64_t fallback, int64_t low, int64_t high) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    throw ToolError(std::string("the argument '") + name + "' must be an integer");
  int64_t v = it->get<int64_t>();
  if (v < low || v > high) {
    throw ToolError(std::string("the argument '") + name + "' must be in [" + std::to_string(low) + ", " +
                    std::to_string(high) + "], got " + std::to_string(v));
  }
  return v;
}

bool bool_argument(const json& args, const char* name) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw ToolError(std::string("the argument '") + name + "' must be true or false");
  return it->get<bool>();
}

}  // namespace

struct McpServer::State {
  // A tool: what tools/list says of it, and what answers its calls.
  using Handler = std::string (State::*)(const json&) const;
  struct Tool {
    const char* name;
    const char* description;
    json input_schema;
    Handler handler;
  };
  static std::vector<Tool> tool_table();

  McpOptions options;
  fs::path root;  // canonical
  std::vector<Tool> tools = tool_table();

  // `given` under the root, canonical; refused when it leads out of it.
  std::string resolve(const std::string& given) const {
    if (given.find('\0') != std::string::npos) throw ToolError("a path cannot hold a NUL byte");
    fs::path p = given.empty() ? root : fs::path(given);
    if (p.is_relative()) p = root / p;
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(p, ec);
    if (ec) throw ToolError("cannot resolve '" + given + "': " + ec.message());
    fs::path rel = canonical.lexically_relative(root);
    if (rel.empty() || *rel.begin() == "..") {
      throw ToolError("'" + given + "' is outside the root this server reads (" + root.string() +
                      "): only paths under it are served");
    }
    if (!fs::exists(canonical, ec)) throw ToolError("'" + given + "' does not exist under " + root.string());
    return canonical.string();
  }

  std::string shown(const std::string& path) const {
    fs::path rel = fs::path(path).lexically_relative(root);
    return rel.empty() || rel == "." ? "." : rel.string();
  }

  // The runs at or below `path`, each analysed if it is not yet.
  std::vector<std::string> analysed_runs(const std::string& path) const {
    std::vector<std::string> runs = find_run_directories(path);
    if (runs.empty()) throw ToolError(no_run_directory_error(shown(path)));
    if (std::string error = pipeline::analyse_missing(runs); !error.empty()) throw ToolError(error);
    return runs;
  }

  std::string one_run(const std::string& path) const {
    std::vector<std::string> runs = find_run_directories(path);
    if (runs.empty()) throw ToolError(no_run_directory_error(shown(path)));
    if (runs.size() > 1) {
      throw ToolError("'" + shown(path) + "' holds " + std::to_string(runs.size()) +
                      " runs: name one (list_runs lists them)");
    }
    return runs[0];
  }

  std::string list_runs(const json& args) const {
    std::string path = resolve(string_argument(args, "path", false));
    std::vector<std::string> runs = find_run_directories(path);
    if (runs.empty()) throw ToolError(no_run_directory_error(shown(path)));
    json list = json::array();
    for (const std::string& run : runs) {
      json entry = {{"run", shown(run)}, {"analysed", pipeline::is_analysed(run)}};
      json info = base::read_json_object((fs::path(run) / "profiler_info.json").string());
      if (auto rank = info.find("rank"); rank != info.end() && rank->is_number_integer())
        entry["rank"] = *rank;
      list.push_back(std::move(entry));
    }
    return base::json_text(json{{"root", root.string()}, {"runs", list}});
  }

  std::string summary(const json& args) const {
    std::string text;
    for (const std::string& run : analysed_runs(resolve(string_argument(args, "path", true)))) {
      text += summarize_run(run);
    }
    return text;
  }

  std::string advise_tool(const json& args) const {
    AdviceReport a = advise(resolve(string_argument(args, "path", true)));
    if (!a.ok()) throw ToolError(a.error);
    json findings;
    if (!base::parse_json_limited(a.json, &findings).empty()) findings = json::array();
    return base::json_text(json{{"findings", findings}, {"warnings", a.warnings}});
  }

  std::string sql(const json& args) const {
    std::string path = resolve(string_argument(args, "path", true));
    std::string query = string_argument(args, "query", true);
    // A directory of one run (and no cluster pass) stands for that run, as
    // it does for the other tools.
    std::error_code ec;
    if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "cluster_analysis_output", ec)) {
      if (std::vector<std::string> runs = find_run_directories(path); runs.size() == 1) path = runs[0];
    }
    auto max_rows = static_cast<size_t>(
        integer_argument(args, "max_rows", kDefaultSqlRows, 1, static_cast<int64_t>(kMaxSqlRows)));
    std::string out;
    size_t rows = 0;  // the header row not counted
    bool header = true;
    std::string error = query_cluster_database(path, query, [&](const QueryRow& row) {
      if (!header && rows++ >= max_rows) return;
      out += query_row_csv(row) + '\n';
      header = false;
    });
    if (!error.empty()) throw ToolError(error);
    if (rows > max_rows) {
      out += "[" + std::to_string(rows - max_rows) + " more rows not shown: raise max_rows (at most " +
             std::to_string(kMaxSqlRows) + ") or narrow the query]\n";
    }
    return out;
  }

  std::string diff(const json& args) const {
    std::string a = resolve(string_argument(args, "run_a", true));
    std::string b = resolve(string_argument(args, "run_b", true));
    DiffReport d = diff_runs(a, b);
    if (!d.ok()) throw ToolError(d.error);
    return d.text;
  }

  std::string critical_path(const json& args) const {
    std::string run = one_run(resolve(string_argument(args, "run", true)));
    analysed_runs(run);
    fs::path file = fs::path(run) / "PROFILER_OUTPUT" / "critical_path.csv";
    bool well_formed = false;
    exporter::CsvRows rows = exporter::read_csv_file(file.string(), &well_formed);
    if (rows.size() < 2) {
      throw ToolError(shown(run) + " has no critical path (critical_path.csv is " +
                      (rows.empty() ? "missing: analysed with --no-critical-path?" : "empty: no whole step") +
                      ")");
    }
    const std::vector<std::string>& head = rows[0];
    auto column = [&](const char* name) {
      auto it = std::find(head.begin(), head.end(), name);
      if (it == head.end()) throw ToolError(file.string() + " has no column '" + name + "'");
      return static_cast<size_t>(it - head.begin());
    };
    size_t step_c = column("Step"), kind_c = column("Kind"), name_c = column("Name"),
           start_c = column("Start Time(us)"), dur_c = column("Duration(us)"),
           share_c = column("Step Share(%)"), thread_c = column("Thread Id"), stream_c = column("Stream Id");
    std::map<int64_t, double> step_us;
    for (size_t r = 1; r < rows.size(); ++r) {
      if (rows[r].size() != head.size()) continue;
      step_us[std::strtoll(rows[r][step_c].c_str(), nullptr, 10)] +=
          std::strtod(rows[r][dur_c].c_str(), nullptr);
    }
    int64_t slowest = std::max_element(step_us.begin(), step_us.end(), [](const auto& x, const auto& y) {
                        return x.second < y.second;
                      })->first;
    int64_t step = integer_argument(args, "step", slowest, INT64_MIN, INT64_MAX);
    if (step_us.count(step) == 0) {
      std::string steps;
      for (const auto& [s, us] : step_us) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
      throw ToolError("step " + std::to_string(step) + " has no critical path in " + shown(run) +
                      "; the steps are: " + steps);
    }
    std::string text = base::format("step %lld%s: critical path %.3f ms\n", static_cast<long long>(step),
                                    step == slowest ? " (the slowest)" : "", step_us[step] / 1e3);
    text += "start(ms)  duration(ms)  share(%)  kind  name  [thread or stream]\n";
    double origin = -1;
    for (size_t r = 1; r < rows.size(); ++r) {
      const std::vector<std::string>& row = rows[r];
      if (row.size() != head.size() || std::strtoll(row[step_c].c_str(), nullptr, 10) != step) continue;
      double start = std::strtod(row[start_c].c_str(), nullptr);
      if (origin < 0) origin = start;
      std::string where = !row[stream_c].empty() ? "stream " + row[stream_c] : "thread " + row[thread_c];
      text +=
          base::format("%9.3f  %12.3f  %8s  %s  %s  [%s]\n", (start - origin) / 1e3,
                       std::strtod(row[dur_c].c_str(), nullptr) / 1e3, row[share_c].c_str(),
                       row[kind_c].c_str(), row[name_c].empty() ? "-" : row[name_c].c_str(), where.c_str());
    }
    return text;
  }

  std::string key_averages_tool(const json& args) const {
    std::string run = one_run(resolve(string_argument(args, "run", true)));
    KeyAveragesOptions o;
    o.group_by_input_shape = bool_argument(args, "group_by_input_shape");
    auto limit = static_cast<size_t>(integer_argument(args, "row_limit", kDefaultKeyRows, 1, 100000));
    KeyAverages k = key_averages(run, o);
    if (!k.error.empty()) throw ToolError(k.error);
    std::string text = base::format("%zu keys of %s, by self time (ms)\n", k.rows.size(), shown(run).c_str());
    text +=
        o.group_by_input_shape ? "name  input shapes  calls  total  self\n" : "name  calls  total  self\n";
    for (size_t i = 0; i < k.rows.size() && i < limit; ++i) {
      const KeyAverage& r = k.rows[i];
      text += r.name +
              (o.group_by_input_shape ? "  " + (r.input_shapes.empty() ? "-" : r.input_shapes) : "") +
              base::format("  %llu  %.3f  %.3f\n", static_cast<unsigned long long>(r.count), r.total_ns / 1e6,
                           r.self_ns / 1e6);
    }
    if (k.rows.size() > limit)
      text += "[" + std::to_string(k.rows.size() - limit) + " more: raise row_limit]\n";
    for (const std::string& w : k.warnings) text += "warning: " + w + "\n";
    return text;
  }

  json call_tool(const std::string& name, const json& args) {
    auto it = std::find_if(tools.begin(), tools.end(), [&](const Tool& t) { return name == t.name; });
    if (it == tools.end()) return nullptr;  // the caller's protocol error
    try {
      return text_content(bounded((this->*(it->handler))(args), options.max_answer_bytes), false);
    } catch (const ToolError& e) {
      return text_content(e.what(), true);
    } catch (const std::exception& e) {
      return text_content(std::string("trainprof failed: ") + e.what(), true);
    }
  }

  json initialize(const json& params) const {
    std::string asked = params.is_object() ? base::string_field(params, "protocolVersion") : "";
    bool known =
        std::find(kProtocolVersions.begin(), kProtocolVersions.end(), asked) != kProtocolVersions.end();
    return {
        {"protocolVersion", known ? asked : kProtocolVersions.back()},
        {"capabilities", {{"tools", {{"listChanged", false}}}}},
        {"serverInfo", {{"name", "trainprof"}, {"version", std::string(version())}}},
        {"instructions",
         "trainprof's runs under " + root.string() +
             ": list_runs finds them; summary and advise say where a training step's time went and what to "
             "change; sql queries trainprof.db; diff compares two runs; critical_path and key_averages go "
             "into one run. Paths are relative to that directory."}};
  }

  json tools_list() const {
    json list = json::array();
    for (const Tool& t : tools) {
      list.push_back({{"name", t.name}, {"description", t.description}, {"inputSchema", t.input_schema}});
    }
    return {{"tools", list}};
  }
};

std::vector<McpServer::State::Tool> McpServer::State::tool_table() {
  auto path = [](const std::string& what) {
    return json{{"type", "string"},
                {"description", what + " Relative paths are taken under the server's root; a path outside it "
                                       "is refused."}};
  };
  auto object = [](json properties, std::vector<std::string> required) {
    json schema = {{"type", "object"}, {"properties", std::move(properties)}};
    if (!required.empty()) schema["required"] = required;
    return schema;
  };
  auto rows = [](const char* what, int64_t maximum) {
    return json{{"type", "integer"}, {"description", what}, {"minimum", 1}, {"maximum", maximum}};
  };
  return {
      {"list_runs",
       "The run directories at or below a path (default: the root): each run's path, whether it is "
       "analysed, its rank.",
       object({{"path", path("A directory.")}}, {}), &State::list_runs},
      {"summary",
       "What an analysed run shows, as `trainprof summary` prints it: the operators and ranges with the "
       "most self time, each step's breakdown, what the advisor found, where the outputs are. Runs not "
       "analysed yet are analysed first.",
       object({{"path", path("A run, or a directory of runs.")}}, {"path"}), &State::summary},
      {"advise",
       "The advisor's findings as JSON: each rule, title, evidence, the change to make and what it saves "
       "per step, the largest saving first; for several ranks the cluster's findings too (the straggler, "
       "slow links).",
       object({{"path", path("A run, or a directory of runs.")}}, {"path"}), &State::advise_tool},
      {"sql",
       "Runs one read-only SQL statement (SELECT or WITH) on trainprof.db: a run's "
       "PROFILER_OUTPUT/trainprof.db (export_type db) or a cluster's cluster_analysis_output/trainprof.db. "
       "Returns CSV with a header row.",
       object({{"path", path("The database, or a directory holding it.")},
               {"query", {{"type", "string"}, {"description", "One SELECT or WITH statement."}}},
               {"max_rows", rows("The most rows returned (default 100, at most 10000).", kMaxSqlRows)}},
              {"path", "query"}),
       &State::sql},
      {"diff",
       "Compares two runs per step, as `trainprof diff` prints it: the mean step and its parts, then the "
       "operators, ranges and kernels whose time per step changed, largest change first.",
       object({{"run_a", path("The baseline run.")}, {"run_b", path("The run compared with it.")}},
              {"run_a", "run_b"}),
       &State::diff},
      {"critical_path",
       "A step's critical path (critical_path.csv): the chain of work that decided its length, in order, "
       "with each segment's kind, name, start (ms from the step's start), duration and share of the step.",
       object({{"run", path("One analysed run.")},
               {"step", {{"type", "integer"}, {"description", "The step (default: the slowest)."}}}},
              {"run"}),
       &State::critical_path},
      {"key_averages",
       "torch.profiler's key_averages() of one run: per operator or range its calls, total and self time "
       "(ms), by self time, largest first.",
       object({{"run", path("One run (its raw data is read).")},
               {"group_by_input_shape",
                {{"type", "boolean"}, {"description", "One row per (name, input shapes) (record_shapes)."}}},
               {"row_limit", rows("The most rows (default 30).", 100000)}},
              {"run"}),
       &State::key_averages_tool},
  };
}

McpServer::McpServer(McpOptions options) : state_(new State) {
  std::error_code ec;
  if (options.root.empty() || !fs::is_directory(options.root, ec)) {
    throw std::invalid_argument("the root '" + options.root + "' is not a directory");
  }
  state_->root = fs::canonical(options.root, ec);
  if (ec) throw std::invalid_argument("cannot resolve the root '" + options.root + "': " + ec.message());
  state_->options = std::move(options);
}

McpServer::~McpServer() = default;

std::string McpServer::handle(std::string_view message) {
  auto reply = [](const json& id, json result) {
    return base::json_text(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
  };
  auto error = [](const json& id, int code, const std::string& text) {
    return base::json_text(
        json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", text}}}});
  };
  // Blank lines between messages carry nothing.
  if (message.find_first_not_of(" \t\r\n") == std::string_view::npos) return "";
  json m;
  if (std::string e = base::parse_json_limited(message, &m); !e.empty()) {
    return error(nullptr, kParseError, "not JSON: " + e);
  }
  if (!m.is_object()) return error(nullptr, kInvalidRequest, "a message is a JSON object");
  auto method_it = m.find("method");
  bool has_id = m.contains("id");
  json id = has_id ? m["id"] : json(nullptr);
  if (method_it == m.end()) {
    // A response to a request of ours (there are none) asks for nothing.
    if (m.contains("result") || m.contains("error")) return "";
    return error(id, kInvalidRequest, "a request needs a 'method'");
  }
  if (!method_it->is_string()) return error(id, kInvalidRequest, "'method' must be a string");
  const std::string method = method_it->get<std::string>();
  if (!has_id) return "";  // notifications (initialized, cancelled, ...) need no reply
  if (!(id.is_string() || id.is_number_integer())) {
    return error(nullptr, kInvalidRequest, "'id' must be a string or an integer");
  }
  json params = m.value("params", json::object());
  try {
    if (method == "initialize") return reply(id, state_->initialize(params));
    if (method == "ping") return reply(id, json::object());
    if (method == "tools/list") return reply(id, state_->tools_list());
    if (method == "tools/call") {
      if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
        return error(id, kInvalidParams, "tools/call needs the tool's 'name'");
      }
      const std::string name = params["name"].get<std::string>();
      json args = params.value("arguments", json::object());
      if (!args.is_object()) return error(id, kInvalidParams, "'arguments' must be an object");
      json result = state_->call_tool(name, args);
      if (result.is_null()) {
        std::vector<std::string> names;
        for (const State::Tool& t : state_->tools) names.emplace_back(t.name);
        return error(id, kInvalidParams, "no tool '" + name + "'" + base::did_you_mean(name, names));
      }
      return reply(id, std::move(result));
    }
  } catch (const std::exception& e) {
    return error(id, kInvalidParams, e.what());
  }
  return error(id, kMethodNotFound,
               "method '" + method +
                   "' is not served (initialize, ping, tools/list, "
                   "tools/call are)");
}

}  // namespace trainprof
