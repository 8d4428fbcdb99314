// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// report.html's text (trainprof report): the analysed runs' outputs on one
// self-contained page. Finding the runs and writing the file is the
// pipeline's (trainprof::write_report).
#ifndef TRAINPROF_EXPORTER_HTML_REPORT_H_
#define TRAINPROF_EXPORTER_HTML_REPORT_H_

#include <string>
#include <vector>

#include "trainprof/diff.h"

namespace trainprof::exporter {

// The page of `runs` (analysed run directories) found at or below `path`,
// with its cluster analysis when `path` has one. `page_file`: where the
// page goes, which its links to the runs' files are relative to.
std::string report_page(const std::string& path, const std::vector<std::string>& runs,
                        const std::string& page_file);

// Two runs (or jobs) compared: what changed (`d`), then each side's page.
std::string diff_report_page(const DiffReport& d, const std::string& path_a,
                             const std::vector<std::string>& runs_a, const std::string& path_b,
                             const std::vector<std::string>& runs_b, const std::string& page_file);

}  // namespace trainprof::exporter

#endif  // TRAINPROF_EXPORTER_HTML_REPORT_H_
