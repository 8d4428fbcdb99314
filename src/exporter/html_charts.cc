// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/html_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "analysis/cluster.h"
#include "base/json_limits.h"
#include "exporter/html_page.h"

namespace trainprof::exporter::html {

const char* const kStepPartNames[kStepParts] = {"Computing", "Communication(Not Overlapped)", "Data Wait",
                                                "Free"};

namespace {

// A chart's frame: the SVG element that scales to its box.
std::string svg_open(const std::string& css_class, double width, double height,
                     const std::string& attributes = "") {
  return "<svg class=\"" + css_class + " chart\" viewBox=\"0 0 " + fixed(width, 0) + " " + fixed(height, 0) +
         "\" role=\"img\"" + attributes + ">";
}

// A round step for an axis up to `most`: 1, 2 or 5 x 10^k, at most 5 ticks.
double tick_step(double most) {
  if (most <= 0) return 1;
  double step = std::pow(10, std::floor(std::log10(most / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (most / (step * m) <= 5) return step * m;
  }
  return step * 10;
}

// The top of a value axis for values up to `most_us`: the next whole tick.
double axis_top_us(double most_us) {
  double step = tick_step(most_us / 1000);
  return step * 1000 * std::ceil(most_us / 1000 / step);
}

// Horizontal grid lines and their ms labels for a value axis of `most` µs
// drawn `height` tall from `top`, between x = `left` and `right`.
std::string value_axis(double most_us, double left, double right, double top, double height) {
  std::string out;
  double step = tick_step(most_us / 1000);
  for (double v = 0; v <= most_us / 1000 + 1e-9; v += step) {
    double y = top + height - v * 1000 / most_us * height;
    out += "<line class=\"grid\" x1=\"" + fixed(left, 0) + "\" x2=\"" + fixed(right, 0) + "\" y1=\"" +
           fixed(y, 1) + "\" y2=\"" + fixed(y, 1) + "\"/><text class=\"axis\" x=\"" + fixed(left - 4, 0) +
           "\" y=\"" + fixed(y + 3, 1) + "\" text-anchor=\"end\">" + fixed(v, step < 1 ? 1 : 0) + "</text>";
  }
  return out + "<text class=\"axis\" x=\"2\" y=\"" + fixed(top - 2, 0) + "\">ms</text>";
}

// A time axis under a strip: ticks in ms from 0 to `length_us`.
std::string time_axis(double length_us, double left, double width, double y) {
  std::string out;
  double step = tick_step(length_us / 1000);
  for (double v = 0; v <= length_us / 1000 + 1e-9; v += step) {
    double x = left + v * 1000 / length_us * width;
    out += "<line class=\"grid\" x1=\"" + fixed(x, 1) + "\" x2=\"" + fixed(x, 1) + "\" y1=\"" +
           fixed(y - 4, 0) + "\" y2=\"" + fixed(y, 0) + "\"/><text class=\"axis\" x=\"" + fixed(x, 1) +
           "\" y=\"" + fixed(y + 10, 0) + "\" text-anchor=\"middle\">" + fixed(v, step < 1 ? 1 : 0) +
           "</text>";
  }
  return out + "<text class=\"axis\" x=\"" + fixed(left + width, 0) + "\" y=\"" + fixed(y + 22, 0) +
         "\" text-anchor=\"end\">ms from the step's start</text>";
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& keys) {  // colour, label
  std::string out = "<p class=\"legend\">";
  for (const auto& [colour, label] : keys)
    out += "<span class=\"key\" style=\"background:" + colour + "\"></span>" + escape(label);
  return out + "</p>\n";
}

}  // namespace

std::vector<double> step_lengths(const CsvRows& steps) {
  std::vector<double> out;
  int cols[kStepParts];
  for (int i = 0; i < kStepParts; ++i) cols[i] = column(steps, kStepPartNames[i]);
  for (size_t r = 1; r < steps.size(); ++r) {
    double sum = 0;
    for (int c : cols) sum += number(cell(steps[r], c));
    out.push_back(sum);
  }
  return out;
}

std::string findings(const nlohmann::json& advice) {
  if (!advice.is_array()) return "";
  if (advice.empty())
    return "<p class=\"advice-none\">None of the advisor's rules fired: no change it knows "
           "of would save a fair part of the step.</p>\n";
  std::string out = "<ol class=\"findings\">";
  for (const nlohmann::json& f : advice) {
    if (!f.is_object()) continue;
    double saving = base::number_field(f, "saving_ms", -1), step = base::number_field(f, "step_ms", 0);
    out += "<li data-rule=\"" + escape(base::string_field(f, "rule")) + "\"><div class=\"finding-head\"><b>" +
           escape(base::string_field(f, "title", base::string_field(f, "rule"))) + "</b>";
    if (saving >= 0) {
      double share = step > 0 ? std::min(100.0, 100.0 * saving / step) : 0;
      out += "<span class=\"saving\" data-saving-ms=\"" + fixed(saving, 3) + "\">" + ms(saving * 1000) +
             " ms per step";
      if (step > 0) out += " (" + fixed(share, 1) + " % of " + ms(step * 1000) + " ms)";
      out += "</span></div><div class=\"bar\" title=\"" + escape(base::string_field(f, "saving_basis")) +
             "\"><span style=\"width:" + fixed(share, 1) + "%\"></span></div>";
    } else {
      out += "</div>";
    }
    out += "<details><summary>evidence and change</summary>Evidence: " +
           escape(base::string_field(f, "evidence")) +
           "<br>Change: " + escape(base::string_field(f, "change"));
    if (saving >= 0) out += "<br>The saving: " + escape(base::string_field(f, "saving_basis"));
    out += "</details></li>";
  }
  return out + "</ol>\n";
}

std::string step_breakdown_chart(const CsvRows& steps) {
  int cols[kStepParts];
  for (int i = 0; i < kStepParts; ++i) cols[i] = column(steps, kStepPartNames[i]);
  std::vector<double> lengths = step_lengths(steps);
  double most = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  if (most <= 0) return "";
  const double width = 720, height = 200, left = 44, top = 12, plot_w = width - left - 8;
  size_t n = lengths.size();
  double bar = plot_w / static_cast<double>(n);
  double axis_top = axis_top_us(most);
  std::string svg =
      svg_open("step-chart", width, height + top + 26) + value_axis(axis_top, left, width - 8, top, height);
  size_t label_every = std::max<size_t>(1, (n + 11) / 12);
  for (size_t r = 1; r <= n; ++r) {
    double y = top + height, x = left + bar * static_cast<double>(r - 1);
    for (int i = 0; i < kStepParts; ++i) {
      double us = number(cell(steps[r], cols[i]));
      double h = us / axis_top * height;
      y -= h;
      svg += "<rect x=\"" + fixed(x, 2) + "\" y=\"" + fixed(y, 2) + "\" width=\"" +
             fixed(std::max(0.5, bar * 0.85), 2) + "\" height=\"" + fixed(h, 2) + "\" fill=\"" + kPalette[i] +
             "\"><title>step " + escape(steps[r][0]) + ": " + kStepPartNames[i] + " " + fixed(us / 1000, 3) +
             " ms</title></rect>";
    }
    if ((r - 1) % label_every == 0) {
      svg += "<text class=\"axis\" x=\"" + fixed(x + bar * 0.42, 1) + "\" y=\"" +
             fixed(top + height + 12, 0) + "\" text-anchor=\"middle\">" + escape(steps[r][0]) + "</text>";
    }
  }
  svg += "<text class=\"axis\" x=\"" + fixed(width - 8, 0) + "\" y=\"" + fixed(top + height + 24, 0) +
         "\" text-anchor=\"end\">step</text></svg>";
  std::vector<std::pair<std::string, std::string>> keys;
  for (int i = 0; i < kStepParts; ++i) keys.push_back({kPalette[i], kStepPartNames[i]});
  return svg + legend(keys);
}

namespace {

const char* kind_colour(const std::string& kind) {
  static const std::map<std::string, const char*> kColours = {
      {"host", "#4e79a7"},          {"host untracked", "#bab0ac"}, {"data wait", "#edc948"},
      {"communication", "#e15759"}, {"sync", "#b07aa1"},           {"launch", "#76b7b2"},
      {"device", "#59a14f"},        {"device queue", "#9c755f"}};
  auto it = kColours.find(kind);
  return it == kColours.end() ? "#ff9da7" : it->second;
}

}  // namespace

std::string critical_path_strip(const CsvRows& rows) {
  int kind_c = column(rows, "Kind"), name_c = column(rows, "Name"), start_c = column(rows, "Start Time(us)"),
      dur_c = column(rows, "Duration(us)"), count_c = column(rows, "Count"),
      share_c = column(rows, "Step Share(%)"), python_c = column(rows, "Python");
  if (rows.size() < 2 || kind_c < 0 || start_c < 0 || dur_c < 0) return "";
  double begin = number(cell(rows[1], start_c)), end = begin;
  for (size_t r = 1; r < rows.size(); ++r) {
    begin = std::min(begin, number(cell(rows[r], start_c)));
    end = std::max(end, number(cell(rows[r], start_c)) + number(cell(rows[r], dur_c)));
  }
  double length = std::max(end - begin, 1e-3);
  const double width = 720, left = 12, strip_w = width - 28;
  std::string svg = svg_open("critical-path-strip", width, 70);
  std::map<std::string, double> by_kind;
  for (size_t r = 1; r < rows.size(); ++r) {
    const std::string& kind = cell(rows[r], kind_c);
    double start = number(cell(rows[r], start_c)) - begin, dur = number(cell(rows[r], dur_c));
    by_kind[kind] += dur;
    std::string name = cell(rows[r], name_c);
    if (name.empty() && !cell(rows[r], python_c).empty()) name = "Python: " + cell(rows[r], python_c);
    std::string count = cell(rows[r], count_c);
    svg += "<rect x=\"" + fixed(left + start / length * strip_w, 2) + "\" y=\"6\" width=\"" +
           fixed(std::max(0.3, dur / length * strip_w), 2) + "\" height=\"28\" fill=\"" + kind_colour(kind) +
           "\" data-us=\"" + escape(cell(rows[r], dur_c)) + "\"><title>" + escape(kind) +
           (name.empty() ? "" : ": " + escape(name)) +
           (count.empty() || count == "1" ? "" : " (x" + escape(count) + ")") + ", at " + ms(start) +
           " ms for " + ms(dur) + " ms (" + escape(cell(rows[r], share_c)) + " % of the step)</title></rect>";
  }
  svg += time_axis(length, left, strip_w, 46) + "</svg>";
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [kind, us] : by_kind) kinds.push_back({us, kind});
  std::sort(kinds.rbegin(), kinds.rend());
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& [us, kind] : kinds)
    keys.push_back({kind_colour(kind), kind + " " + fixed(100 * us / length, 1) + " %"});
  return svg + legend(keys);
}

std::string memory_at_peak(const CsvRows& rows) {
  int name_c = column(rows, "Name"), size_c = column(rows, "Size(MB)"), share_c = column(rows, "Share(%)");
  if (rows.size() < 2 || name_c < 0 || size_c < 0) return "";
  double total = 0;
  for (size_t r = 1; r < rows.size(); ++r) total += std::max(0.0, number(cell(rows[r], size_c)));
  if (total <= 0) return "";
  const double width = 720;
  std::string svg = svg_open("memory-peak-bar", width, 40);
  double x = 0;
  std::vector<std::pair<std::string, std::string>> keys;
  for (size_t r = 1; r < rows.size(); ++r) {
    double mb = std::max(0.0, number(cell(rows[r], size_c)));
    const char* colour = kPalette[(r - 1) % std::size(kPalette)];
    double w = mb / total * width;
    svg += "<rect x=\"" + fixed(x, 2) + "\" y=\"4\" width=\"" + fixed(w, 2) + "\" height=\"30\" fill=\"" +
           colour + "\" data-mb=\"" + escape(cell(rows[r], size_c)) + "\"><title>" +
           escape(cell(rows[r], name_c)) + ": " + escape(cell(rows[r], size_c)) + " MB (" +
           escape(cell(rows[r], share_c)) + " %)</title></rect>";
    if (w > 70) {
      svg += "<text x=\"" + fixed(x + 4, 1) + "\" y=\"23\" fill=\"#fff\">" + escape(cell(rows[r], name_c)) +
             "</text>";
    }
    keys.push_back({colour, cell(rows[r], name_c) + " " + fixed(mb, mb >= 100 ? 0 : 1) + " MB"});
    x += w;
  }
  return svg + "</svg>" + legend(keys);
}

namespace {

constexpr double kIcicleWidth = 1000, kIcicleRow = 18;
constexpr size_t kIcicleDepth = 16;

struct IcicleDraw {
  double root_us, step_us;
  std::string marks;
  size_t depth = 0, nodes = 0;
};

std::string frame_colour(const std::string& name, size_t depth, bool python) {
  if (depth == 0) return "#8c959f";
  if (depth == 1) return "#afb8c1";
  if (python) return "#b07aa1";
  static const char* const kWarm[] = {"#f28e2b", "#e8a33d", "#f4b35d", "#e15759", "#ef8a62", "#fdae61"};
  return kWarm[std::hash<std::string>()(name) % std::size(kWarm)];
}

void draw(const FlameNode& n, double x, size_t depth, bool python, IcicleDraw& d) {
  double w = n.us / d.root_us * kIcicleWidth;
  if (w < 0.2 || depth >= kIcicleDepth || d.nodes >= 4000) return;
  ++d.nodes;
  d.depth = std::max(d.depth, depth + 1);
  python = python || n.name == "Python outside operators";
  std::string pct = d.step_us > 0 ? fixed(100 * n.us / d.step_us, 1) + " % of the step" : "";
  double y = kIcicleRow * static_cast<double>(depth);
  // x and width in % of the chart, so that its text keeps its size at
  // any width; the page's script writes the labels that fit.
  d.marks += "<g class=\"node\" data-x=\"" + fixed(x, 3) + "\" data-w=\"" + fixed(w, 3) + "\" data-depth=\"" +
             std::to_string(depth) + "\" data-name=\"" + escape(n.name) + "\" data-us=\"" + fixed(n.us, 3) +
             "\"><rect x=\"" + fixed(x / 10, 3) + "%\" y=\"" + fixed(y, 0) + "\" width=\"" +
             fixed(w / 10, 3) + "%\" height=\"" + fixed(kIcicleRow - 1, 0) + "\" fill=\"" +
             frame_colour(n.name, depth, python) + "\"><title>" + escape(n.name) + ": " + ms(n.us) +
             " ms per step" + (pct.empty() ? "" : ", " + pct) + "</title></rect><text x=\"" +
             fixed(x / 10, 3) + "%\" dx=\"3\" y=\"" + fixed(y + 13, 0) + "\"></text></g>";
  double child_x = x, end = x + w;
  for (const FlameNode& c : n.children) {
    if (child_x >= end) break;
    draw(c, child_x, depth + 1, python, d);
    child_x += std::min(c.us / d.root_us * kIcicleWidth, end - child_x);
  }
}

}  // namespace

std::string icicle(const HostFlame& flame) {
  if (flame.steps == 0 || flame.root.us <= 0 || flame.root.children.empty()) return "";
  IcicleDraw d{flame.root.us, flame.root.children.front().us, "", 0, 0};
  draw(flame.root, 0, 0, false, d);
  return "<svg class=\"icicle chart\" width=\"100%\" height=\"" +
         fixed(kIcicleRow * static_cast<double>(d.depth), 0) + "\" data-width=\"" + fixed(kIcicleWidth, 0) +
         "\" role=\"img\">" + d.marks + "</svg>\n";
}

namespace {

struct HeatCell {
  double us = -1;  // -1: no rank of the bin had the step
  std::string rank;
};

constexpr size_t kHeatRows = 128, kHeatColumns = 64;

}  // namespace

std::string heat_map(const CsvRows& rows, const char* metric, bool shown) {
  int step_c = column(rows, "Step"), type_c = column(rows, "Type"), rank_c = column(rows, "Index"),
      value_c = column(rows, metric);
  if (step_c < 0 || type_c < 0 || rank_c < 0 || value_c < 0) return "";
  std::map<long long, size_t> rank_row, step_column;  // rank / step -> its place after binning
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
  for (size_t r = 1; r < rows.size(); ++r) {
    if (cell(rows[r], type_c) != "rank") continue;
    HeatCell& c = grid[rank_row[std::atoll(cell(rows[r], rank_c).c_str())]]
                      [step_column[std::atoll(cell(rows[r], step_c).c_str())]];
    double us = number(cell(rows[r], value_c));
    if (us > c.us) c = {us, cell(rows[r], rank_c)};
  }
  double low = -1, high = 0;
  for (const auto& row : grid) {
    for (const HeatCell& c : row) {
      if (c.us < 0) continue;
      low = low < 0 ? c.us : std::min(low, c.us);
      high = std::max(high, c.us);
    }
  }
  auto span = [](const std::string& a, const std::string& b) { return a == b ? a : a + "-" + b; };
  const double cell_w = 640.0 / static_cast<double>(width);
  const double cell_h = std::clamp(480.0 / static_cast<double>(height), 3.0, 22.0);
  std::string svg = "<svg class=\"heat-map chart\" data-metric=\"" + escape(metric) + "\" data-rows=\"" +
                    std::to_string(height) + "\" data-ranks-per-row=\"" + std::to_string(rank_bin) +
                    "\" viewBox=\"0 0 " + fixed(80 + cell_w * static_cast<double>(width), 0) + " " +
                    fixed(20 + cell_h * static_cast<double>(height), 0) + "\" role=\"img\"" +
                    (shown ? "" : " style=\"display:none\"") + ">";
  for (size_t x = 0; x < width; x += std::max<size_t>(1, width / 8)) {
    svg += "<text class=\"axis\" x=\"" + fixed(80 + cell_w * static_cast<double>(x), 1) +
           "\" y=\"10\">step " + first_step[x] + "</text>";
  }
  for (size_t y = 0; y < height; ++y) {
    double top = 16 + cell_h * static_cast<double>(y);
    if (y % std::max<size_t>(1, static_cast<size_t>(14 / cell_h) + 1) == 0) {
      svg += "<text class=\"axis\" x=\"0\" y=\"" + fixed(top + std::min(cell_h, 14.0) - 2, 1) + "\">rank " +
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
      svg += "<rect x=\"" + fixed(80 + cell_w * static_cast<double>(x), 1) + "\" y=\"" + fixed(top, 1) +
             "\" width=\"" + fixed(cell_w, 1) + "\" height=\"" + fixed(cell_h, 1) + "\" fill=\"" + colour +
             "\" data-rank=\"" + escape(c.rank) + "\" data-us=\"" + fixed(c.us, 3) + "\"><title>rank " +
             escape(span(first_rank[y], last_rank[y])) + ", step " + span(first_step[x], last_step[x]) +
             ": " + escape(metric) + " " + fixed(c.us / 1000, 3) + " ms (the most: rank " + escape(c.rank) +
             ")</title></rect>";
    }
  }
  return svg + "</svg>";
}

std::string late_steps_chart(const CsvRows& rows, int64_t straggler, const std::vector<int64_t>& late_steps,
                             const std::string& metric) {
  int step_c = column(rows, "Step"), type_c = column(rows, "Type"), rank_c = column(rows, "Index"),
      value_c = column(rows, metric);
  if (step_c < 0 || type_c < 0 || rank_c < 0 || value_c < 0 || straggler < 0) return "";
  std::map<long long, double> own;
  std::map<long long, std::vector<double>> others;
  for (size_t r = 1; r < rows.size(); ++r) {
    if (cell(rows[r], type_c) != "rank") continue;
    long long step = std::atoll(cell(rows[r], step_c).c_str());
    double us = number(cell(rows[r], value_c));
    if (std::atoll(cell(rows[r], rank_c).c_str()) == straggler)
      own[step] = us;
    else
      others[step].push_back(us);
  }
  if (own.empty()) return "";
  std::map<long long, double> typical;
  double most = 0;
  // The others' median as the cluster report measures the straggler against it.
  for (auto& [step, values] : others) typical[step] = analysis::median(values);
  for (const auto& [step, us] : own) most = std::max({most, us, typical[step]});
  if (most <= 0) return "";
  // At most 200 steps drawn: the first ones.
  const double width = 720, height = 160, left = 44, top = 12, plot_w = width - left - 8;
  size_t n = std::min<size_t>(own.size(), 200);
  double bar = plot_w / static_cast<double>(n);
  double axis_top = axis_top_us(most);
  std::string svg =
      svg_open("late-steps", width, height + top + 26) + value_axis(axis_top, left, width - 8, top, height);
  size_t i = 0, label_every = std::max<size_t>(1, (n + 11) / 12);
  for (const auto& [step, us] : own) {
    if (i >= n) break;
    double x = left + bar * static_cast<double>(i);
    bool late = std::find(late_steps.begin(), late_steps.end(), step) != late_steps.end();
    double h = us / axis_top * height, t = typical[step] / axis_top * height;
    svg += "<rect class=\"" + std::string(late ? "late" : "on-time") + "\" x=\"" + fixed(x, 2) + "\" y=\"" +
           fixed(top + height - h, 2) + "\" width=\"" + fixed(std::max(0.5, bar * 0.8), 2) + "\" height=\"" +
           fixed(h, 2) + "\" fill=\"" + (late ? "#e15759" : "#f4b6b7") + "\" data-step=\"" +
           std::to_string(step) + "\" data-us=\"" + fixed(us, 3) + "\"><title>step " + std::to_string(step) +
           (late ? " (late)" : "") + ": rank " + std::to_string(straggler) + " " + escape(metric) + " " +
           fixed(us / 1000, 3) + " ms, the others' median " + fixed(typical[step] / 1000, 3) +
           " ms</title></rect>";
    if (others.count(step) != 0) {
      svg += "<line x1=\"" + fixed(x - 1, 2) + "\" x2=\"" + fixed(x + bar * 0.8 + 1, 2) + "\" y1=\"" +
             fixed(top + height - t, 2) + "\" y2=\"" + fixed(top + height - t, 2) +
             "\" stroke=\"#24292f\" stroke-width=\"2\"/>";
    }
    if (i % label_every == 0) {
      svg += "<text class=\"axis\" x=\"" + fixed(x + bar * 0.4, 1) + "\" y=\"" + fixed(top + height + 12, 0) +
             "\" text-anchor=\"middle\">" + std::to_string(step) + "</text>";
    }
    ++i;
  }
  svg += "</svg>";
  return svg + legend({{"#e15759", "rank " + std::to_string(straggler) + "'s " + metric + ", a late step"},
                       {"#f4b6b7", "another step"},
                       {"#24292f", "the other ranks' median"}});
}

}  // namespace trainprof::exporter::html
