// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The pieces report.html is made of: text made safe for HTML, times shown in
// milliseconds, tables a reader can sort, filter and page through, and the
// page around them (its style and its one script, all inline: the page
// fetches nothing).
#ifndef TRAINPROF_EXPORTER_HTML_PAGE_H_
#define TRAINPROF_EXPORTER_HTML_PAGE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "exporter/csv_reader.h"

namespace trainprof::exporter::html {

// `text` with & < > " ' replaced by their entities.
std::string escape(std::string_view text);

// `value` with `decimals` digits after the point.
std::string fixed(double value, int decimals);

// A duration of `us` microseconds in ms, to the µs below 10 ms and with
// three significant digits or more above (0.042, 3.217, 12.35, 412.7).
std::string ms(double us);

// The number in a CSV cell (0 when it holds none).
double number(const std::string& cell);

// The index of column `name` in a CSV's header row, -1 when absent.
int column(const CsvRows& rows, const std::string& name);

// Row `row`'s cell `index`, "" when out of range.
const std::string& cell(const std::vector<std::string>& row, int index);

// How a table shows a CSV's cells. Each cell keeps the CSV's own text in
// data-v (and each header its CSV name in data-csv) wherever the shown text
// differs, so the page's numbers can be checked against the file.
struct TableView {
  // Columns named "...(us)" are shown in ms; timestamps ("Start Time(us)",
  // "Timestamp(us)", "Peak Time(us)") as ms after `origin_us` (of the row's
  // step when `origin_per_step` names the step column's origins).
  bool us_as_ms = true;
  bool all_us = false;  // every column but the first holds µs (step_trace_time.csv: names without a unit)
  double origin_us = 0;
  std::string origin_name = "start";                         // said in the header: "(ms from <origin_name>)"
  std::vector<std::pair<std::string, double>> step_origins;  // step -> its start (µs)
  size_t limit = 5000;                                       // rows at most, the rest said to be in the file
  std::string file;  // the CSV the rows come from, named under the table
};

// A CSV's rows as a table of class `css_class` (which the tests and the
// script find), sortable by clicking a header; above 25 rows a filter box
// and pages of 25.
std::string table(const CsvRows& rows, const std::string& css_class, const TableView& view = {});

// A page titled `title` holding `body`, with the style and the script.
std::string page(const std::string& title, const std::string& body);

// `bytes` in base64 (RFC 4648, with padding).
std::string base64(std::string_view bytes);

// The colours of the report's series, in order.
extern const char* const kPalette[10];

}  // namespace trainprof::exporter::html

#endif  // TRAINPROF_EXPORTER_HTML_PAGE_H_
