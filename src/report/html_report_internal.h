// Internal to src/report: pieces of the HTML run report shared by html_report.cpp and html_report_gpus.cpp.
#pragma once

#include <fmt/format.h>

#include <string>

#include "analyze/metrics.h"

namespace calo::report {

/// Wraps a chart in an element that the verdict links to ("" for an empty chart).
inline std::string anchored(const std::string& id, const std::string& chart) {
  if (chart.empty()) return "";
  return fmt::format("<div id=\"{}\">\n{}</div>\n", id, chart);
}

/// A run's per-GPU figures: the GPUs × metrics heatmap (above kMaxGpuRows a spread table and the outliers),
/// node × slot grids, stragglers and the thermal groups; "" when no GPU metric was measured.
std::string heatmap_section(const analyze::RunAnalysis& run, const std::string& prefix);

}  // namespace calo::report
