// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// report.html (trainprof::write_report): one self-contained page per PATH,
// built from the analysed runs' outputs; it fetches nothing (the one
// address on it is the Perfetto UI's, opened by a click).
//
// A page opens with what a reader asks first. For a run: the advisor's
// findings with their savings as bars against the step, every step's
// breakdown, the slowest step's critical path as a strip along its time,
// what the memory held at its peak by class, and a button that opens the
// run's timeline in the Perfetto UI (the path of the file beside it). Then
// an icicle of the host time per step, and the tables (the CSVs' own rows,
// times shown in ms, sortable, filterable, paged) with the memory over time
// and the slowest step's timeline. For a parent of several ranks' runs with
// a cluster analysis, the cluster comes first: its findings, the stuck
// collective of a flight recorder incident, the straggler's late steps, a
// heat map of ranks x steps, each rank's waiting; above 64 runs only the
// straggler's and the lowest rank's own sections follow.
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
#include "exporter/csv_reader.h"
#include "exporter/host_flame.h"
#include "exporter/html_charts.h"
#include "exporter/html_page.h"
#include "exporter/html_report.h"
#include "trainprof/diff.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using exporter::CsvRows;
using exporter::html::cell;
using exporter::html::column;
using exporter::html::escape;
using exporter::html::fixed;
using exporter::html::kPalette;
using exporter::html::ms;
using exporter::html::number;
using exporter::html::table;
using exporter::html::TableView;
using nlohmann::json;

json read_json(const fs::path& file) {
  return json::parse(base::read_regular_file_at(AT_FDCWD, file.string(), false), nullptr, false);
}

// The memory charts' axes: MB up to `peak` and ms over the records' span.
std::string memory_axes(double peak, double span_us, int width, int height) {
  std::string h = std::to_string(height + 10), w = std::to_string(width + 40);
  return "<line class=\"grid\" x1=\"40\" x2=\"" + w +
         "\" y1=\"10\" y2=\"10\"/><line class=\"grid\" x1=\"40\" x2=\"" + w + "\" y1=\"" + h + "\" y2=\"" +
         h + "\"/><text x=\"0\" y=\"14\" class=\"axis\">" + fixed(peak, 1) + " MB</text><text x=\"0\" y=\"" +
         h + "\" class=\"axis\">0 MB</text><text x=\"40\" y=\"" + std::to_string(height + 26) +
         "\" class=\"axis\">0 ms</text><text x=\"" + w + "\" y=\"" + std::to_string(height + 26) +
         "\" class=\"axis\" text-anchor=\"end\">" + ms(span_us) + " ms after the first record</text>";
}

