// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// report.html (trainprof::write_report): one self-contained page per PATH,
// built from the analysed runs' outputs.
//
// Everything is inline (CSS, SVG charts, a few lines of script that sort the
// tables), so the page opens anywhere without a network. The tables show the
// CSV files' own figures, unchanged; the charts draw them. Per run: the
// step-time breakdown as stacked bars, the top operators, the allocator's
// totals over time with the peak, the data-pipeline stages, and a timeline of
// the slowest step read from trace_view.json (events are written in time
// order, one a line, so the reading stops after that step). For a parent of
// several ranks' runs with a cluster analysis: a heat map of ranks x steps
// (binned to at most 128 x 64 cells, each its bin's most, so a slow rank
// shows however many there are), each rank's waiting and the waiting it
// caused (above 64 ranks, the 20 the others waited for most), and the
// straggler report; above 64 runs, only the straggler's and the lowest
// rank's own sections.
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/json_limits.h"
#include "base/safe_file.h"
#include "base/shell_quote.h"
#include "exporter/csv_reader.h"
#include "trainprof/analyse.h"
#include "trainprof/diff.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using exporter::CsvRows;
using nlohmann::json;

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(double v, int decimals = 1) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

double number(const std::string& s) {
  try {
    return std::stod(s);
  } catch (...) {
    return 0;
  }
}

// The column index of `name` in a CSV's header, -1: none.
int column(const CsvRows& rows, const std::string& name) {
  if (rows.empty()) return -1;
  auto it = std::find(rows[0].begin(), rows[0].end(), name);
  return it == rows[0].end() ? -1 : static_cast<int>(it - rows[0].begin());
}

std::string cell(const std::vector<std::string>& row, int index) {
  return index >= 0 && static_cast<size_t>(index) < row.size() ? row[static_cast<size_t>(index)] : "";
}

