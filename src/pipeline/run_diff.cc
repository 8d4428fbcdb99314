// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trainprof::diff_runs (include/trainprof/diff.h): each run's PROFILER_OUTPUT
// tables read back, summed per step, and compared.
#include <fcntl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "analysis/passes.h"
#include "base/json_limits.h"
#include "base/safe_file.h"
#include "exporter/csv_reader.h"
#include "exporter/text_format.h"
#include "pipeline/run_directories.h"
#include "trainprof/analyse.h"
#include "trainprof/diff.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;

// An integer field of a JSON object, `fallback` when absent or not one.
int int_field(const nlohmann::json& j, const char* name, int fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(name);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

constexpr size_t kRowsShown = 15;
constexpr size_t kNamesShown = 8;
// The step's parts, as step_trace_time.csv names them, and as said here.
constexpr std::pair<const char*, const char*> kParts[] = {
    {"Computing", "computing"},
    {"Communication(Not Overlapped)", "communication not overlapped"},
    {"Data Wait", "data wait"},
    {"Free", "free"},
};

// What one run's tables hold, summed over its steps.
struct RunTables {
  int ranks = 0;          // runs summed
  std::string straggler;  // a job's, from its cluster analysis: "rank 2 (compute)", "none", "" (not analysed)
  int steps = 0;          // over every rank
  double step_us = 0;
  std::map<std::string, double> parts;
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> rows;  // (where, name): calls, us
  std::map<std::string, std::set<std::string>> shapes;                            // host name: input shapes
};

int column(const std::vector<std::string>& header, const std::string& name) {
  auto it = std::find(header.begin(), header.end(), name);
  return it == header.end() ? -1 : static_cast<int>(it - header.begin());
}

double number(const std::vector<std::string>& row, int col) {
  if (col < 0 || static_cast<size_t>(col) >= row.size()) return 0;
  double v = std::strtod(row[static_cast<size_t>(col)].c_str(), nullptr);
  return std::isfinite(v) ? v : 0;
}

// A table of the run's PROFILER_OUTPUT with the columns `needed`; "" or why not.
std::string read_table(const std::string& run, const char* file, std::initializer_list<const char*> needed,
                       exporter::CsvRows* rows) {
  std::string path = run + "/PROFILER_OUTPUT/" + file;
  *rows = exporter::read_csv_file(path);
  if (rows->empty()) return "cannot read '" + path + "'";
  for (const char* name : needed) {
    if (column(rows->front(), name) < 0) return "'" + path + "' has no column '" + name + "'";
  }
  return "";
}

// The output's analysis.in_steps (per name, inside the counted steps)
// added to `t`'s rows; false when the run has none (analysed by an older
// version) or it is malformed.
bool add_in_steps(const std::string& run, RunTables* t) {
  nlohmann::json info =
      base::read_json_object((fs::path(run) / "PROFILER_OUTPUT" / "profiler_info.json").string());
  const nlohmann::json* in = nullptr;
  if (info.is_object() && info.contains("analysis") && info["analysis"].is_object() &&
      info["analysis"].contains("in_steps"))
    in = &info["analysis"]["in_steps"];
  if (in == nullptr || !in->is_object()) return false;
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> rows;
  for (const char* where : {"host", "gpu"}) {
    auto list = in->find(where);
    if (list == in->end() || !list->is_array()) return false;
    for (const nlohmann::json& row : *list) {
      if (!row.is_array() || row.size() != 3 || !row[0].is_string() || !row[1].is_number() ||
          !row[2].is_number())
        return false;
      auto& [c, us] = rows[{where, row[0].get<std::string>()}];
      c += row[1].get<double>();
      us += row[2].get<double>();
    }
  }
  for (const auto& [key, v] : rows) {
    auto& [c, us] = t->rows[key];
    c += v.first;
    us += v.second;
  }
  return true;
}

// One analysed run's tables added to `t`.
std::string load_run(const std::string& run, RunTables* t) {
  exporter::CsvRows steps, ops, stats;
  std::string error = read_table(run, "step_trace_time.csv", {"Step", "Computing", "Free"}, &steps);
  if (error.empty())
    error = read_table(run, "operator_details.csv", {"Name", "Host Self Duration(us)", "Calls"}, &ops);
  if (error.empty())
    error = read_table(run, "op_statistic.csv", {"OP Type", "Core Type", "Count", "Total Time(us)"}, &stats);
  if (!error.empty()) return error;
  const std::vector<std::string>& sh = steps.front();
  std::vector<double> durations;
  for (size_t i = 1; i < steps.size(); ++i) {
    double us = 0;
    for (const auto& [column_name, said] : kParts) us += number(steps[i], column(sh, column_name));
    durations.push_back(us);
  }
  size_t counted = analysis::whole_steps(durations);  // the sliver open at stop() left out
  for (size_t i = 1; i <= counted; ++i) {
    ++t->steps;
    for (const auto& [column_name, said] : kParts) {
      double us = number(steps[i], column(sh, column_name));
      t->parts[said] += us;
      t->step_us += us;
    }
  }
  if (t->steps == 0)
    return "'" + run + "' has no steps (ProfilerStep): mark them with step() to compare per step";
  // What ran inside the counted steps (the tables count the start-up and
  // the tail too); runs analysed before it was written: the tables.
  bool in_steps = add_in_steps(run, t);
  const std::vector<std::string>& oh = ops.front();
  int name = column(oh, "Name"), self = column(oh, "Host Self Duration(us)"), calls = column(oh, "Calls"),
      shapes = column(oh, "Input Shapes");
  for (size_t i = 1; i < ops.size(); ++i) {
    if (static_cast<size_t>(name) >= ops[i].size()) continue;
    if (!in_steps) {
      auto& [c, us] = t->rows[{"host", ops[i][static_cast<size_t>(name)]}];
      c += number(ops[i], calls);
      us += number(ops[i], self);
    }
    if (shapes >= 0 && static_cast<size_t>(shapes) < ops[i].size() &&
        !ops[i][static_cast<size_t>(shapes)].empty())
      t->shapes[ops[i][static_cast<size_t>(name)]].insert(ops[i][static_cast<size_t>(shapes)]);
  }
  const std::vector<std::string>& st = stats.front();
  int type = column(st, "OP Type"), core = column(st, "Core Type"), count = column(st, "Count"),
      total = column(st, "Total Time(us)");
  for (size_t i = 1; i < stats.size() && !in_steps; ++i) {
    if (static_cast<size_t>(std::max(type, core)) >= stats[i].size() ||
        stats[i][static_cast<size_t>(core)] != "GPU")
      continue;
    auto& [c, us] = t->rows[{"gpu", stats[i][static_cast<size_t>(type)]}];
    c += number(stats[i], count);
    us += number(stats[i], total);
  }
  return "";
}

// The runs of a side: a run, or a job's directory of runs, one per rank.
std::string side_runs(const std::string& path, std::vector<std::string>* runs) {
  *runs = find_run_directories(path);
  if (runs->empty()) return no_run_directory_error(path);
  return "";
}

// A side's runs (analysed): every run's steps and rows summed, so that "per
// step" is per rank and step.
std::string load(const std::string& path, const std::vector<std::string>& runs, RunTables* t) {
  if (runs.size() > 1) {
    std::map<int, std::string> by_rank;
    for (const std::string& run : runs) {
      nlohmann::json info = base::read_json_object((fs::path(run) / "profiler_info.json").string());
      int rank = int_field(info, "rank", 0);
      auto [it, fresh] = by_rank.emplace(rank, run);
      if (!fresh) {
        return "'" + path + "' is not one run or one job (" + std::to_string(runs.size()) +
               " runs at or below it, two of rank " + std::to_string(rank) + ": '" + it->second + "' and '" +
               run + "'): give a run, or a job's directory with one run per rank";
      }
    }
    nlohmann::json c = base::read_json_object(
        (fs::path(path) / "cluster_analysis_output" / "cluster_analysis.json").string());
    if (c.is_object() && c.contains("straggler")) {
      int straggler = int_field(c, "straggler", -1);
      t->straggler = straggler < 0 ? "none"
                                   : "rank " + std::to_string(straggler) + " (" +
                                         c.value("cause", std::string("unknown")) + ")";
    }
  }
  for (const std::string& run : runs) {
    std::string error = load_run(run, t);
    if (!error.empty()) return error;
    ++t->ranks;
  }
  return "";
}

// The members of `a` not in `b`, "; "-joined, at most 3.
std::string only_in(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  int shown = 0;
  for (const std::string& s : a) {
    if (b.count(s) != 0) continue;
    if (shown++ == 3) return out + "; ...";
    out += (out.empty() ? "" : "; ") + s;
  }
  return out;
}

std::string ms_from_us(double us) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", us / 1e3);
  return text;
}

