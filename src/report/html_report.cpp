// HTML report assembly: header, summary table, time series, heatmaps, kernel bars, comparisons, sim overlay.
#include "report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "analyze/compare.h"
#include "report/svg_chart.h"

namespace calo::report {
namespace {

constexpr const char* kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.key,th.key{text-align:left}
.note{color:#666;font-size:12px}
figure.chart{margin:10px 0 18px}figcaption{font-weight:bold;font-size:14px;margin-bottom:4px}
svg{font-size:11px;background:#fff}
svg .grid{stroke:#eee}svg .axis{stroke:#888}svg .frame{fill:none;stroke:#888}
svg .tick{fill:#444}svg .axis-title{fill:#222;font-size:12px}svg .legend{fill:#222;font-size:11px}
svg .line{fill:none;stroke-width:1.4}svg .band{fill:none;stroke-width:1.6;stroke-opacity:.25}
svg .step-mark{stroke:#bbb;stroke-dasharray:2 3}svg .cell{font-size:10px;fill:#222}
svg .group{font-size:11px;font-weight:bold;fill:#444}svg .group-rule{stroke:#555}
svg .cell-empty{fill:#f7f7f7}
)";

// Verifies every chart has data and drew something; results land in <body data-*> for headless tests.
constexpr const char* kCheckScript = R"(
window.caloErrors=[];window.addEventListener('error',function(e){window.caloErrors.push(String(e.message));
document.body.setAttribute('data-js-errors',String(window.caloErrors.length));});
document.addEventListener('DOMContentLoaded',function(){var charts=document.querySelectorAll('figure.chart');
var empty=0;charts.forEach(function(f){var svg=f.querySelector('svg');var box=svg?svg.getBBox():null;
if(!(parseInt(f.dataset.points||'0')>0)||!box||box.width<=0||box.height<=0){empty++;f.setAttribute('data-empty','1');}});
document.body.setAttribute('data-charts',String(charts.length));
document.body.setAttribute('data-empty-charts',String(empty));
document.body.setAttribute('data-js-errors',String(window.caloErrors.length));
document.body.setAttribute('data-ready','1');});
)";

std::string number(double value, const std::string& unit = "") {
  if (std::isnan(value)) return "–";
  double magnitude = std::fabs(value);
  std::string text;
  if (unit == "ratio" && magnitude <= 10) {
    text = fmt::format("{:.3f}", value);
  } else if (magnitude >= 1e6) {
    text = fmt::format("{:.4g}", value);
  } else if (magnitude >= 100) {
    text = fmt::format("{:.1f}", value);
  } else if (magnitude >= 1) {
    text = fmt::format("{:.3f}", value);
  } else {
    text = fmt::format("{:.4g}", value);
  }
  return text;
}

std::string percent(double ratio) {
  return std::isnan(ratio) ? "–" : fmt::format("{:+.1f}%", ratio * 100.0);
}

std::string device_label(const store::DeviceInfo& device) {
  return fmt::format("GPU {} (n{} s{})", device.idx, device.node, device.slot);
}

std::string run_header(const analyze::RunAnalysis& run, std::size_t index) {
  const auto& info = run.run;
  std::string devices;
  std::map<std::string, int> names;
  int32_t nodes = 0;
  for (const auto& device : run.devices) {
    ++names[device.name];
    nodes = std::max(nodes, device.node + 1);
  }
  for (const auto& [name, count] : names)
    devices += fmt::format("{}{} × {}", devices.empty() ? "" : ", ", count, name);
  std::string layout;
  nlohmann::json config = nlohmann::json::parse(info.config_json, nullptr, false);
  if (config.is_object()) {
    for (const auto& [key, value] : config.items()) {
      if (value.is_primitive())
        layout += fmt::format("{}{}={}", layout.empty() ? "" : ", ", key, value.dump());
    }
  }
  double duration_s = static_cast<double>(run.chart_end_ns - run.chart_begin_ns) * 1e-9;
  return fmt::format(
      "<h2>Run {}: {} <span class=\"note\">({})</span></h2>\n<table class=\"header\">"
      "<tr><th class=\"key\">command</th><td class=\"key\"><code>{}</code></td></tr>"
      "<tr><th class=\"key\">host</th><td class=\"key\">{}</td></tr>"
      "<tr><th class=\"key\">devices</th><td class=\"key\">{} on {} node(s)</td></tr>"
      "<tr><th class=\"key\">layout / config</th><td class=\"key\">{}</td></tr>"
      "<tr><th class=\"key\">recorded</th><td class=\"key\">{:.1f} s, {} samples, {} steps; directory "
      "{}</td></tr>"
      "</table>\n",
      index + 1, escape_html(info.name), store::to_string(info.kind), escape_html(info.command),
      escape_html(info.host), escape_html(devices.empty() ? "none" : devices), std::max(nodes, 1),
      escape_html(layout.empty() ? "–" : layout), duration_s, run.sample_count, run.steps,
      escape_html(run.run_dir.string()));
}

std::string summary_table(const analyze::Comparison& comparison) {
  std::string out = "<table class=\"summary\"><tr><th class=\"key\">figure</th><th>unit</th>";
  for (const auto& label : comparison.run_labels) out += fmt::format("<th>{}</th>", escape_html(label));
  bool ratios = comparison.run_labels.size() > 1;
  bool errors = comparison.measured_reference >= 0;
  if (ratios) {
    for (std::size_t index = 1; index < comparison.run_labels.size(); ++index) {
      out += fmt::format("<th>run {} / run 1</th>", index + 1);
    }
  }
  if (errors) out += "<th>sim error vs measured</th>";
  out += "</tr>\n";
  for (const auto& row : comparison.rows) {
    bool any = false;
    for (double value : row.values) any = any || !std::isnan(value);
    if (!any) continue;
    out +=
        fmt::format("<tr><td class=\"key\">{}</td><td>{}</td>", escape_html(row.key), escape_html(row.unit));
    for (double value : row.values) out += fmt::format("<td>{}</td>", number(value, row.unit));
    if (ratios) {
      for (std::size_t index = 1; index < row.ratio.size(); ++index) {
        out += fmt::format("<td>{}</td>",
                           std::isnan(row.ratio[index]) ? "–" : fmt::format("{:.3f}", row.ratio[index]));
      }
    }
    if (errors) {
      std::string cell;
      for (std::size_t index = 0; index < row.sim_error.size(); ++index) {
        if (!std::isnan(row.sim_error[index]))
          cell += (cell.empty() ? "" : " ") + percent(row.sim_error[index]);
      }
      out += fmt::format("<td>{}</td>", cell.empty() ? "–" : cell);
    }
    out += "</tr>\n";
  }
  out += "</table>\n";
  return out;
}

std::string time_series_section(const analyze::RunAnalysis& run) {
  struct Wanted {
    std::vector<const char*> metrics;
    const char* label;
  };
  const Wanted wanted[] = {{{"power_sampled_w", "power_instant_w", "power_avg_w"}, "GPU power"},
                           {{"temp_gpu_c"}, "GPU temperature"},
                           {{"clock_sm_mhz"}, "SM clock"},
                           {{"util_gpu_pct"}, "GPU utilization"}};
  std::vector<double> marks;
  for (const auto& [begin, end] : run.step_marks_ns) marks.push_back(static_cast<double>(begin) * 1e-9);
  double x_end_s = static_cast<double>(run.chart_end_ns - run.chart_begin_ns) * 1e-9;
  std::string out;
  for (const auto& item : wanted) {
    for (const char* metric : item.metrics) {
      auto found = run.series.find(metric);
      if (found == run.series.end()) continue;
      std::vector<TimeSeries> lines;
      std::string unit;
      for (std::size_t slot = 0; slot < found->second.size(); ++slot) {
        const auto& digest = found->second[slot];
        if (digest.count == 0) continue;
        unit = digest.unit;
        lines.push_back({device_label(run.devices[slot]), digest.buckets});
      }
      if (lines.empty()) continue;
      out += time_series_chart(
          fmt::format("{} per GPU ({}; band: min–max per pixel, line: mean)", item.label, metric), item.label,
          unit, x_end_s, lines, marks);
      break;
    }
  }
  return out;
}

std::string heatmap_section(const analyze::RunAnalysis& run) {
  std::vector<HeatmapRow> rows;
  std::vector<std::vector<double>> values;
  const std::vector<std::string> columns = {"P mean W",  "P peak W",  "P p99 W", "swing W",
                                            "T mean °C", "T peak °C", "SM MHz",  "energy J",
                                            "pcap %",    "thermal %", "lag ms"};
  std::vector<std::size_t> order(run.device_metrics.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& da = run.device_metrics[a].device;
    const auto& db = run.device_metrics[b].device;
    return std::make_pair(da.node, da.slot) < std::make_pair(db.node, db.slot);
  });
  bool any = false;
  for (std::size_t index : order) {
    const auto& metrics = run.device_metrics[index];
    if (metrics.device.kind != store::DeviceKind::kGpu) continue;
    double thermal = NAN;
    if (!std::isnan(metrics.throttle_fraction[1]) || !std::isnan(metrics.throttle_fraction[2])) {
      thermal = (std::isnan(metrics.throttle_fraction[1]) ? 0 : metrics.throttle_fraction[1]) +
                (std::isnan(metrics.throttle_fraction[2]) ? 0 : metrics.throttle_fraction[2]);
      thermal *= 100.0;
    }
    std::vector<double> row = {metrics.power_mean_w,
                               metrics.power_peak_w,
                               metrics.power_p99_w,
                               metrics.power_swing_100ms_w,
                               metrics.temp_mean_c,
                               metrics.temp_peak_c,
                               metrics.sm_clock_mean_mhz,
                               metrics.energy_j,
                               metrics.throttle_fraction[0] * 100.0,
                               thermal,
                               metrics.straggler_lag_ms};
    for (double value : row) any = any || !std::isnan(value);
    rows.push_back({fmt::format("GPU {} (slot {})", metrics.device.idx, metrics.device.slot),
                    fmt::format("node {}", metrics.device.node)});
    values.push_back(row);
  }
  if (!any) return "";
  std::string out = heatmap_chart(
      "GPUs × metrics, grouped by node (P power, swing: largest change within 100 ms, T temperature, pcap / "
      "thermal: throttled share of time, lag: mean step-end lag behind the median; colour per column: light "
      "= low, dark = high)",
      rows, columns, values);
  if (!run.stragglers.empty()) {
    out += "<p><b>Stragglers</b> (ended their step last in more than 2/n of the steps): ";
    for (int32_t idx : run.stragglers) {
      for (const auto& metrics : run.device_metrics) {
        if (metrics.device.idx != idx) continue;
        out += fmt::format(
            "GPU {} — last in {:.0f}% of steps, +{:.2f} ms after the median, mean SM clock {} MHz, "
            "mean temperature {} °C. ",
            idx, metrics.straggler_fraction * 100, metrics.straggler_lag_ms,
            number(metrics.sm_clock_mean_mhz), number(metrics.temp_mean_c));
      }
    }
    out += "</p>\n";
  }
  if (!run.nodes.empty()) {
    out +=
        "<table><tr><th class=\"key\">group</th><th>mean temp °C</th><th>spread °C</th><th>imbalance %</th>"
        "<th>peak °C</th></tr>\n";
    for (const auto* groups : {&run.nodes, &run.slots}) {
      for (const auto& group : *groups) {
        out += fmt::format("<tr><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                           escape_html(group.label), number(group.temp_mean_c), number(group.temp_spread_c),
                           number(group.imbalance_pct), number(group.temp_peak_c));
      }
    }
    out += "</table>\n";
  }
  return out;
}

std::string kernel_section(const analyze::RunAnalysis& run) {
  if (run.kernels.empty()) return "";
  std::vector<std::string> bars;
  std::vector<std::vector<double>> busy;
  std::vector<std::vector<double>> comm;
  std::vector<std::string> categories;
  for (auto category : analyze::kAllKernelCategories) categories.emplace_back(analyze::to_string(category));
  std::vector<std::string> comm_segments;
  std::vector<analyze::KernelCategory> comm_kinds;
  for (auto category : analyze::kAllKernelCategories) {
    if (!analyze::is_comm(category)) continue;
    comm_kinds.push_back(category);
    comm_segments.push_back(std::string(analyze::to_string(category)) + " exposed");
    comm_segments.push_back(std::string(analyze::to_string(category)) + " overlapped");
  }
  bool any_comm = false;
  for (const auto& lane : run.kernels) {
    bars.push_back(fmt::format("rank/GPU {}", lane.lane));
    std::vector<double> row;
    for (double seconds : lane.busy_s) row.push_back(seconds * 1e3);
    busy.push_back(row);
    std::vector<double> comm_row;
    for (auto category : comm_kinds) {
      auto slot = static_cast<std::size_t>(category);
      comm_row.push_back(lane.exposed_s[slot] * 1e3);
      comm_row.push_back(lane.overlapped_s[slot] * 1e3);
      any_comm = any_comm || lane.busy_s[slot] > 0;
    }
    comm.push_back(comm_row);
  }
  std::string out = stacked_bar_chart("GPU kernel time per category and rank", "ms", bars, categories, busy);
  if (any_comm) {
    out +=
        stacked_bar_chart("Communication per rank: exposed vs overlapped with compute, per collective kind",
                          "ms", bars, comm_segments, comm);
  }
  return out;
}

std::string comparison_section(const std::vector<analyze::RunAnalysis>& runs,
                               const analyze::Comparison& comparison) {
  const std::vector<std::string> keys = {"tokens_per_s",     "tflops_per_gpu",   "mfu",
                                         "tokens_per_j",     "samples_per_s_mj", "energy_per_step_j",
                                         "step_time_mean_s", "power_gpu_mean_w", "power_gpu_peak_w",
                                         "temp_gpu_peak_c"};
  std::vector<std::string> groups;
  std::vector<std::string> units;
  std::vector<std::vector<double>> values;
  for (const auto& key : keys) {
    for (const auto& row : comparison.rows) {
      if (row.key != key) continue;
      bool any = false;
      for (double value : row.values) any = any || !std::isnan(value);
      if (!any) continue;
      groups.push_back(key);
      units.push_back(row.unit);
      values.push_back(row.values);
    }
  }
  if (groups.empty() || runs.size() < 2) return "";
  return grouped_bar_chart("Runs compared: throughput, efficiency, energy, power, heat", groups, units,
                           comparison.run_labels, values);
}

std::string sim_overlay_section(const std::vector<analyze::RunAnalysis>& runs) {
  int measured = -1;
  std::vector<int> sims;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (runs[index].run.kind == store::RunKind::kSim) {
      sims.push_back(static_cast<int>(index));
    } else if (measured < 0) {
      measured = static_cast<int>(index);
    }
  }
  if (measured < 0 || sims.empty()) return "";
  std::string out;
  auto per_gpu = [&](auto member, const char* label, const char* unit) {
    std::vector<XySeries> lines;
    for (int index : std::vector<int>{measured}) {
      XySeries line{fmt::format("{} (measured)", runs[static_cast<std::size_t>(index)].run.name), {}, false};
      for (const auto& metrics : runs[static_cast<std::size_t>(index)].device_metrics) {
        line.points.emplace_back(metrics.device.idx, metrics.*member);
      }
      lines.push_back(line);
    }
    for (int index : sims) {
      XySeries line{fmt::format("{} (simulated)", runs[static_cast<std::size_t>(index)].run.name), {}, true};
      for (const auto& metrics : runs[static_cast<std::size_t>(index)].device_metrics) {
        line.points.emplace_back(metrics.device.idx, metrics.*member);
      }
      lines.push_back(line);
    }
    bool any = false;
    for (const auto& line : lines) {
      for (const auto& point : line.points) any = any || std::isfinite(point.second);
    }
    if (any)
      out += xy_chart(fmt::format("Simulated vs measured: {} per GPU", label), "GPU index", "#", label, unit,
                      lines);
  };
  per_gpu(&analyze::DeviceMetrics::power_mean_w, "mean power", "W");
  per_gpu(&analyze::DeviceMetrics::temp_mean_c, "mean temperature", "°C");
  per_gpu(&analyze::DeviceMetrics::sm_clock_mean_mhz, "mean SM clock", "MHz");
  // Step time per step.
  std::vector<XySeries> steps;
  for (int index : std::vector<int>{measured}) {
    XySeries line{fmt::format("{} (measured)", runs[static_cast<std::size_t>(index)].run.name), {}, false};
    int step = 0;
    for (const auto& [begin, end] : runs[static_cast<std::size_t>(index)].measured_steps_ns) {
      line.points.emplace_back(step++, static_cast<double>(end - begin) * 1e-6);
    }
    steps.push_back(line);
  }
  for (int index : sims) {
    XySeries line{fmt::format("{} (simulated)", runs[static_cast<std::size_t>(index)].run.name), {}, true};
    int step = 0;
    for (const auto& [begin, end] : runs[static_cast<std::size_t>(index)].measured_steps_ns) {
      line.points.emplace_back(step++, static_cast<double>(end - begin) * 1e-6);
    }
    steps.push_back(line);
  }
  bool any_steps = false;
  for (const auto& line : steps) any_steps = any_steps || !line.points.empty();
  if (any_steps)
    out += xy_chart("Simulated vs measured: step time per step", "step", "#", "step time", "ms", steps);
  if (out.empty()) return "";
  return "<h2>Simulated vs measured</h2>\n" + out;
}

}  // namespace

int count_charts(const std::string& html) {
  int count = 0;
  for (std::size_t at = html.find("<figure class=\"chart\""); at != std::string::npos;
       at = html.find("<figure class=\"chart\"", at + 1)) {
    ++count;
  }
  return count;
}

std::string render_html_report(const std::vector<analyze::RunAnalysis>& runs, const ReportOptions& options) {
  auto comparison = analyze::compare_runs(runs);
  std::string out;
  out.reserve(1 << 20);
  out += fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n"
      "<meta name=\"generator\" content=\"calo {}\">\n<style>{}</style>\n<script>{}</script></head>\n<body>\n"
      "<h1>{}</h1>\n<p class=\"note\">Self-contained: every chart is inline SVG; metric definitions in "
      "docs/METRICS.md. Time series are downsampled to one min/max/mean bucket per pixel column.</p>\n",
      escape_html(options.title), CALO_VERSION, kStyle, kCheckScript, escape_html(options.title));
  out += "<h2>Summary</h2>\n" + summary_table(comparison);
  if (comparison.measured_reference >= 0) {
    for (std::size_t index = 0; index < runs.size(); ++index) {
      if (runs[index].run.kind != store::RunKind::kSim) continue;
      out += fmt::format(
          "<p>Simulated run {} vs measured run {}: mean |error| over the figures above {}.</p>\n", index + 1,
          comparison.measured_reference + 1, percent(analyze::mean_abs_sim_error(comparison, index)));
    }
  }
  out += comparison_section(runs, comparison);
  out += sim_overlay_section(runs);
  for (std::size_t index = 0; index < runs.size(); ++index) {
    const auto& run = runs[index];
    out += run_header(run, index);
    out += time_series_section(run);
    std::string heat = heatmap_section(run);
    if (!heat.empty()) out += "<h3>Per-GPU figures</h3>\n" + heat;
    std::string kernels = kernel_section(run);
    if (!kernels.empty()) out += "<h3>Kernel breakdown</h3>\n" + kernels;
  }
  out += "</body></html>\n";
  return out;
}

}  // namespace calo::report