// A CSV table as HTML: the header and the rows as they are (the first
// `limit`), with a class the tests and the sorting script find.
std::string table(const CsvRows& rows, const std::string& css_class, size_t limit = SIZE_MAX) {
  std::string out = "<table class=\"" + css_class + " sortable\"><thead><tr>";
  for (const std::string& h : rows[0]) out += "<th>" + escape(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (size_t r = 1; r < rows.size() && r <= limit; ++r) {
    out += "<tr>";
    for (const std::string& c : rows[r]) out += "<td>" + escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

const char* kColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                          "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

// Stacked bars of the step breakdown: Computing, Communication (not
// overlapped), Data Wait, Free per step, in ms (they add up to the step).
constexpr int kStepParts = 4;
const char* const kStepPartNames[kStepParts] = {"Computing", "Communication(Not Overlapped)", "Data Wait",
                                                "Free"};

std::string step_chart(const CsvRows& steps) {
  const char* const* parts = kStepPartNames;
  int cols[kStepParts];
  for (int i = 0; i < kStepParts; ++i) cols[i] = column(steps, parts[i]);
  double most = 0;
  for (size_t r = 1; r < steps.size(); ++r) {
    double sum = 0;
    for (int c : cols) sum += number(cell(steps[r], c));
    most = std::max(most, sum);
  }
  if (most <= 0) return "";
  size_t n = steps.size() - 1;
  double bar = std::clamp(700.0 / static_cast<double>(n), 2.0, 40.0);
  int width = static_cast<int>(bar * static_cast<double>(n)) + 60, height = 220;
  std::string svg = "<svg class=\"step-chart\" width=\"" + std::to_string(width) + "\" height=\"" +
                    std::to_string(height + 30) + "\" role=\"img\">";
  svg += "<text x=\"0\" y=\"12\" class=\"axis\">" + fmt(most / 1000, 1) + " ms</text>";
  for (size_t r = 1; r <= n; ++r) {
    double y = height + 10;
    double x = 50 + bar * static_cast<double>(r - 1);
    for (int i = 0; i < kStepParts; ++i) {
      double us = number(cell(steps[r], cols[i]));
      double h = us / most * height;
      y -= h;
      svg += "<rect x=\"" + fmt(x, 1) + "\" y=\"" + fmt(y, 1) + "\" width=\"" +
             fmt(std::max(1.0, bar - 1), 1) + "\" height=\"" + fmt(h, 1) + "\" fill=\"" + kColours[i] +
             "\"><title>step " + escape(steps[r][0]) + ": " + parts[i] + " " + fmt(us / 1000, 3) +
             " ms</title></rect>";
    }
  }
  svg += "</svg><p class=\"legend\">";
  for (int i = 0; i < kStepParts; ++i) {
    svg += std::string("<span style=\"color:") + kColours[i] + "\">&#9632;</span> " + parts[i] + " ";
  }
  return svg + "</p>\n";
}

// The allocator's total over time (at most 1500 points: each the largest of
// its bucket, so the peak stays), and the peak.
std::string memory_chart(const CsvRows& rows) {
  int ts = column(rows, "Timestamp(us)"), allocated = column(rows, "Total Allocated(MB)");
  if (rows.size() < 2 || ts < 0 || allocated < 0) return "";
  size_t peak_row = 1;
  for (size_t r = 1; r < rows.size(); ++r) {
    if (number(cell(rows[r], allocated)) > number(cell(rows[peak_row], allocated))) peak_row = r;
  }
  double t0 = number(cell(rows[1], ts)), t1 = number(cell(rows.back(), ts));
  double peak = number(cell(rows[peak_row], allocated));
  const int width = 760, height = 180;
  size_t n = rows.size() - 1, buckets = std::min<size_t>(n, 1500);
  std::string points;
  for (size_t b = 0; b < buckets; ++b) {
    size_t from = 1 + b * n / buckets, to = 1 + (b + 1) * n / buckets;
    double top = 0, at = number(cell(rows[from], ts));
    for (size_t r = from; r < to; ++r) {
      double v = number(cell(rows[r], allocated));
      if (v >= top) top = v, at = number(cell(rows[r], ts));
    }
    double x = t1 > t0 ? (at - t0) / (t1 - t0) * width : 0;
    double y = peak > 0 ? height - top / peak * height : height;
    points += fmt(40 + x, 1) + "," + fmt(y + 10, 1) + " ";
  }
  std::string out = "<svg class=\"memory-chart\" width=\"" + std::to_string(width + 60) + "\" height=\"" +
                    std::to_string(height + 30) +
                    "\" role=\"img\"><polyline fill=\"none\" stroke=\"#4e79a7\" "
                    "points=\"" +
                    points + "\"/><text x=\"0\" y=\"12\" class=\"axis\">" + fmt(peak, 1) +
                    " MB</text></svg>\n";
  out += "<p class=\"memory-peak\" data-peak-mb=\"" + escape(cell(rows[peak_row], allocated)) +
         "\">Peak allocated: " + escape(cell(rows[peak_row], allocated)) + " MB (" +
         escape(cell(rows[peak_row], column(rows, "Device Type"))) + ") at " +
         fmt((number(cell(rows[peak_row], ts)) - t0) / 1000, 3) + " ms into the run's memory records</p>\n";
  return out;
}

// What the memory held over time, stacked by class (memory_timeline.csv,
// the device with the most alive), and what it held at that device's
// highest peak (memory_breakdown.csv's class rows of that step).
std::string memory_class_chart(const CsvRows& rows, const CsvRows& breakdown) {
  int ts = column(rows, "Timestamp(us)"), dev = column(rows, "Device Type");
  std::vector<int> cols;
  for (size_t c = 2; rows.size() > 1 && c < rows[0].size(); ++c) cols.push_back(static_cast<int>(c));
  if (rows.size() < 3 || ts < 0 || dev < 0 || cols.empty()) return "";
  std::map<std::string, double> most;  // per device
  for (size_t r = 1; r < rows.size(); ++r) {
    double sum = 0;
    for (int c : cols) sum += number(cell(rows[r], c));
    double& m = most[cell(rows[r], dev)];
    m = std::max(m, sum);
  }
  auto top = std::max_element(most.begin(), most.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string device = top->first;
  double peak = top->second;
  std::vector<size_t> picked;
  for (size_t r = 1; r < rows.size(); ++r) {
    if (cell(rows[r], dev) == device) picked.push_back(r);
  }
  if (picked.size() < 2 || peak <= 0) return "";
  double t0 = number(cell(rows[picked.front()], ts)), t1 = number(cell(rows[picked.back()], ts));
  const int width = 760, height = 180;
  auto x_of = [&](size_t r) {
    return 40 + (t1 > t0 ? (number(cell(rows[r], ts)) - t0) / (t1 - t0) * width : 0);
  };
  std::vector<double> below(picked.size(), 0);
  std::string svg = "<svg class=\"memory-class-chart\" data-device=\"" + escape(device) + "\" width=\"" +
                    std::to_string(width + 60) + "\" height=\"" + std::to_string(height + 30) +
                    "\" role=\"img\">";
  std::string legend = "<p class=\"legend\">";
  for (size_t i = 0; i < cols.size(); ++i) {
    std::string up, down;
    std::vector<double> above = below;
    for (size_t k = 0; k < picked.size(); ++k) {
      above[k] += number(cell(rows[picked[k]], cols[i]));
      up += fmt(x_of(picked[k]), 1) + "," + fmt(10 + height - above[k] / peak * height, 1) + " ";
    }
    for (size_t k = picked.size(); k-- > 0;)
      down += fmt(x_of(picked[k]), 1) + "," + fmt(10 + height - below[k] / peak * height, 1) + " ";
    const char* colour = kColours[i % (sizeof(kColours) / sizeof(kColours[0]))];
    std::string name = rows[0][static_cast<size_t>(cols[i])];
    svg += "<polygon fill=\"" + std::string(colour) + "\" points=\"" + up + down + "\"><title>" +
           escape(name) + "</title></polygon>";
    legend += std::string("<span style=\"color:") + colour + "\">&#9632;</span> " + escape(name) + " ";
    below = std::move(above);
  }
  svg += "<text x=\"0\" y=\"12\" class=\"axis\">" + fmt(peak, 1) + " MB</text></svg>\n";
  std::string out = svg + legend + "(" + escape(device) + ")</p>\n";
  // The highest peak's split by class.
  int step = column(breakdown, "Step"), bdev = column(breakdown, "Device Type"),
      peak_mb = column(breakdown, "Peak(MB)"), kind = column(breakdown, "Kind");
  if (breakdown.size() < 2 || step < 0 || bdev < 0 || peak_mb < 0 || kind < 0) return out;
  size_t best = 0;
  for (size_t r = 1; r < breakdown.size(); ++r) {
    if (cell(breakdown[r], bdev) == device &&
        (best == 0 || number(cell(breakdown[r], peak_mb)) > number(cell(breakdown[best], peak_mb))))
      best = r;
  }
  if (best == 0) return out;
  CsvRows peak_rows{breakdown[0]};
  for (size_t r = 1; r < breakdown.size(); ++r) {
    if (cell(breakdown[r], bdev) == device && cell(breakdown[r], step) == cell(breakdown[best], step))
      peak_rows.push_back(breakdown[r]);
  }
  return out + "<p>What the memory held at the highest peak (step " + escape(cell(breakdown[best], step)) +
         ", " + escape(cell(breakdown[best], peak_mb)) + " MB), by class and by allocation site:</p>\n" +
         table(peak_rows, "memory-breakdown-table");
}

struct TimelineSlice {
  uint64_t tid;
  std::string name;
  double ts, dur;  // us
  size_t depth = 0;
};

// The slices of step `step` from trace_view.json (the first kMaxTimelineSlices).
constexpr size_t kMaxTimelineSlices = 4000;
std::vector<TimelineSlice> step_slices(const std::string& trace_path, const std::string& step) {
  std::vector<TimelineSlice> out;
  std::ifstream in(trace_path);
  std::string line, target = "ProfilerStep#" + step;
  double begin = -1, end = -1;
  while (std::getline(in, line) && out.size() < kMaxTimelineSlices) {
    if (line.empty() || line[0] != '{' || line.find("\"ph\":\"X\"") == std::string::npos) continue;
    // Until the step is found only its own line is parsed (a large trace
    // has millions of lines before it).
    if (begin < 0 && line.find("\"" + target + "\"") == std::string::npos) continue;
    while (!line.empty() && (line.back() == ',' || line.back() == '\r')) line.pop_back();
    json e = json::parse(line, nullptr, false);
    if (!e.is_object() || !e.contains("ts") || !e.contains("dur") || !e["ts"].is_number()) continue;
    double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    std::string name = e.value("name", "");
    if (begin < 0) {
      if (name != target) continue;
      begin = ts, end = ts + dur;
    }
    if (ts >= end) break;  // events come in time order: the step is over
    out.push_back({e.value("tid", uint64_t{0}), name, ts, dur});
  }
  // Depth per thread: a stack of the open slices' ends.
  std::map<uint64_t, std::vector<double>> open;
  for (TimelineSlice& s : out) {
    std::vector<double>& stack = open[s.tid];
    while (!stack.empty() && stack.back() <= s.ts) stack.pop_back();
    s.depth = stack.size();
    stack.push_back(s.ts + s.dur);
  }
  return out;
}

std::string timeline_chart(const std::vector<TimelineSlice>& slices) {
  if (slices.empty()) return "";
  double t0 = slices.front().ts, t1 = t0;
  std::map<uint64_t, size_t> depth;  // per thread: its deepest slice
  for (const TimelineSlice& s : slices) {
    t1 = std::max(t1, s.ts + s.dur);
    depth[s.tid] = std::max(depth[s.tid], s.depth);
  }
  std::map<uint64_t, double> row_y;
  double y = 0;
  for (const auto& [tid, d] : depth) {
    row_y[tid] = y;
    y += 14.0 * static_cast<double>(std::min<size_t>(d, 12) + 1) + 8;
  }
  const double width = 900;
  std::string svg = "<svg class=\"timeline\" width=\"" + fmt(width + 90, 0) + "\" height=\"" +
                    fmt(y + 10, 0) + "\" role=\"img\">";
  for (const auto& [tid, top] : row_y) {
    svg +=
        "<text x=\"0\" y=\"" + fmt(top + 11, 1) + "\" class=\"axis\">tid " + std::to_string(tid) + "</text>";
  }
  for (const TimelineSlice& s : slices) {
    if (s.depth > 12) continue;
    double x = 90 + (s.ts - t0) / std::max(t1 - t0, 1e-9) * width;
    double w = std::max(0.5, s.dur / std::max(t1 - t0, 1e-9) * width);
    size_t colour = std::hash<std::string>()(s.name) % std::size(kColours);
    svg += "<rect x=\"" + fmt(x, 2) + "\" y=\"" + fmt(row_y[s.tid] + 14.0 * static_cast<double>(s.depth), 1) +
           "\" width=\"" + fmt(w, 2) + "\" height=\"12\" fill=\"" + kColours[colour] + "\"><title>" +
           escape(s.name) + " " + fmt(s.dur, 3) + " us</title></rect>";
  }
  std::string count = slices.size() < kMaxTimelineSlices
                          ? std::to_string(slices.size()) + " slices"
                          : "its first " + std::to_string(slices.size()) + " slices";
  return svg + "</svg>\n<p class=\"note\">" + count + " over " + fmt((t1 - t0) / 1000, 3) +
         " ms; hover for names (trace_view.pftrace or trace_view.json has them all).</p>\n";
}

// The slowest step's critical path (critical_path.csv's rows of it) and the
// analysis's what-if estimates.
std::string critical_path_section(const fs::path& out, const std::string& slowest, const json& info) {
  std::string html;
  CsvRows path = exporter::read_csv_file((out / "critical_path.csv").string());
  if (path.size() > 1 && !slowest.empty()) {
    CsvRows rows = {path[0]};
    for (size_t r = 1; r < path.size(); ++r) {
      if (!path[r].empty() && path[r][0] == slowest) rows.push_back(path[r]);
    }
    if (rows.size() > 1) {
      html += "<h3 class=\"critical-path-title\" data-step=\"" + escape(slowest) +
              "\">Critical path of step " + escape(slowest) +
              " (the slowest): the chain of work that decided its length</h3>\n" +
              table(rows, "critical-path-table", 200);
    }
  }
  const json* what_if = nullptr;
  if (info.is_object() && info.contains("analysis") && info["analysis"].is_object() &&
      info["analysis"].contains("what_if") && info["analysis"]["what_if"].is_array())
    what_if = &info["analysis"]["what_if"];
  if (what_if != nullptr && !what_if->empty()) {
    html += "<h3>What if (re-timed through the critical path)</h3>\n<ul class=\"what-if\">";
    for (const json& e : *what_if) {
      if (!e.is_object()) continue;
      double recorded = e.value("median_step_ms", 0.0), estimated = e.value("estimated_step_ms", 0.0);
      html += "<li data-estimated-ms=\"" + fmt(estimated, 3) + "\">" +
              escape(e.value("change", std::string())) + ": median step " + fmt(recorded, 3) + " ms &rarr; " +
              fmt(estimated, 3) + " ms</li>";
    }
    html += "</ul>\n";
  }
  return html;
}

// The advisor's findings (an "advice" array), first in a run's or the
// cluster's section: what to change, the largest saving first.
std::string advice_section(const json& holder) {
  if (!holder.is_object() || !holder.contains("advice") || !holder["advice"].is_array()) return "";
  const json& advice = holder["advice"];
  if (advice.empty()) {
    return "<h3>Advice</h3>\n<p class=\"advice-none\">None of the advisor's rules fired.</p>\n";
  }
  std::string html = "<h3>Advice (the largest saving first)</h3>\n<ol class=\"advice\">";
  for (const json& f : advice) {
    if (!f.is_object()) continue;
    double saving = base::number_field(f, "saving_ms", -1), step = base::number_field(f, "step_ms", 0);
    html += "<li data-rule=\"" + escape(base::string_field(f, "rule")) + "\"><b>" +
            escape(base::string_field(f, "title", base::string_field(f, "rule"))) + "</b>";
    if (saving >= 0) {
      html += " &mdash; worth " + fmt(saving, 3) + " ms per step";
      if (step > 0)
        html += " (" + fmt(100.0 * saving / step, 1) + " % of the " + fmt(step, 3) + " ms median)";
      html += ", " + escape(base::string_field(f, "saving_basis"));
    }
    html += "<br>Evidence: " + escape(base::string_field(f, "evidence")) +
            "<br>Change: " + escape(base::string_field(f, "change")) + "</li>";
  }
  return html + "</ol>\n";
}

std::string run_section(const std::string& run_dir, size_t index) {
  fs::path out = fs::path(run_dir) / "PROFILER_OUTPUT";
  std::string name = fs::path(run_dir).filename().string();
  json info = json::parse(base::read_regular_file_at(AT_FDCWD, (out / "profiler_info.json").string(), false),
                          nullptr, false);
  std::string html = "<section class=\"run\" id=\"run-" + std::to_string(index) + "\" data-run=\"" +
                     escape(name) + "\"><h2>" + escape(name) + "</h2>\n<p class=\"meta\">";
  if (info.is_object()) {
    html += "rank " + escape(info.value("rank", json(0)).dump()) + " of " +
            escape(info.value("world_size", json(1)).dump()) + ", host " + escape(info.value("host", "?"));
  }
  html += "</p>\n";
  if (info.is_object() && info.contains("analysis")) html += advice_section(info["analysis"]);
  CsvRows steps = exporter::read_csv_file((out / "step_trace_time.csv").string());
  std::string slowest;
  if (steps.size() > 1) {
    html += "<h3>Step time</h3>\n" + step_chart(steps) + table(steps, "step-table");
    double longest = -1;
    for (size_t r = 1; r < steps.size(); ++r) {
      double t = 0;
      for (const char* part : kStepPartNames) t += number(cell(steps[r], column(steps, part)));
      if (t > longest) longest = t, slowest = steps[r][0];
    }
  }
  html += critical_path_section(out, slowest, info);
  CsvRows ops = exporter::read_csv_file((out / "op_statistic.csv").string());
  if (ops.size() > 1) {
    html += "<h3>Top operators and ranges (by total time; click a column to sort)</h3>\n" +
            table(ops, "op-table", 40);
  }
  CsvRows memory = exporter::read_csv_file((out / "memory_record.csv").string());
  if (memory.size() > 1) {
    html += "<h3>Memory</h3>\n" + memory_chart(memory) +
            memory_class_chart(exporter::read_csv_file((out / "memory_timeline.csv").string()),
                               exporter::read_csv_file((out / "memory_breakdown.csv").string()));
  }
  CsvRows dataset = exporter::read_csv_file((out / "dataset.csv").string());
  if (dataset.size() > 1) html += "<h3>Data pipeline</h3>\n" + table(dataset, "dataset-table");
  if (!slowest.empty()) {
    std::vector<TimelineSlice> slices = step_slices((out / "trace_view.json").string(), slowest);
    if (!slices.empty()) {
      html += "<h3 class=\"timeline-title\" data-step=\"" + escape(slowest) + "\">Timeline of step " +
              escape(slowest) + " (the slowest)</h3>\n" + timeline_chart(slices);
    }
  }
  return html + "</section>\n";
}

// The job's slowest step's critical path across ranks (cluster_critical_path.csv's rows of it).
std::string cluster_path_section(const fs::path& dir) {
  CsvRows path = exporter::read_csv_file((dir / "cluster_critical_path.csv").string());
  int step = column(path, "Step"), duration = column(path, "Duration(us)");
  if (path.size() < 2 || step < 0 || duration < 0) return "";
  std::map<std::string, double> step_us;
  for (size_t r = 1; r < path.size(); ++r) step_us[cell(path[r], step)] += number(cell(path[r], duration));
  auto slowest = std::max_element(step_us.begin(), step_us.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  CsvRows rows = {path[0]};
  for (size_t r = 1; r < path.size(); ++r) {
    if (cell(path[r], step) == slowest->first) rows.push_back(path[r]);
  }
  return "<h3 class=\"cluster-path-title\" data-step=\"" + escape(slowest->first) +
         "\">Critical path of step " + escape(slowest->first) +
         " across ranks (the slowest): each rank's work and the collectives everyone waited at</h3>\n" +
         table(rows, "cluster-path-table", 200);
}

// The ranks x steps heat map: at most kHeatRows rows (consecutive ranks
// binned) and kHeatColumns columns (steps binned), each cell the largest
// value of its bin, so a slow rank stands out however many there are.
constexpr size_t kHeatRows = 128, kHeatColumns = 64;
// Above kRankRowsShown ranks the waiting table lists kRanksListed of them.
constexpr size_t kRankRowsShown = 64, kRanksListed = 20;

struct HeatCell {
  double us = -1;  // -1: no rank of the bin had the step
  std::string rank;
};

// One metric's heat map of cluster_step_trace_time.csv's `rank` rows.
std::string heat_map(const CsvRows& rows, const char* metric, bool shown) {
  int step_c = column(rows, "Step"), type_c = column(rows, "Type"), rank_c = column(rows, "Index"),
      value_c = column(rows, metric);
  if (step_c < 0 || type_c < 0 || rank_c < 0 || value_c < 0) return "";
  std::map<long long, size_t> rank_row, step_column;  // rank / step -> its place before binning
  for (size_t r = 1; r < rows.size(); ++r) {
    if (cell(rows[r], type_c) != "rank") continue;
    rank_row.emplace(std::atoll(cell(rows[r], rank_c).c_str()), 0);
    step_column.emplace(std::atoll(cell(rows[r], step_c).c_str()), 0);
  }
  if (rank_row.size() < 2 || step_column.empty()) return "";
  size_t rank_bin = (rank_row.size() + kHeatRows - 1) / kHeatRows;
  size_t step_bin = (step_column.size() + kHeatColumns - 1) / kHeatColumns;
  size_t i = 0;
  for (auto& [rank, place] : rank_row) place = i++ / rank_bin;
  i = 0;
  for (auto& [step, place] : step_column) place = i++ / step_bin;
  size_t height = (rank_row.size() + rank_bin - 1) / rank_bin,
         width = (step_column.size() + step_bin - 1) / step_bin;
  std::vector<std::vector<HeatCell>> grid(height, std::vector<HeatCell>(width));
  std::vector<std::string> first_rank(height), last_rank(height), first_step(width), last_step(width);
  for (const auto& [rank, place] : rank_row) {
    if (first_rank[place].empty()) first_rank[place] = std::to_string(rank);
    last_rank[place] = std::to_string(rank);
  }
  for (const auto& [step, place] : step_column) {
    if (first_step[place].empty()) first_step[place] = std::to_string(step);
    last_step[place] = std::to_string(step);
  }
  double low = -1, high = 0;
  for (size_t r = 1; r < rows.size(); ++r) {
    if (cell(rows[r], type_c) != "rank") continue;
    HeatCell& c = grid[rank_row[std::atoll(cell(rows[r], rank_c).c_str())]]
                      [step_column[std::atoll(cell(rows[r], step_c).c_str())]];
    double us = number(cell(rows[r], value_c));
    if (us > c.us) c = {us, cell(rows[r], rank_c)};
  }
  for (const auto& row : grid) {
    for (const HeatCell& c : row) {
      if (c.us < 0) continue;
      low = low < 0 ? c.us : std::min(low, c.us);
      high = std::max(high, c.us);
    }
  }
  auto span = [](const std::string& a, const std::string& b) { return a == b ? a : a + "-" + b; };
  const double cell_w = std::clamp(640.0 / static_cast<double>(width), 6.0, 40.0);
  const double cell_h = std::clamp(480.0 / static_cast<double>(height), 3.0, 16.0);
  std::string svg = "<svg class=\"heat-map\" data-metric=\"" + escape(metric) + "\" data-rows=\"" +
                    std::to_string(height) + "\" data-ranks-per-row=\"" + std::to_string(rank_bin) +
                    "\" width=\"" + fmt(80 + cell_w * static_cast<double>(width), 0) + "\" height=\"" +
                    fmt(30 + cell_h * static_cast<double>(height), 0) + "\" role=\"img\"" +
                    (shown ? "" : " style=\"display:none\"") + ">";
  for (size_t x = 0; x < width; x += std::max<size_t>(1, width / 8)) {
    svg += "<text class=\"axis\" x=\"" + fmt(80 + cell_w * static_cast<double>(x), 1) + "\" y=\"10\">step " +
           first_step[x] + "</text>";
  }
  for (size_t y = 0; y < height; ++y) {
    double top = 16 + cell_h * static_cast<double>(y);
    if (y % std::max<size_t>(1, static_cast<size_t>(14 / cell_h) + 1) == 0) {
      svg += "<text class=\"axis\" x=\"0\" y=\"" + fmt(top + cell_h, 1) + "\">rank " +
             span(first_rank[y], last_rank[y]) + "</text>";
    }
    for (size_t x = 0; x < width; ++x) {
      const HeatCell& c = grid[y][x];
      if (c.us < 0) continue;
      // White (the least) to red (the most).
      double heat = high > low ? (c.us - low) / (high - low) : 0;
      int fade = static_cast<int>(255 * (1 - heat));
      char colour[16];
      std::snprintf(colour, sizeof(colour), "#ff%02x%02x", fade, fade);
      svg += "<rect x=\"" + fmt(80 + cell_w * static_cast<double>(x), 1) + "\" y=\"" + fmt(top, 1) +
             "\" width=\"" + fmt(cell_w, 1) + "\" height=\"" + fmt(cell_h, 1) + "\" fill=\"" + colour +
             "\" data-rank=\"" + escape(c.rank) + "\" data-us=\"" + fmt(c.us, 3) + "\"><title>rank " +
             escape(span(first_rank[y], last_rank[y])) + ", step " + span(first_step[x], last_step[x]) +
             ": " + escape(metric) + " " + fmt(c.us / 1000, 3) + " ms (the most: rank " + escape(c.rank) +
             ")</title></rect>";
    }
  }
  return svg + "</svg>";
}

// Heat maps of every rank's steps (cluster_step_trace_time.csv), one metric
// shown at a time.
std::string heat_map_section(const fs::path& dir) {
  CsvRows rows = exporter::read_csv_file((dir / "cluster_step_trace_time.csv").string());
  static const char* const kMetrics[] = {"Computing", "Communication(Not Overlapped)", "Free", "Data Wait"};
  std::string maps, choices;
  for (const char* metric : kMetrics) {
    std::string map = heat_map(rows, metric, maps.empty());
    if (map.empty()) continue;
    choices += "<option>" + escape(metric) + "</option>";
    maps += map;
  }
  if (maps.empty()) return "";
  return "<h3>Ranks x steps</h3>\n<p class=\"note\">Each cell: the most of its ranks and steps (hover for "
         "the "
         "rank); white the least, red the most. <select class=\"heat-metric\" "
         "onchange=\"var v=this.value;this.parentNode.nextElementSibling.querySelectorAll('svg.heat-map')."
         "forEach(function(s){s.style.display=s.dataset.metric===v?'':'none';});\">" +
         choices + "</select></p>\n<div class=\"heat-maps\">" + maps + "</div>\n";
}

// The cluster's section, from its cluster_analysis.json `c` (parsed once:
// 12 MB at 10^5 ranks) and the other outputs in `dir`.
std::string cluster_section(const fs::path& dir, const json& c) {
  if (!c.is_object() || !c.contains("per_rank") || !c["per_rank"].is_array()) return "";
  std::string html = "<section id=\"cluster\"><h2>Cluster</h2>\n" + advice_section(c) + heat_map_section(dir);
  // Many ranks: those the others waited for most.
  std::vector<json> per_rank(c["per_rank"].begin(), c["per_rank"].end());
  if (per_rank.size() > kRankRowsShown) {
    std::stable_sort(per_rank.begin(), per_rank.end(), [](const json& a, const json& b) {
      return a.value("others_waited_for_it_ns", 0.0) > b.value("others_waited_for_it_ns", 0.0);
    });
    html += "<h3>Waiting per rank: the " + std::to_string(kRanksListed) + " of " +
            std::to_string(per_rank.size()) +
            " ranks the others waited for most (every rank: cluster_analysis.json, trainprof.db)</h3>\n";
    per_rank.resize(kRanksListed);
  } else {
    html += "<h3>Waiting per rank</h3>\n";
  }
  double most = 1;
  for (const json& r : per_rank) {
    most = std::max({most, r.value("waited_ns", 0.0), r.value("others_waited_for_it_ns", 0.0)});
  }
  html +=
      "<table class=\"cluster-table sortable\"><thead><tr><th>Rank</th><th>Waited for others (ms)</th>"
      "<th>Others waited for it (ms)</th><th>Arrived last</th><th></th></tr></thead><tbody>\n";
  for (const json& r : per_rank) {
    double waited = r.value("waited_ns", 0.0), caused = r.value("others_waited_for_it_ns", 0.0);
    html += "<tr><td>" + std::to_string(r.value("rank", 0)) + "</td><td>" + fmt(waited / 1e6, 3) +
            "</td><td>" + fmt(caused / 1e6, 3) + "</td><td>" + std::to_string(r.value("arrived_last", 0)) +
            "</td><td><svg width=\"210\" height=\"14\"><rect width=\"" + fmt(waited / most * 200, 1) +
            "\" height=\"6\" fill=\"" + kColours[0] + "\"/><rect y=\"7\" width=\"" +
            fmt(caused / most * 200, 1) + "\" height=\"6\" fill=\"" + kColours[3] + "\"/></svg></td></tr>\n";
  }
  html += "</tbody></table>\n";
  html += cluster_path_section(dir);
  std::string text = base::read_regular_file_at(AT_FDCWD, (dir / "straggler_report.txt").string(), false);
  if (!text.empty()) html += "<pre class=\"straggler\">" + escape(text) + "</pre>\n";
  return html + "</section>\n";
}

const char* kStyle =
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222}h2{border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:2px "
    "6px;text-align:right}"
    "th{background:#f4f4f4;cursor:pointer}td:first-child,th:first-child{text-align:left}"
    ".axis{font-size:10px;fill:#666}.legend,.note,.meta{color:#555}pre{background:#f8f8f8;padding:8px}";

// Sorts a table by the clicked column (numbers as numbers; a second click
// reverses).
const char* kScript =
    "document.querySelectorAll('table.sortable th').forEach(function(th){th.addEventListener('click',"
    "function(){var "
    "t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th),"
    "up=th.dataset.up!=='1';th.dataset.up=up?'1':'0';var rows=Array.prototype.slice.call(b.rows);"
    "rows.sort(function(x,y){var "
    "p=x.cells[i].textContent,q=y.cells[i].textContent,a=parseFloat(p),c=parseFloat(q);"
    "var r=(isNaN(a)||isNaN(c))?p.localeCompare(q):a-c;return "
    "up?r:-r;});rows.forEach(function(r){b.appendChild(r);"
    "});});});"
    // #sort=<table class>:<column>[:desc] in the address sorts a table on load.
    "var m=/#sort=([\\w-]+):(\\d+)(:desc)?/.exec(location.hash);if(m){var "
    "th=document.querySelector('table.'+m[1]"
    "+' th:nth-child('+(+m[2]+1)+')');if(th){th.click();if(m[3])th.click();}}";

// The analysed runs at or below `path`, or an error naming why there are none.
std::vector<std::string> analysed_runs(const std::string& path, std::string* error) {
  std::vector<std::string> runs = find_run_directories(path);
  std::vector<std::string> analysed;
  for (const std::string& run : runs) {
    std::error_code ec;
    if (fs::exists(fs::path(run) / "PROFILER_OUTPUT" / "step_trace_time.csv", ec)) analysed.push_back(run);
  }
  if (analysed.empty()) {
    *error = runs.empty() ? no_run_directory_error(path)
                          : "no analysed run at or below '" + path + "' (trainprof analyse " +
                                base::shell_quote(path) + ")";
  }
  return analysed;
}

// The cluster's section and each run's, numbered from `first_index`.
// Above this many runs, only the straggler's and the lowest rank's have a
// section of their own (each is a page of its own: `trainprof report RUN`).
constexpr size_t kRunSectionsShown = 64;

// The rank a run's analysis names (-1: none).
long long rank_of(const std::string& run) {
  json info =
      json::parse(base::read_regular_file_at(
                      AT_FDCWD, (fs::path(run) / "PROFILER_OUTPUT" / "profiler_info.json").string(), false),
                  nullptr, false);
  const json* rank = info.is_object() && info.contains("rank") ? &info["rank"] : nullptr;
  return rank != nullptr && rank->is_number_integer() ? rank->get<long long>() : -1;
}

// The cluster's section and each run's (numbered from `first_index`), or
// for many runs the straggler's and the lowest rank's, said so.
std::string sections(const std::string& path, const std::vector<std::string>& analysed, size_t first_index) {
  fs::path dir = fs::path(path) / "cluster_analysis_output";
  json c = json::parse(base::read_regular_file_at(AT_FDCWD, (dir / "cluster_analysis.json").string(), false),
                       nullptr, false);
  std::string html = cluster_section(dir, c);
  if (analysed.size() <= kRunSectionsShown) {
    for (size_t i = 0; i < analysed.size(); ++i) html += run_section(analysed[i], first_index + i);
    return html;
  }
  long long straggler = c.is_object() && c.contains("straggler") && c["straggler"].is_number_integer()
                            ? c["straggler"].get<long long>()
                            : -1;
  std::vector<long long> ranks;
  for (const std::string& run : analysed) ranks.push_back(rank_of(run));
  long long lowest = *std::min_element(ranks.begin(), ranks.end());
  std::string shown;
  for (size_t i = 0; i < analysed.size(); ++i) {
    if (ranks[i] != straggler && ranks[i] != lowest) continue;
    html += run_section(analysed[i], first_index + i);
    shown += (shown.empty() ? "" : ", ") + std::to_string(ranks[i]);
  }
  return html + "<p class=\"note runs-left-out\">" + std::to_string(analysed.size()) +
         " runs: the sections above are rank(s) " + escape(shown) +
         " (the straggler and the lowest rank). Any run's own page: trainprof report RUN_DIRECTORY.</p>\n";
}

std::string page(const std::string& title, const std::string& body) {
  return std::string("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>trainprof report: ") +
         escape(title) + "</title><style>" + kStyle + "</style></head><body>\n<h1>trainprof report</h1>\n" +
         body + "<script>" + kScript + "</script>\n</body></html>\n";
}

// Writes `html` to `file`, replaced whole.
std::string write_page(const std::string& file, const std::string& html) {
  fs::path p(file);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  base::UniqueFd fd(base::open_directory_at(AT_FDCWD, dir));
  if (!fd.valid()) return "cannot open the directory of " + file;
  return base::write_file_atomically_at(fd.get(), p.filename().string(), html, file);
}

// Where a report of `path` goes by default: a run's PROFILER_OUTPUT, or the
// directory of several.
std::string default_file(const std::string& path, const std::vector<std::string>& analysed,
                         const char* name) {
  bool single = analysed.size() == 1 && fs::path(analysed[0]) == fs::path(path);
  return single ? (fs::path(path) / "PROFILER_OUTPUT" / name).string() : (fs::path(path) / name).string();
}

// Two runs (or jobs) compared (trainprof diff): the step's parts, then what
// changed per step, largest first.
std::string diff_section(const DiffReport& d) {
  std::string html =
      "<section id=\"diff\"><h2>What changed from A to B</h2>\n<p class=\"meta\">A: " + escape(d.run_a) +
      " (" + std::to_string(d.steps_a) + " steps";
  if (d.ranks_a > 1) html += " of " + std::to_string(d.ranks_a) + " ranks";
  if (!d.straggler_a.empty()) html += "; straggler: " + escape(d.straggler_a);
  html += ")<br>B: " + escape(d.run_b) + " (" + std::to_string(d.steps_b) + " steps";
  if (d.ranks_b > 1) html += " of " + std::to_string(d.ranks_b) + " ranks";
  if (!d.straggler_b.empty()) html += "; straggler: " + escape(d.straggler_b);
  html += ")</p>\n";
  CsvRows parts = {{"Per step", "A (ms)", "B (ms)", "Change (ms)"}};
  parts.push_back({"step", fmt(d.step_us_a / 1e3, 3), fmt(d.step_us_b / 1e3, 3),
                   fmt((d.step_us_b - d.step_us_a) / 1e3, 3)});
  for (const auto& [part, ab] : d.parts)
    parts.push_back(
        {part, fmt(ab.first / 1e3, 3), fmt(ab.second / 1e3, 3), fmt((ab.second - ab.first) / 1e3, 3)});
  html += table(parts, "diff-steps-table");
  html += "<h3>What changed per step (host: self time; gpu: kernels, copies, sets), largest first</h3>\n" +
          table(exporter::parse_csv(d.csv), "diff-table", 40);
  return html + "</section>\n";
}

}  // namespace

ReportResult write_report(const std::string& path, const std::string& output_file) {
  ReportResult result;
  std::vector<std::string> analysed = analysed_runs(path, &result.error);
  if (analysed.empty()) return result;
  std::string body = "<p class=\"meta\">" + std::to_string(analysed.size()) + " analysed run(s) under " +
                     escape(path) + "</p>\n" + sections(path, analysed, 0);
  result.file = !output_file.empty() ? output_file : default_file(path, analysed, "report.html");
  result.error = write_page(result.file, page(fs::path(path).filename().string(), body));
  result.runs = analysed.size();
  return result;
}

ReportResult write_diff_report(const std::string& path_a, const std::string& path_b,
                               const std::string& output_file) {
  ReportResult result;
  DiffReport d = diff_runs(path_a, path_b);  // analyses what is not
  if (!d.ok()) {
    result.error = d.error;
    return result;
  }
  std::vector<std::string> a = analysed_runs(path_a, &result.error);
  std::vector<std::string> b = analysed_runs(path_b, &result.error);
  if (a.empty() || b.empty()) return result;
  std::string body = diff_section(d) + "<h2 class=\"side\">A: " + escape(path_a) + "</h2>\n" +
                     sections(path_a, a, 0) + "<h2 class=\"side\">B: " + escape(path_b) + "</h2>\n" +
                     sections(path_b, b, a.size());
  result.file = !output_file.empty() ? output_file : default_file(path_b, b, "diff_report.html");
  result.error = write_page(
      result.file,
      page(fs::path(path_a).filename().string() + " vs " + fs::path(path_b).filename().string(), body));
  result.runs = a.size() + b.size();
  return result;
}

}  // namespace trainprof
