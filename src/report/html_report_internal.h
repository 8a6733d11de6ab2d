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

/// True when the run's devices lie on more than one node (a merged run, or a simulation of several nodes).
bool multi_node(const analyze::RunAnalysis& run);

/// How the report names a device: "GPU 11" or, on several nodes, "GPU 11 (node 1, slot 3)"; a host CPU by its
/// name, "node 1: host vm" on several nodes.
std::string device_label(const analyze::RunAnalysis& run, const store::DeviceInfo& device);

/// How a verdict names a step lane (a GPU's idx, or a rank where no GPU is recorded): the GPU's device_label,
/// or "rank 1 (node 1, host vm)" in a merged run.
std::string lane_label(const analyze::RunAnalysis& run, int32_t idx);

/// The nodes of a run on several nodes (host, the run each was recorded in, devices, ranks, clock shift);
/// "" on one node.
std::string nodes_table(const analyze::RunAnalysis& run);

}  // namespace calo::report