// A table's timestamps shown from the first memory record.
TableView from_first_record(double t0_us) {
  TableView view;
  view.origin_us = t0_us;
  view.origin_name = "the first record";
  return view;
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
    points += fixed(40 + x, 1) + "," + fixed(y + 10, 1) + " ";
  }
  std::string out = "<svg class=\"memory-chart chart\" viewBox=\"0 0 " + std::to_string(width + 60) + " " +
                    std::to_string(height + 30) +
                    "\" role=\"img\"><polyline fill=\"none\" stroke=\"#4e79a7\" "
                    "points=\"" +
                    points + "\"/>" + memory_axes(peak, t1 - t0, width, height) + "</svg>\n";
  out += "<p class=\"memory-peak\" data-peak-mb=\"" + escape(cell(rows[peak_row], allocated)) +
         "\">Peak allocated: " + fixed(number(cell(rows[peak_row], allocated)), 1) + " MB (" +
         escape(cell(rows[peak_row], column(rows, "Device Type"))) + ") at " +
         fixed((number(cell(rows[peak_row], ts)) - t0) / 1000, 3) + " ms into the run's memory records</p>\n";
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
  std::string svg = "<svg class=\"memory-class-chart chart\" data-device=\"" + escape(device) +
                    "\" viewBox=\"0 0 " + std::to_string(width + 60) + " " + std::to_string(height + 30) +
                    "\" role=\"img\">";
  std::string legend = "<p class=\"legend\">";
  for (size_t i = 0; i < cols.size(); ++i) {
    std::string up, down;
    std::vector<double> above = below;
    for (size_t k = 0; k < picked.size(); ++k) {
      above[k] += number(cell(rows[picked[k]], cols[i]));
      up += fixed(x_of(picked[k]), 1) + "," + fixed(10 + height - above[k] / peak * height, 1) + " ";
    }
    for (size_t k = picked.size(); k-- > 0;)
      down += fixed(x_of(picked[k]), 1) + "," + fixed(10 + height - below[k] / peak * height, 1) + " ";
    const char* colour = kPalette[i % std::size(kPalette)];
    std::string name = rows[0][static_cast<size_t>(cols[i])];
    svg += "<polygon fill=\"" + std::string(colour) + "\" points=\"" + up + down + "\"><title>" +
           escape(name) + "</title></polygon>";
    legend += std::string("<span class=\"key\" style=\"background:") + colour + "\"></span>" + escape(name);
    below = std::move(above);
  }
  svg += memory_axes(peak, t1 - t0, width, height) + "</svg>\n";
  std::string out = svg + legend + " (" + escape(device) + ")</p>\n";
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
         table(peak_rows, "memory-breakdown-table", from_first_record(t0));
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
    if (!e["dur"].is_number()) continue;
    double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    std::string name = base::string_field(e, "name");
    if (begin < 0) {
      if (name != target) continue;
      begin = ts, end = ts + dur;
    }
    if (ts >= end) break;  // events come in time order: the step is over
    uint64_t tid = e["tid"].is_number_unsigned() ? e["tid"].get<uint64_t>() : 0;
    out.push_back({tid, name, ts, dur});
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
  std::string svg = "<svg class=\"timeline chart\" viewBox=\"0 0 " + fixed(width + 90, 0) + " " +
                    fixed(y + 10, 0) + "\" role=\"img\">";
  for (const auto& [tid, top] : row_y) {
    svg += "<text x=\"0\" y=\"" + fixed(top + 11, 1) + "\" class=\"axis\">tid " + std::to_string(tid) +
           "</text>";
  }
  for (const TimelineSlice& s : slices) {
    if (s.depth > 12) continue;
    double x = 90 + (s.ts - t0) / std::max(t1 - t0, 1e-9) * width;
    double w = std::max(0.5, s.dur / std::max(t1 - t0, 1e-9) * width);
    size_t colour = std::hash<std::string>()(s.name) % std::size(kPalette);
    svg += "<rect x=\"" + fixed(x, 2) + "\" y=\"" +
           fixed(row_y[s.tid] + 14.0 * static_cast<double>(s.depth), 1) + "\" width=\"" + fixed(w, 2) +
           "\" height=\"12\" fill=\"" + kPalette[colour] + "\"><title>" + escape(s.name) + " " + ms(s.dur) +
           " ms, at " + ms(s.ts - t0) + " ms</title></rect>";
  }
  std::string count = slices.size() < kMaxTimelineSlices
                          ? std::to_string(slices.size()) + " slices"
                          : "its first " + std::to_string(slices.size()) + " slices";
  return svg + "</svg>\n<p class=\"note\">" + count + " over " + fixed((t1 - t0) / 1000, 3) +
         " ms; hover for names (trace_view.pftrace or trace_view.json has them all).</p>\n";
}

// ---- A run's section ----

// The page's embedded traces, at most this many bytes each and in all: a
// larger one is opened by choosing its file in the Perfetto UI.
constexpr size_t kEmbeddedTraceBytes = 8u << 20, kEmbeddedTracesBytes = 24u << 20;

struct PageState {
  fs::path page_dir;  // where report.html goes: links are relative to it
  size_t embedded = 0;
  size_t traces = 0;
};

// The run's timeline one click away: a button that opens `trace` in the
// Perfetto UI (fed the embedded file once the UI answers), a link to the
// file and its path, for when there is no network.
std::string trace_link(const fs::path& trace, const std::string& title, PageState& state) {
  std::error_code ec;
  if (!fs::is_regular_file(trace, ec)) return "";
  std::string id = "trace-data-" + std::to_string(state.traces++);
  std::string bytes;
  size_t size = static_cast<size_t>(fs::file_size(trace, ec));
  if (!ec && size <= kEmbeddedTraceBytes && state.embedded + size <= kEmbeddedTracesBytes) {
    bytes = base::read_regular_file_at(AT_FDCWD, trace.string(), false);
    state.embedded += bytes.size();
  }
  fs::path relative = fs::relative(trace, state.page_dir, ec);
  std::string href = ec || relative.empty() ? trace.string() : relative.generic_string();
  std::string html = "<div class=\"trace-link\">Timeline: <button class=\"open-perfetto\" data-trace=\"" +
                     id + "\" data-title=\"" + escape(title) +
                     "\">Open in the Perfetto UI</button>"
                     "<span class=\"note\" hidden> (" +
                     fixed(static_cast<double>(size) / (1 << 20), 1) +
                     " MB: if the Perfetto UI shows no trace, choose this file there)</span> "
                     "<a class=\"trace-file\" href=\"" +
                     escape(href) + "\">" + escape(trace.filename().string()) + "</a> <code>" +
                     escape(fs::absolute(trace, ec).string()) + "</code></div>\n";
  if (!bytes.empty()) {
    html += "<script type=\"application/octet-stream\" id=\"" + id + "\">" + exporter::html::base64(bytes) +
            "</script>\n";
  }
  return html;
}