std::string signed_ms_from_us(double us) {
  char text[32];
  std::snprintf(text, sizeof(text), "%+.3f ms", us / 1e3);
  return text;
}

std::string report_text(const DiffReport& d) {
  auto side = [](const std::string& path, int ranks, int steps, const std::string& straggler) {
    std::string out = path + " (" + std::to_string(steps) + " steps";
    if (ranks > 1) out += " of " + std::to_string(ranks) + " ranks; per step means per rank and step";
    if (!straggler.empty()) out += "; straggler: " + straggler;
    return out + ")\n";
  };
  std::string out = "A: " + side(d.run_a, d.ranks_a, d.steps_a, d.straggler_a) +
                    "B: " + side(d.run_b, d.ranks_b, d.steps_b, d.straggler_b);
  double change = d.step_us_b - d.step_us_a;
  char pct[32] = "";
  if (d.step_us_a > 0) std::snprintf(pct, sizeof(pct), " (%+.1f %%)", 100.0 * change / d.step_us_a);
  out += "step: A " + ms_from_us(d.step_us_a) + ", B " + ms_from_us(d.step_us_b) + ": " +
         signed_ms_from_us(change) + pct + "\n";
  for (const auto& [part, ab] : d.parts) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-30s A %12s  B %12s  %s\n", part.c_str(),
                  ms_from_us(ab.first).c_str(), ms_from_us(ab.second).c_str(),
                  signed_ms_from_us(ab.second - ab.first).c_str());
    out += line;
  }
  out += "what changed per step (host: self time; gpu: kernels, copies, sets), largest first:\n";
  size_t shown = 0;
  for (const DiffRow& r : d.rows) {
    if (shown == kRowsShown) break;
    if (r.delta_us() == 0) continue;
    ++shown;
    char line[512];
    std::snprintf(line, sizeof(line), "  %12s  %s (%s)  %s -> %s, calls %.1f -> %.1f%s\n",
                  signed_ms_from_us(r.delta_us()).c_str(), r.name.c_str(), r.where.c_str(),
                  ms_from_us(r.us_a).c_str(), ms_from_us(r.us_b).c_str(), r.calls_a, r.calls_b,
                  r.status == "both" ? "" : (r.status == "added" ? ", only in B" : ", only in A"));
    out += line;
  }
  if (shown == 0) out += "  nothing\n";
  for (const char* status : {"added", "removed"}) {
    std::vector<std::string> names;
    for (const DiffRow& r : d.rows)
      if (r.status == status) names.push_back(r.name + " (" + r.where + ")");
    if (names.empty()) continue;
    out += std::string(status == std::string("added") ? "only in B: " : "only in A: ");
    for (size_t i = 0; i < names.size() && i < kNamesShown; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > kNamesShown) out += ", ... (" + std::to_string(names.size()) + ")";
    out += "\n";
  }
  for (const DiffRow& r : d.rows) {
    if (r.shapes_only_a.empty() && r.shapes_only_b.empty()) continue;
    out += "input shapes of " + r.name + ": only in A [" + r.shapes_only_a + "], only in B [" +
           r.shapes_only_b + "]\n";
  }
  return out;
}

