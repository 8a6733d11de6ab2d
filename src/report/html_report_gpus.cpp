// The per-GPU part of the HTML run report: the GPUs × metrics heatmap, node × slot grids, stragglers and
// thermal groups.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "report/html_report.h"
#include "report/html_report_internal.h"
#include "report/many_gpus.h"
#include "report/svg_chart.h"

namespace calo::report {
namespace {

// Runs over several nodes: mean power and peak temperature per GPU on a node x slot grid (one colour scale).
std::string node_slot_section(const analyze::RunAnalysis& run, const std::string& prefix) {
  int32_t nodes = 0;
  int32_t slots = 0;
  for (const auto& metrics : run.device_metrics) {
    if (metrics.device.kind != store::DeviceKind::kGpu) continue;
    nodes = std::max(nodes, metrics.device.node + 1);
    slots = std::max(slots, metrics.device.slot + 1);
  }
  if (nodes < 2) return "";
  auto grid = [&](auto member) {
    std::vector<std::vector<double>> values(static_cast<std::size_t>(nodes),
                                            std::vector<double>(static_cast<std::size_t>(slots), NAN));
    for (const auto& metrics : run.device_metrics) {
      if (metrics.device.kind != store::DeviceKind::kGpu) continue;
      values[static_cast<std::size_t>(metrics.device.node)][static_cast<std::size_t>(metrics.device.slot)] =
          metrics.*member;
    }
    return values;
  };
  return anchored(prefix + "node-power", node_slot_heatmap("Mean power per GPU, node × slot", "W",
                                                           grid(&analyze::DeviceMetrics::power_mean_w))) +
         anchored(prefix + "node-temp",
                  node_slot_heatmap("Peak temperature per GPU, node × slot", "°C",
                                    grid(&analyze::DeviceMetrics::temp_peak_c), NodeFold::kMax));
}

/// Column titles of the GPUs × metrics heatmap, in the order gpu_metric_values gives the values.
std::vector<std::string> gpu_metric_columns() {
  return {"P mean W", "P peak W", "P p99 W", "swing W",   "T mean °C", "T peak °C",
          "SM MHz",   "energy J", "pcap %",  "thermal %", "lag ms"};
}

/// Share of time throttled for temperature (the two thermal reasons summed), in percent; NaN if neither was
/// measured.
double thermal_throttle_pct(const analyze::DeviceMetrics& metrics) {
  double thermal = NAN;
  if (!std::isnan(metrics.throttle_fraction[1]) || !std::isnan(metrics.throttle_fraction[2])) {
    thermal = (std::isnan(metrics.throttle_fraction[1]) ? 0 : metrics.throttle_fraction[1]) +
              (std::isnan(metrics.throttle_fraction[2]) ? 0 : metrics.throttle_fraction[2]);
    thermal *= 100.0;
  }
  return thermal;
}

/// One GPU's heatmap row, in gpu_metric_columns order.
std::vector<double> gpu_metric_values(const analyze::DeviceMetrics& metrics) {
  return {metrics.power_mean_w,          metrics.power_peak_w,    metrics.power_p99_w,
          metrics.power_swing_100ms_w,   metrics.temp_mean_c,     metrics.temp_peak_c,
          metrics.sm_clock_mean_mhz,     metrics.energy_j,        metrics.throttle_fraction[0] * 100.0,
          thermal_throttle_pct(metrics), metrics.straggler_lag_ms};
}

/// The GPUs × metrics grid of a run: one row per GPU in (node, slot) order.
struct GpuGrid {
  std::vector<HeatmapRow> rows;             // "GPU i (slot s)" grouped by "node n"
  std::vector<std::vector<double>> values;  // values[row][column]
  std::vector<std::string> columns;         // column titles
  bool any_measured = false;                // some value is not NaN
};

/// Positions in run.device_metrics ordered by (node, slot), ties in their original order.
std::vector<std::size_t> devices_by_node_slot(const analyze::RunAnalysis& run) {
  std::vector<std::size_t> order(run.device_metrics.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& da = run.device_metrics[a].device;
    const auto& db = run.device_metrics[b].device;
    return std::make_pair(da.node, da.slot) < std::make_pair(db.node, db.slot);
  });
  return order;
}

/// Collects every GPU's row of figures.
GpuGrid gpu_grid(const analyze::RunAnalysis& run) {
  GpuGrid grid;
  grid.columns = gpu_metric_columns();
  for (std::size_t index : devices_by_node_slot(run)) {
    const auto& metrics = run.device_metrics[index];
    if (metrics.device.kind != store::DeviceKind::kGpu) continue;
    std::vector<double> row = gpu_metric_values(metrics);
    for (double value : row) grid.any_measured = grid.any_measured || !std::isnan(value);
    grid.rows.push_back({fmt::format("GPU {} (slot {})", metrics.device.idx, metrics.device.slot),
                         fmt::format("node {}", metrics.device.node)});
    grid.values.push_back(row);
  }
  return grid;
}

/// For thousands of rows: the spread table of every GPU; keeps only the outlier rows in `grid` and says so
/// in `shown`.
std::string keep_outlier_rows(GpuGrid& grid, std::string& shown) {
  std::vector<std::string> labels;
  for (const auto& row : grid.rows) labels.push_back(row.label + ", " + row.group);
  std::string out = fmt::format("<p>Spread over all {} GPUs:</p>\n", grid.rows.size()) +
                    spread_table(grid.columns, labels, grid.values);
  std::vector<HeatmapRow> kept_rows;
  std::vector<std::vector<double>> kept_values;
  for (std::size_t row : outlier_rows(grid.values, kMaxGpuLines)) {
    kept_rows.push_back(grid.rows[row]);
    kept_values.push_back(grid.values[row]);
  }
  shown = fmt::format("The {} of {} GPUs furthest from the median in any column", kept_rows.size(),
                      grid.rows.size());
  grid.rows = std::move(kept_rows);
  grid.values = std::move(kept_values);
  return out;
}

/// The stragglers paragraph ("" when the run has none).
std::string stragglers_paragraph(const analyze::RunAnalysis& run) {
  if (run.stragglers.empty()) return "";
  std::string out = "<p><b>Stragglers</b> (ended their step last in more than 2/n of the steps): ";
  for (int32_t idx : run.stragglers) {
    for (const auto& metrics : run.device_metrics) {
      if (metrics.device.idx != idx) continue;
      out += fmt::format(
          "{} — last in {:.0f}% of steps, +{:.2f} ms after the median, mean SM clock {} MHz, "
          "mean temperature {} °C. ",
          escape_html(lane_label(run, idx)), metrics.straggler_fraction * 100, metrics.straggler_lag_ms,
          format_number(metrics.sm_clock_mean_mhz), format_number(metrics.temp_mean_c));
    }
  }
  out += "</p>\n";
  return out;
}

/// The table of node and slot thermal groups ("" when the run has none).
std::string thermal_groups_table(const analyze::RunAnalysis& run) {
  if (run.nodes.empty()) return "";
  std::string out;
  // Above kMaxNodeRows nodes only the hottest are listed (by peak temperature); every slot is.
  std::vector<analyze::ThermalGroup> nodes = run.nodes;
  if (nodes.size() > kMaxNodeRows) {
    std::stable_sort(nodes.begin(), nodes.end(),
                     [](const auto& a, const auto& b) { return a.temp_peak_c > b.temp_peak_c; });
    nodes.resize(8);
    out += fmt::format("<p>The 8 hottest of {} nodes (peak temperature), then every slot:</p>\n",
                       run.nodes.size());
  }
  out +=
      "<table><tr><th class=\"key\">group</th><th>mean temp °C</th><th>spread °C</th><th>imbalance %</th>"
      "<th>peak °C</th></tr>\n";
  const std::vector<analyze::ThermalGroup>& listed_nodes = nodes;
  for (const auto* groups : {&listed_nodes, &run.slots}) {
    for (const auto& group : *groups) {
      out += fmt::format("<tr><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         escape_html(group.label), format_number(group.temp_mean_c),
                         format_number(group.temp_spread_c), format_number(group.imbalance_pct),
                         format_number(group.temp_peak_c));
    }
  }
  out += "</table>\n";
  return out;
}

}  // namespace

std::string heatmap_section(const analyze::RunAnalysis& run, const std::string& prefix) {
  GpuGrid grid = gpu_grid(run);
  if (!grid.any_measured) return "";
  drop_empty_columns(grid.columns, grid.values);
  std::string shown = "GPUs";
  std::string out;
  // Thousands of rows: every GPU's spread in a table, the outliers drawn.
  if (grid.rows.size() > kMaxGpuRows) out += keep_outlier_rows(grid, shown);
  out += anchored(prefix + "gpus",
                  heatmap_chart(shown + " × metrics, grouped by node (P power, swing: largest "
                                        "change within 100 ms, T temperature, pcap / "
                                        "thermal: throttled share of time, lag: mean step-end lag "
                                        "behind the median; colour per column: light "
                                        "= low, dark = high)",
                                grid.rows, grid.columns, grid.values));
  out += node_slot_section(run, prefix);
  out += stragglers_paragraph(run);
  out += thermal_groups_table(run);
  return out;
}

}  // namespace calo::report