std::string card(const std::string& css_class, const std::string& title, const std::string& body) {
  if (body.empty()) return "";
  return "<div class=\"card " + css_class + "\"><h3>" + title + "</h3>\n" + body + "</div>\n";
}

// What the analysis re-timed (profiler_info.json's analysis.what_if).
std::string what_if_list(const json& analysis) {
  if (!analysis.is_object() || !analysis.contains("what_if") || !analysis["what_if"].is_array() ||
      analysis["what_if"].empty())
    return "";
  std::string html =
      "<p class=\"note\">What if (re-timed through the critical path):</p><ul class=\"what-if\">";
  for (const json& e : analysis["what_if"]) {
    if (!e.is_object()) continue;
    double recorded = e.value("median_step_ms", 0.0), estimated = e.value("estimated_step_ms", 0.0);
    html += "<li data-estimated-ms=\"" + fixed(estimated, 3) + "\">" +
            escape(e.value("change", std::string())) + ": median step " + ms(recorded * 1000) +
            " ms &rarr; " + ms(estimated * 1000) + " ms</li>";
  }
  return html + "</ul>\n";
}

// Figures on top of the step chart: steps, median, slowest.
std::string step_figures(const CsvRows& steps, const std::vector<double>& lengths,
                         const std::string& slowest) {
  std::vector<double> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  double most = sorted.empty() ? 0 : sorted.back();
  double total = 0;
  for (double l : lengths) total += l;
  std::string parts;
  for (int i = 0; i < exporter::html::kStepParts; ++i) {
    int c = column(steps, exporter::html::kStepPartNames[i]);
    double sum = 0;
    for (size_t r = 1; r < steps.size(); ++r) sum += number(cell(steps[r], c));
    if (total > 0 && sum > 0) {
      parts += std::string(parts.empty() ? "" : " &middot; ") + exporter::html::kStepPartNames[i] + " " +
               fixed(100 * sum / total, 1) + " %";
    }
  }
  return "<div class=\"kpis\"><div><div class=\"label\">steps</div><div class=\"big\">" +
         std::to_string(lengths.size()) +
         "</div></div><div><div class=\"label\">median step</div><div class=\"big\">" + ms(median) +
         " ms</div></div><div><div class=\"label\">slowest (step " + escape(slowest) +
         ")</div><div class=\"big\">" + ms(most) +
         " ms</div></div></div><p class=\"note\">Of all steps' time: " + parts + "</p>\n";
}

// A critical path table's (critical_path.csv, cluster_critical_path.csv)
// header and its rows of `step`.
CsvRows rows_of_step(const CsvRows& path, const std::string& step) {
  CsvRows rows = {path.empty() ? std::vector<std::string>{} : path[0]};
  int step_c = column(path, "Step");
  for (size_t r = 1; r < path.size(); ++r) {
    if (cell(path[r], step_c) == step) rows.push_back(path[r]);
  }
  return rows;
}

// Each step's start in critical_path.csv (its first segment's).
std::vector<std::pair<std::string, double>> step_starts(const CsvRows& path) {
  std::vector<std::pair<std::string, double>> out;
  int start = column(path, "Start Time(us)");
  for (size_t r = 1; r < path.size(); ++r) {
    if (path[r].empty()) continue;
    double t = number(cell(path[r], start));
    if (out.empty() || out.back().first != path[r][0]) {
      out.push_back({path[r][0], t});
    } else {
      out.back().second = std::min(out.back().second, t);
    }
  }
  return out;
}