std::string report_csv(const DiffReport& d) {
  std::string csv =
      "Name,Where,Status,Calls per Step A,Calls per Step B,Time per Step A(us),Time per Step B(us),"
      "Change per Step(us),Input Shapes Only in A,Input Shapes Only in B\r\n";
  for (const DiffRow& r : d.rows) {
    exporter::append_csv_field(csv, r.name);
    csv += "," + r.where + "," + r.status + ",";
    for (double v : {r.calls_a, r.calls_b, r.us_a, r.us_b, r.delta_us()}) {
      exporter::append_fixed(csv, v, 3);
      csv += ",";
    }
    exporter::append_csv_field(csv, r.shapes_only_a);
    csv += ",";
    exporter::append_csv_field(csv, r.shapes_only_b);
    csv += "\r\n";
  }
  return csv;
}

}  // namespace

DiffReport diff_runs(const std::string& run_a, const std::string& run_b, const std::string& csv_file) {
  DiffReport d;
  d.run_a = run_a;
  d.run_b = run_b;
  RunTables a, b;
  std::vector<std::string> runs_a, runs_b;
  std::string error = side_runs(run_a, &runs_a);
  if (error.empty()) error = side_runs(run_b, &runs_b);
  if (error.empty()) {
    std::vector<std::string> both = runs_a;
    both.insert(both.end(), runs_b.begin(), runs_b.end());
    error = pipeline::analyse_missing(both);
  }
  if (error.empty()) error = load(run_a, runs_a, &a);
  if (error.empty()) error = load(run_b, runs_b, &b);
  if (!error.empty()) {
    d.error = error;
    return d;
  }
  d.steps_a = a.steps;
  d.steps_b = b.steps;
  d.ranks_a = a.ranks;
  d.ranks_b = b.ranks;
  d.straggler_a = a.straggler;
  d.straggler_b = b.straggler;
  d.step_us_a = a.step_us / a.steps;
  d.step_us_b = b.step_us / b.steps;
  for (const auto& [column_name, said] : kParts)
    d.parts.push_back({said, {a.parts[said] / a.steps, b.parts[said] / b.steps}});
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& [key, v] : a.rows) keys.insert(key);
  for (const auto& [key, v] : b.rows) keys.insert(key);
  for (const auto& key : keys) {
    DiffRow r;
    r.where = key.first;
    r.name = key.second;
    auto in_a = a.rows.find(key), in_b = b.rows.find(key);
    if (in_a != a.rows.end()) {
      r.calls_a = in_a->second.first / a.steps;
      r.us_a = in_a->second.second / a.steps;
    }
    if (in_b != b.rows.end()) {
      r.calls_b = in_b->second.first / b.steps;
      r.us_b = in_b->second.second / b.steps;
    }
    r.status = in_a == a.rows.end() ? "added" : (in_b == b.rows.end() ? "removed" : "both");
    if (r.where == "host" && r.status == "both") {
      r.shapes_only_a = only_in(a.shapes[r.name], b.shapes[r.name]);
      r.shapes_only_b = only_in(b.shapes[r.name], a.shapes[r.name]);
    }
    d.rows.push_back(std::move(r));
  }
  std::stable_sort(d.rows.begin(), d.rows.end(), [](const DiffRow& x, const DiffRow& y) {
    return std::fabs(x.delta_us()) > std::fabs(y.delta_us());
  });
  d.text = report_text(d);
  d.csv = report_csv(d);
  if (!csv_file.empty()) {
    fs::path p(csv_file);
    std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    base::UniqueFd dir_fd(base::open_directory_at(AT_FDCWD, dir));
    d.error = dir_fd.valid()
                  ? base::write_file_atomically_at(dir_fd.get(), p.filename().string(), d.csv, csv_file, 0644)
                  : "cannot open the directory '" + dir + "' for '" + csv_file + "'";
  }
  return d;
}

}  // namespace trainprof
