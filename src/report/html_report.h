// `calo report`: one self-contained HTML file (inline CSS + SVG, a few lines of inline script that only
// checks the charts) over one or more analyzed runs. Sections: docs/REPORTS.md.
#pragma once

#include <string>
#include <vector>

#include "analyze/metrics.h"

namespace calo::report {

/// Options of render_html_report.
struct ReportOptions {
  std::string title = "Calorimeter report";  ///< page title
};

/// Renders the report page for `runs` (analyze::analyze_run results, in the order given).
std::string render_html_report(const std::vector<analyze::RunAnalysis>& runs,
                               const ReportOptions& options = {});

/// The report's verdict as plain lines, as `calo report` prints it beside the page: which run is better (two
/// or more contenders), then per run "run N: label" and its three findings that matter most ("  1. ...").
std::vector<std::string> verdict_lines(const std::vector<analyze::RunAnalysis>& runs);

/// The page's head (shared style and chart-check script), <body>, the <h1> title and one note paragraph;
/// close the page with "</body></html>". Shared by the run and the campaign report.
std::string page_open(const std::string& title, const std::string& note);

/// A number for a table cell: "–" for NaN, 3-4 significant digits otherwise (unit "ratio": 3 decimals).
std::string format_number(double value, const std::string& unit = "");

/// Number of <figure class="chart"> elements in `html` (used by tests and the benchmark).
int count_charts(const std::string& html);

}  // namespace calo::report