// memory_breakdown.csv's class rows at the highest peak, with its header,
// and a sentence naming the peak.
std::pair<CsvRows, std::string> peak_classes(const CsvRows& breakdown) {
  int step = column(breakdown, "Step"), dev = column(breakdown, "Device Type"),
      peak = column(breakdown, "Peak(MB)"), kind = column(breakdown, "Kind"),
      op = column(breakdown, "Operator");
  if (breakdown.size() < 2 || step < 0 || dev < 0 || peak < 0 || kind < 0) return {};
  size_t best = 1;
  for (size_t r = 1; r < breakdown.size(); ++r) {
    if (number(cell(breakdown[r], peak)) > number(cell(breakdown[best], peak))) best = r;
  }
  CsvRows rows = {breakdown[0]};
  for (size_t r = 1; r < breakdown.size(); ++r) {
    if (cell(breakdown[r], kind) == "class" && cell(breakdown[r], step) == cell(breakdown[best], step) &&
        cell(breakdown[r], dev) == cell(breakdown[best], dev))
      rows.push_back(breakdown[r]);
  }
  std::string at = cell(breakdown[best], op);
  std::string text = "<p class=\"note peak-at\" data-peak-mb=\"" + escape(cell(breakdown[best], peak)) +
                     "\">Peak " + fixed(number(cell(breakdown[best], peak)), 1) + " MB (" +
                     escape(cell(breakdown[best], dev)) + ") in step " + escape(cell(breakdown[best], step)) +
                     (at.empty() ? "" : ", in " + escape(at)) + ".</p>\n";
  return {rows, text};
}

// What a run's section is made of, each output read once.
struct RunOutputs {
  fs::path dir;  // PROFILER_OUTPUT
  json info;     // profiler_info.json
  CsvRows steps;
  std::vector<double> lengths;  // each step's
  std::string slowest;          // the slowest step ("" without steps)
  CsvRows slowest_path;         // critical_path.csv's header and the slowest step's rows
  CsvRows breakdown;            // memory_breakdown.csv

  explicit RunOutputs(const fs::path& out)
      : dir(out),
        info(read_json(out / "profiler_info.json")),
        steps(exporter::read_csv_file((out / "step_trace_time.csv").string())),
        lengths(exporter::html::step_lengths(steps)),
        breakdown(exporter::read_csv_file((out / "memory_breakdown.csv").string())) {
    if (lengths.empty()) return;
    slowest = steps[1 + (std::max_element(lengths.begin(), lengths.end()) - lengths.begin())][0];
    CsvRows path = exporter::read_csv_file((out / "critical_path.csv").string());
    if (path.size() > 1) slowest_path = rows_of_step(path, slowest);
  }
};

// The run's first screen: findings, steps, critical path, memory at peak.
std::string run_overview(const RunOutputs& run) {
  const json* analysis =
      run.info.is_object() && run.info.contains("analysis") ? &run.info["analysis"] : nullptr;
  std::string html = "<div class=\"overview\">\n";
  if (analysis != nullptr && analysis->contains("advice")) {
    html += card("findings-card", "Findings (the largest saving first)",
                 exporter::html::findings((*analysis)["advice"]) + what_if_list(*analysis));
  }
  if (!run.lengths.empty()) {
    html += card(
        "steps-card", "Step time",
        step_figures(run.steps, run.lengths, run.slowest) + exporter::html::step_breakdown_chart(run.steps));
  }
  if (run.slowest_path.size() > 1) {
    std::string strip = exporter::html::critical_path_strip(run.slowest_path);
    html += card("critical-path-card", "Critical path of step " + escape(run.slowest) + " (the slowest)",
                 strip.empty() ? ""
                               : "<p class=\"note\">The chain of work that decided the step's length; hover "
                                 "for names.</p>" +
                                     strip);
  }
  auto [classes, peak_text] = peak_classes(run.breakdown);
  if (classes.size() > 1) {
    html += card("memory-card", "Memory at the peak, by class",
                 peak_text + exporter::html::memory_at_peak(classes));
  }
  return html + "</div>\n";
}

