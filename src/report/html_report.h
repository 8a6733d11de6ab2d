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

/// Number of <figure class="chart"> elements in `html` (used by tests and the benchmark).
int count_charts(const std::string& html);

}  // namespace calo::report