// The icicle of the host time per step.
std::string flame_section(const fs::path& out) {
  exporter::HostFlame flame =
      exporter::read_host_flame((out / "trace_view.json").string(),
                                exporter::read_csv_file((out / "python_outside_operators.csv").string()));
  std::string chart = exporter::html::icicle(flame);
  if (chart.empty()) return "";
  std::string steps = std::to_string(flame.steps) + " step" + (flame.steps == 1 ? "" : "s");
  return "<h3 class=\"flame-title\" data-steps=\"" + std::to_string(flame.steps) +
         "\">Host time per step, by call (the mean of " + steps +
         (flame.cut ? ", the trace's first ones" : "") +
         ")</h3>\n<p class=\"note\">Each frame holds the calls made "
         "inside it; the time under a frame that no child covers is its own. Click a frame to zoom, the top "
         "to "
         "zoom out.</p>\n" +
         chart;
}

std::string run_details(const RunOutputs& run) {
  const fs::path& out = run.dir;
  std::string html;
  html += flame_section(out);
  if (run.steps.size() > 1) {
    TableView view;
    view.all_us = true;
    html += "<h3>Steps (step_trace_time.csv)</h3>\n" + table(run.steps, "step-table", view);
  }
  if (run.slowest_path.size() > 1) {
    TableView view;
    view.step_origins = step_starts(run.slowest_path);
    html += "<h3 class=\"critical-path-title\" data-step=\"" + escape(run.slowest) +
            "\">Critical path of step " + escape(run.slowest) + " (the slowest), segment by segment</h3>\n" +
            table(run.slowest_path, "critical-path-table", view);
  }
  CsvRows ops = exporter::read_csv_file((out / "op_statistic.csv").string());
  if (ops.size() > 1) {
    TableView view;
    view.file = "op_statistic.csv";
    html += "<h3>Operators and ranges (by total time)</h3>\n" + table(ops, "op-table", view);
  }
  CsvRows memory = exporter::read_csv_file((out / "memory_record.csv").string());
  if (memory.size() > 1) {
    html +=
        "<h3>Memory over time</h3>\n" + memory_chart(memory) +
        memory_class_chart(exporter::read_csv_file((out / "memory_timeline.csv").string()), run.breakdown);
  }
  CsvRows dataset = exporter::read_csv_file((out / "dataset.csv").string());
  if (dataset.size() > 1) html += "<h3>Data pipeline</h3>\n" + table(dataset, "dataset-table");
  if (!run.slowest.empty()) {
    std::vector<TimelineSlice> slices = step_slices((out / "trace_view.json").string(), run.slowest);
    if (!slices.empty()) {
      html += "<h3 class=\"timeline-title\" data-step=\"" + escape(run.slowest) + "\">Timeline of step " +
              escape(run.slowest) + " (the slowest)</h3>\n" + timeline_chart(slices);
    }
  }
  return html;
}

// The line under a run's name: who it is, and why a flight recorder wrote it.
std::string run_meta(const json& info) {
  if (!info.is_object()) return "";
  std::string meta = "rank " + escape(info.value("rank", json(0)).dump()) + " of " +
                     escape(info.value("world_size", json(1)).dump()) + ", host " +
                     escape(base::string_field(info, "host", "?"));
  if (info.contains("flight_recorder") && info["flight_recorder"].is_object()) {
    meta += "<br>Written by the flight recorder: " +
            escape(base::string_field(info["flight_recorder"], "reason",
                                      base::string_field(info["flight_recorder"], "trigger")));
  }
  if (info.contains("options") && info["options"].is_object()) {
    uint64_t n = info["options"].value("sample_operators", uint64_t{1});
    if (n > 1) {
      meta += "<br>Operators sampled: about 1 call in " + std::to_string(n) +
              " recorded; counts and times are the recorded ones x " + std::to_string(n) + ".";
    }
  }
  return meta;
}

std::string run_section(const std::string& run_dir, size_t index, PageState& state) {
  RunOutputs run(fs::path(run_dir) / "PROFILER_OUTPUT");
  std::string name = fs::path(run_dir).filename().string();
  return "<section class=\"run\" id=\"run-" + std::to_string(index) + "\" data-run=\"" + escape(name) +
         "\"><h2>" + escape(name) + "</h2>\n<p class=\"meta\">" + run_meta(run.info) + "</p>\n" +
         trace_link(run.dir / "trace_view.pftrace", name, state) + run_overview(run) + run_details(run) +
         "</section>\n";
}

// ---- The cluster's section ----

// The job's slowest step's critical path across ranks (cluster_critical_path.csv's rows of it).
std::string cluster_path_section(const fs::path& dir) {
  CsvRows path = exporter::read_csv_file((dir / "cluster_critical_path.csv").string());
  int step = column(path, "Step"), duration = column(path, "Duration(us)");
  if (path.size() < 2 || step < 0 || duration < 0) return "";
  std::map<std::string, double> step_us;
  for (size_t r = 1; r < path.size(); ++r) step_us[cell(path[r], step)] += number(cell(path[r], duration));
  auto slowest = std::max_element(step_us.begin(), step_us.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  CsvRows rows = rows_of_step(path, slowest->first);
  TableView view;
  view.step_origins = step_starts(rows);
  return "<h3 class=\"cluster-path-title\" data-step=\"" + escape(slowest->first) +
         "\">Critical path of step " + escape(slowest->first) +
         " across ranks (the slowest): each rank's work and the collectives everyone waited at</h3>\n" +
         table(rows, "cluster-path-table", view);
}

// The heat maps of every rank's steps (cluster_step_trace_time.csv), one
// metric shown at a time: first the straggler's cause's.
std::string heat_map_card(const CsvRows& rows, const std::string& first) {
  std::vector<std::string> metrics = {"Computing", "Communication(Not Overlapped)", "Free", "Data Wait"};
  std::stable_partition(metrics.begin(), metrics.end(),
                        [&first](const std::string& m) { return m == first; });
  std::string maps, choices;
  for (const std::string& metric : metrics) {
    std::string map = exporter::html::heat_map(rows, metric.c_str(), maps.empty());
    if (map.empty()) continue;
    choices += "<option>" + escape(metric) + "</option>";
    maps += map;
  }
  return card("heat-card", "Ranks x steps",
              maps.empty() ? ""
                           : "<p class=\"note\">Each cell: the most of its ranks and steps (hover for the "
                             "rank); white the least, red the most. <select class=\"heat-metric\">" +
                                 choices + "</select></p>\n<div class=\"heat-maps\">" + maps + "</div>\n");
}

// The metric of cluster_step_trace_time.csv that shows the straggler's cause.
std::string cause_metric(const json& c) {
  return base::string_field(c, "cause") == "data loading" ? "Data Wait" : "Computing";
}

// The flight recorder incident's stuck collectives: who is inside, who never came.
std::string incident_card(const json& c) {
  if (!c.contains("incident") || !c["incident"].is_object()) return "";
  const json& incident = c["incident"];
  std::string html = "<p class=\"incident-reason\">" + escape(base::string_field(incident, "trigger")) +
                     ": " + escape(base::string_field(incident, "reason"));
  if (incident.contains("announced_by") && incident["announced_by"].is_number_integer())
    html += "; announced by rank " + incident["announced_by"].dump();
  if (incident.contains("dumped") && incident["dumped"].is_array())
    html += "; " + std::to_string(incident["dumped"].size()) + " of " +
            escape(incident.value("world_size", json(0)).dump()) + " ranks dumped";
  html += ".</p>\n";
  if (incident.contains("stuck_collectives") && incident["stuck_collectives"].is_array()) {
    for (const json& s : incident["stuck_collectives"]) {
      if (!s.is_object()) continue;
      std::string ranks;
      auto list = [&](const char* key, const char* css, const char* last_key) {
        if (!s.contains(key) || !s[key].is_array()) return;
        const json* last = s.contains(last_key) && s[last_key].is_array() ? &s[last_key] : nullptr;
        for (size_t i = 0; i < s[key].size(); ++i) {
          std::string before = last != nullptr && i < last->size() && (*last)[i].is_number()
                                   ? " (last entered #" + (*last)[i].dump() + ")"
                                   : "";
          ranks += "<span class=\"" + std::string(css) + "\">rank " + s[key][i].dump() + escape(before) +
                   "</span>";
        }
      };
      list("inside", "inside", "");
      list("missing", "missing", "missing_last_entered");
      html += "<div class=\"stuck\" data-name=\"" + escape(base::string_field(s, "name")) +
              "\" data-sequence=\"" + escape(s.value("sequence", json(0)).dump()) +
              "\"><b>Stuck: " + escape(base::string_field(s, "name")) + " #" +
              escape(s.value("sequence", json(0)).dump()) + " of group '" +
              escape(s.value("group", json("")).is_string() ? s["group"].get<std::string>()
                                                            : s.value("group", json("")).dump()) +
              "'</b><div class=\"ranks\">" + ranks +
              "</div><p class=\"legend\"><span class=\"key\" "
              "style=\"background:#fff1b8\"></span>entered it and wait inside<span class=\"key\" "
              "style=\"background:#e15759\"></span>never entered it</p></div>\n";
    }
  }
  if (incident.contains("first_non_finite_loss_step") && incident["first_non_finite_loss_step"].is_number()) {
    html += "<p>First non-finite loss at step " + incident["first_non_finite_loss_step"].dump() +
            ", on rank(s) " + escape(incident.value("first_non_finite_loss_ranks", json::array()).dump()) +
            ".</p>\n";
  }
  return card("incident-card",
              "Flight recorder incident '" + escape(base::string_field(incident, "key")) + "'", html);
}

// The straggler and its late steps.
std::string straggler_card(const json& c, const CsvRows& steps) {
  if (!c.contains("straggler") || !c["straggler"].is_number_integer() || c["straggler"].get<int64_t>() < 0)
    return "";
  int64_t straggler = c["straggler"].get<int64_t>();
  std::vector<int64_t> late;
  if (c.contains("straggler_steps") && c["straggler_steps"].is_array()) {
    for (const json& s : c["straggler_steps"])
      if (s.is_number_integer()) late.push_back(s.get<int64_t>());
  }
  std::string cause = base::string_field(c, "cause");
  std::string metric = cause_metric(c);
  return card("straggler-card", "The straggler: rank " + std::to_string(straggler),
              "<p class=\"straggler-cause\" data-rank=\"" + std::to_string(straggler) +
                  "\">The others waited for it in " + std::to_string(late.size()) +
                  " step(s); cause: " + escape(cause.empty() ? "unknown" : cause) + ".</p>\n" +
                  exporter::html::late_steps_chart(steps, straggler, late, metric));
}

// Each rank's waiting, and the ranks the others waited for most above 64.
std::string waiting_table(const json& c) {
  constexpr size_t kRankRowsShown = 64, kRanksListed = 20;
  std::vector<json> per_rank(c["per_rank"].begin(), c["per_rank"].end());
  std::string html;
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
  for (const json& r : per_rank)
    most = std::max({most, r.value("waited_ns", 0.0), r.value("others_waited_for_it_ns", 0.0)});
  html +=
      "<div class=\"table-box\"><table class=\"cluster-table sortable\"><thead><tr><th>Rank</th><th>Waited "
      "for "
      "others (ms)</th><th>Others waited for it (ms)</th><th>Arrived "
      "last</th><th></th></tr></thead><tbody>\n";
  for (const json& r : per_rank) {
    double waited = r.value("waited_ns", 0.0), caused = r.value("others_waited_for_it_ns", 0.0);
    html += "<tr><td>" + std::to_string(r.value("rank", 0)) + "</td><td>" + fixed(waited / 1e6, 3) +
            "</td><td>" + fixed(caused / 1e6, 3) + "</td><td>" + std::to_string(r.value("arrived_last", 0)) +
            "</td><td><svg width=\"210\" height=\"14\"><rect width=\"" + fixed(waited / most * 200, 1) +
            "\" height=\"6\" fill=\"" + kPalette[0] + "\"/><rect y=\"7\" width=\"" +
            fixed(caused / most * 200, 1) + "\" height=\"6\" fill=\"" + kPalette[3] +
            "\"/></svg></td></tr>\n";
  }
  return html + "</tbody></table></div>\n";
}

// The cluster's section, from its cluster_analysis.json `c` (parsed once:
// 12 MB at 10^5 ranks) and the other outputs in `dir`.
std::string cluster_section(const fs::path& dir, const json& c, PageState& state) {
  if (!c.is_object() || !c.contains("per_rank") || !c["per_rank"].is_array()) return "";
  CsvRows steps = exporter::read_csv_file((dir / "cluster_step_trace_time.csv").string());
  std::string overview = "<div class=\"overview\">\n";
  if (c.contains("advice")) {
    overview += card("findings-card", "Findings for the job (the largest saving first)",
                     exporter::html::findings(c["advice"]) + what_if_list(c));
  }
  overview +=
      incident_card(c) + straggler_card(c, steps) + heat_map_card(steps, cause_metric(c)) + "</div>\n";
  std::string html = "<section id=\"cluster\"><h2>Cluster: " + std::to_string(c["per_rank"].size()) +
                     " ranks</h2>\n" + trace_link(dir / "cluster_trace_view.pftrace", "cluster", state) +
                     overview + waiting_table(c) + cluster_path_section(dir);
  std::string text = base::read_regular_file_at(AT_FDCWD, (dir / "straggler_report.txt").string(), false);
  if (!text.empty())
    html += "<h3>The cluster report</h3>\n<pre class=\"straggler\">" + escape(text) + "</pre>\n";
  return html + "</section>\n";
}

// ---- The page ----

// Above this many runs, only the straggler's and the lowest rank's have a
// section of their own (each is a page of its own: `trainprof report RUN`).
constexpr size_t kRunSectionsShown = 64;

// The rank a run's analysis names (-1: none).
long long rank_of(const std::string& run) {
  json info = read_json(fs::path(run) / "PROFILER_OUTPUT" / "profiler_info.json");
  const json* rank = info.is_object() && info.contains("rank") ? &info["rank"] : nullptr;
  return rank != nullptr && rank->is_number_integer() ? rank->get<long long>() : -1;
}

// The cluster's section and each run's (numbered from `first_index`), or
// for many runs the straggler's and the lowest rank's, said so.
std::string sections(const std::string& path, const std::vector<std::string>& analysed, size_t first_index,
                     PageState& state) {
  fs::path dir = fs::path(path) / "cluster_analysis_output";
  json c = read_json(dir / "cluster_analysis.json");
  std::string html = cluster_section(dir, c, state);
  if (analysed.size() <= kRunSectionsShown) {
    for (size_t i = 0; i < analysed.size(); ++i) html += run_section(analysed[i], first_index + i, state);
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
    html += run_section(analysed[i], first_index + i, state);
    shown += (shown.empty() ? "" : ", ") + std::to_string(ranks[i]);
  }
  return html + "<p class=\"note runs-left-out\">" + std::to_string(analysed.size()) +
         " runs: the sections above are rank(s) " + escape(shown) +
         " (the straggler and the lowest rank). Any run's own page: trainprof report RUN_DIRECTORY.</p>\n";
}

std::string header(const std::string& subtitle) {
  return "<header class=\"top\"><h1>trainprof report</h1><p class=\"meta\">" + subtitle +
         "</p></header>\n<main>\n";
}

fs::path directory_of(const std::string& file) {
  std::error_code ec;
  fs::path p = fs::absolute(file, ec).parent_path();
  return p.empty() ? fs::path(".") : p;
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
  parts.push_back({"step", fixed(d.step_us_a / 1e3, 3), fixed(d.step_us_b / 1e3, 3),
                   fixed((d.step_us_b - d.step_us_a) / 1e3, 3)});
  for (const auto& [part, ab] : d.parts)
    parts.push_back(
        {part, fixed(ab.first / 1e3, 3), fixed(ab.second / 1e3, 3), fixed((ab.second - ab.first) / 1e3, 3)});
  html += table(parts, "diff-steps-table");
  TableView as_written;
  as_written.us_as_ms = false;
  as_written.limit = 40;
  html += "<h3>What changed per step (host: self time; gpu: kernels, copies, sets), largest first</h3>\n" +
          table(exporter::parse_csv(d.csv), "diff-table", as_written);
  return html + "</section>\n";
}

}  // namespace

namespace exporter {

std::string report_page(const std::string& path, const std::vector<std::string>& runs,
                        const std::string& page_file) {
  PageState state{directory_of(page_file)};
  std::string body = header(std::to_string(runs.size()) + " analysed run(s) under " + escape(path)) +
                     sections(path, runs, 0, state) + "</main>\n";
  return html::page(fs::path(path).filename().string(), body);
}

std::string diff_report_page(const DiffReport& d, const std::string& path_a,
                             const std::vector<std::string>& runs_a, const std::string& path_b,
                             const std::vector<std::string>& runs_b, const std::string& page_file) {
  PageState state{directory_of(page_file)};
  std::string body = header("A: " + escape(path_a) + "<br>B: " + escape(path_b)) + diff_section(d) +
                     "<h2 class=\"side\">A: " + escape(path_a) + "</h2>\n" +
                     sections(path_a, runs_a, 0, state) + "<h2 class=\"side\">B: " + escape(path_b) +
                     "</h2>\n" + sections(path_b, runs_b, runs_a.size(), state) + "</main>\n";
  return html::page(fs::path(path_a).filename().string() + " vs " + fs::path(path_b).filename().string(),
                    body);
}

}  // namespace exporter
}  // namespace trainprof
