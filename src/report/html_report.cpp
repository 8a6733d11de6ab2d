// HTML report assembly: header, summary table, time series, heatmaps, kernel bars, comparisons, sim overlay.
#include "report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "analyze/compare.h"
#include "analyze/winner.h"
#include "core/table.h"
#include "report/html_report_internal.h"
#include "report/many_gpus.h"
#include "report/memory_section.h"
#include "report/svg_chart.h"

namespace calo::report {
namespace {

constexpr const char* kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.key,th.key{text-align:left}td.name{white-space:nowrap}details summary{font-size:13px;cursor:pointer}
.note{color:#666;font-size:12px}
figure.chart{margin:10px 0 18px}figcaption{font-weight:bold;font-size:14px;margin-bottom:4px}
svg{font-size:11px;background:#fff}
svg .grid{stroke:#eee}svg .axis{stroke:#888}svg .frame{fill:none;stroke:#888}
svg .tick{fill:#444}svg .axis-title{fill:#222;font-size:12px}svg .legend{fill:#222;font-size:11px}
svg .line{fill:none;stroke-width:1.4}svg .band{stroke:none;fill-opacity:.22}
svg .dots{fill:none;stroke-width:5;stroke-linecap:round}
ol.verdict{font-size:14px;margin:4px 0 10px}ol.verdict li{margin:2px 0}
.verdict-run,.verdict-which{font-weight:bold;margin-top:10px}
.placeholder{color:#a35a00;font-style:italic}
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

// A figure's value as tables show it (analyze::shown_figure: a fraction as a percentage).
std::string shown_number(double value, const std::string& unit) {
  const analyze::ShownFigure shown = analyze::shown_figure(value, unit);
  return number(shown.value, shown.unit);
}

std::string percent(double ratio) {
  return std::isnan(ratio) ? "–" : fmt::format("{:+.1f}%", ratio * 100.0);
}

std::string run_header(const analyze::RunAnalysis& run, const analyze::Comparison& comparison,
                       std::size_t index) {
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
  if (config.is_object() && config.contains("layout") && config["layout"].is_object()) {
    const auto& graph = config["layout"];
    std::string model = config.contains("model") && config["model"].is_object()
                            ? config["model"].value("name", std::string("?"))
                            : std::string("?");
    layout = fmt::format("model {}, TP{}-PP{}-DP{}, micro-batch {}, global batch {}, seq {}; ", model,
                         graph.value("tp", 0), graph.value("pp", 0), graph.value("dp", 0),
                         graph.value("micro_batch", 0), graph.value("global_batch", 0),
                         graph.value("seq_length", 0)) +
             layout;
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
      index + 1, escape_html(comparison.run_labels[index]), escape_html(info.name), escape_html(info.command),
      escape_html(nodes > 1 ? fmt::format("{} nodes: {}", nodes, info.host) : info.host),
      escape_html(devices.empty() ? "none" : devices), std::max(nodes, 1),
      escape_html(layout.empty() ? "–" : layout), duration_s, run.sample_count, run.steps,
      escape_html(run.run_dir.string()));
}

// A table's cell for `value` of `row` in `run`: a placeholder power or heat figure (a cpu-host simulation)
// marked as one, so it does not read as a measurement.
std::string figure_cell(const analyze::RunAnalysis& run, const analyze::ComparisonRow& row, double value) {
  const std::string shown = shown_number(value, row.unit);
  if (std::isnan(value) || !analyze::has_placeholder_power(run) || !analyze::is_power_or_heat_figure(row.key))
    return fmt::format("<td>{}</td>", shown);
  return fmt::format("<td>{} <span class=\"placeholder\">placeholder</span></td>", shown);
}

// What a placeholder figure is: the note under a table that shows one, and over a cpu-host simulation's
// section.
constexpr const char* kPlaceholderNote =
    "<p class=\"note\"><span class=\"placeholder\">placeholder</span>: power, energy, heat and clock of a "
    "simulation on the cpu-host cluster are its preset per-core figures (data/clusters/cpu-host.yaml), not a "
    "measurement or a prediction of one.</p>\n";

// `table` followed by kPlaceholderNote when it shows a placeholder figure.
std::string with_placeholder_note(const std::string& table) {
  return table.find("class=\"placeholder\"") == std::string::npos ? table : table + kPlaceholderNote;
}

// Every run's figures side by side, without ratios or errors (runs of different graphs are not comparable).
std::string summary_table(const std::vector<analyze::RunAnalysis>& runs,
                          const analyze::Comparison& comparison) {
  std::string out = "<table class=\"summary\"><tr><th class=\"key\">figure</th><th>unit</th>";
  for (std::size_t index = 0; index < comparison.run_labels.size(); ++index)
    out += fmt::format("<th>run {}: {}</th>", index + 1, escape_html(comparison.run_labels[index]));
  out += "</tr>\n";
  for (const auto& row : comparison.rows) {
    bool any = false;
    for (double value : row.values) any = any || !std::isnan(value);
    if (!any) continue;
    out += fmt::format("<tr><td class=\"key\">{}</td><td>{}</td>", escape_html(row.key),
                       escape_html(analyze::shown_figure(0, row.unit).unit));
    for (std::size_t index = 0; index < runs.size(); ++index)
      out += figure_cell(runs[index], row, row.values[index]);
    out += "</tr>\n";
  }
  return with_placeholder_note(out + "</table>\n");
}

// The measured run and its simulations of the same graph: values, the error column, and for a sim on a
// calibrated cluster the tolerance its calibration achieved (leave-one-out max |error|).
std::string sim_error_table(const std::vector<analyze::RunAnalysis>& runs,
                            const analyze::Comparison& comparison, std::size_t measured,
                            const std::vector<std::size_t>& sims) {
  std::vector<bool> calibrated(comparison.run_labels.size(), false);
  for (const auto& row : comparison.rows) {
    for (std::size_t sim : sims) calibrated[sim] = calibrated[sim] || !std::isnan(row.tolerance[sim]);
  }
  std::string out = fmt::format(
      "<table class=\"sim-vs-measured\"><tr><th class=\"key\">figure</th><th>unit</th><th>run {}: {}</th>",
      measured + 1, escape_html(comparison.run_labels[measured]));
  for (std::size_t sim : sims) {
    out += fmt::format("<th>run {}: {}</th><th class=\"error\">error vs measured</th>", sim + 1,
                       escape_html(comparison.run_labels[sim]));
    if (calibrated[sim]) out += "<th class=\"error\">calibrated tolerance</th>";
  }
  out += "</tr>\n";
  for (const auto& row : comparison.rows) {
    if (std::isnan(row.values[measured])) continue;
    out += fmt::format("<tr><td class=\"key\">{}</td><td>{}</td>", escape_html(row.key),
                       escape_html(analyze::shown_figure(0, row.unit).unit)) +
           figure_cell(runs[measured], row, row.values[measured]);
    for (std::size_t sim : sims) {
      // A placeholder figure predicts nothing: it has no error.
      const bool placeholder =
          analyze::has_placeholder_power(runs[sim]) && analyze::is_power_or_heat_figure(row.key);
      const double error = placeholder ? NAN : analyze::stated_sim_error(comparison, row, sim);
      out += figure_cell(runs[sim], row, row.values[sim]) +
             fmt::format("<td class=\"error\">{}</td>", row.unit == "C" && !std::isnan(error)
                                                            ? fmt::format("{:+.1f} °C", error)
                                                            : percent(error));
      if (!calibrated[sim]) continue;
      const double tolerance = row.tolerance[sim];
      out += fmt::format("<td class=\"error\">{}</td>", std::isnan(tolerance) ? std::string("–")
                                                        : row.unit == "C"
                                                            ? fmt::format("±{:.1f} °C", tolerance)
                                                            : fmt::format("±{:.1f} %", tolerance * 100));
    }
    out += "</tr>\n";
  }
  return with_placeholder_note(out + "</table>\n");
}

// Per-device time series (GPU power, temperature, SM clock, utilization; host CPU and memory), each in a
// <div id="runK-ID"> the verdict links to.
std::string time_series_section(const analyze::RunAnalysis& run, const std::string& prefix) {
  struct Wanted {
    std::vector<const char*> metrics;
    const char* label;
    const char* id;
    double scale;      // multiplies every value (bytes -> GiB)
    const char* unit;  // replaces the metric's unit when scaled
  };
  const Wanted wanted[] = {
      {{"power_sampled_w", "power_instant_w", "power_avg_w"}, "GPU power", "power", 1, ""},
      {{"temp_gpu_c"}, "GPU temperature", "temp", 1, ""},
      {{"clock_sm_mhz"}, "SM clock", "clock", 1, ""},
      {{"util_gpu_pct"}, "GPU utilization", "util", 1, ""},
      {{"cpu_util_pct"}, "Host CPU utilization", "cpu", 1, ""},
      {{"host_mem_used_bytes"}, "Host memory used", "mem", 1.0 / (1 << 30), "GiB"}};
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
        unit = *item.unit != 0 ? item.unit : digest.unit;
        TimeSeries line{device_label(run, run.devices[slot]), digest.buckets};
        if (item.scale != 1) {
          for (auto& bucket : line.buckets) {
            bucket.min *= item.scale;
            bucket.max *= item.scale;
            bucket.mean *= item.scale;
          }
        }
        lines.push_back(std::move(line));
      }
      if (lines.empty()) continue;
      bool host = std::string_view(item.label).starts_with("Host");
      const bool folded = !host && lines.size() > kMaxGpuLines;
      if (folded) lines = fold_gpu_lines(std::move(lines));
      const char* placeholder =
          !host && analyze::has_placeholder_power(run) ? "placeholder (cpu-host preset): " : "";
      out += anchored(
          prefix + item.id,
          time_series_chart(fmt::format("{}{}{} ({}; {}, dot: a lone sample)", placeholder, item.label,
                                        host ? "" : " per GPU", metric,
                                        folded ? kFoldedLinesNote : "band: min–max per pixel, line: mean"),
                            item.label, unit, x_end_s, lines, marks));
      break;
    }
  }
  return out;
}

std::string kernel_section(const analyze::RunAnalysis& run, const std::string& prefix) {
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
  std::string out = anchored(prefix + "kernels", stacked_bar_chart("GPU kernel time per category and rank",
                                                                   "ms", bars, categories, busy));
  if (any_comm) {
    out += anchored(prefix + "comm",
                    stacked_bar_chart("Communication per rank: exposed vs overlapped with compute, per "
                                      "collective kind",
                                      "ms", bars, comm_segments, comm));
  }
  return out;
}

std::string comparison_section(const std::vector<analyze::RunAnalysis>& runs,
                               const analyze::Comparison& comparison) {
  const std::vector<std::string> keys = {"tokens_per_s",     "tflops_per_gpu",       "mfu",
                                         "tokens_per_j",     "samples_per_s_mj",     "energy_per_step_j",
                                         "step_time_mean_s", "power_gpu_mean_w",     "power_gpu_peak_w",
                                         "temp_gpu_peak_c",  "temp_gpu_peak_500ms_c"};
  std::vector<std::string> groups;
  std::vector<std::string> units;
  std::vector<std::vector<double>> values;
  for (const auto& key : keys) {
    for (const auto& row : comparison.rows) {
      if (row.key != key) continue;
      bool any = false;
      for (double value : row.values) any = any || !std::isnan(value);
      if (!any) continue;
      // As the tables show it: MFU as a percentage, not a fraction.
      std::vector<double> shown;
      for (double value : row.values) shown.push_back(analyze::shown_figure(value, row.unit).value);
      groups.push_back(key);
      units.push_back(analyze::shown_figure(0, row.unit).unit);
      values.push_back(shown);
    }
  }
  if (groups.empty() || runs.size() < 2) return "";
  std::vector<std::string> labels;
  std::string placeholders;  // "run 3, run 4": whose energy, power and heat bars are cpu-host's placeholders
  for (std::size_t index = 0; index < runs.size(); ++index) {
    labels.push_back(fmt::format("run {} ({})", index + 1, store::to_string(runs[index].run.kind)));
    if (analyze::has_placeholder_power(runs[index]))
      placeholders += fmt::format("{}run {}", placeholders.empty() ? "" : ", ", index + 1);
  }
  std::string title = "Runs side by side: throughput, efficiency, energy, power, heat";
  if (!placeholders.empty())
    title += fmt::format(" (placeholder energy, power and heat: {}, on the cpu-host cluster)", placeholders);
  return grouped_bar_chart(title, groups, units, labels, values);
}

// "name (description)" of the cluster files the sim runs used, from their config_json.
std::string cluster_names(const std::vector<analyze::RunAnalysis>& runs,
                          const std::vector<std::size_t>& sims) {
  std::string out;
  for (std::size_t sim : sims) {
    auto config = nlohmann::json::parse(runs[sim].run.config_json, nullptr, false);
    std::string name = "unknown";
    if (config.is_object() && config.contains("cluster") && config["cluster"].is_object()) {
      name = config["cluster"].value("name", "unnamed");
    }
    out += fmt::format("{}run {}: {}", out.empty() ? "" : "; ", sim + 1, name);
  }
  return out;
}

// One measured run and the simulations of its graph: the error table, per-GPU bars, step time per step.
std::string sim_vs_measured_section(const std::vector<analyze::RunAnalysis>& runs,
                                    const analyze::Comparison& comparison, std::size_t measured,
                                    const std::vector<std::size_t>& sims) {
  std::vector<std::size_t> members = {measured};
  members.insert(members.end(), sims.begin(), sims.end());
  std::string id = fmt::format("run{}-sim", measured + 1);
  std::string out = fmt::format(
      "<h2 id=\"{}\">Simulated vs measured: {}</h2>\n<p class=\"note\">Same model and layout (the runs' "
      "graphs match); error = (simulated − measured) / measured, for temperatures simulated − measured in "
      "°C. Cluster file of the simulation: {}.</p>\n",
      id, escape_html(runs[measured].run.name), escape_html(cluster_names(runs, sims)));
  out += sim_error_table(runs, comparison, measured, sims);
  std::vector<std::string> names;
  for (std::size_t member : members) {
    names.push_back(fmt::format("{} (run {})", member == measured ? "measured" : "simulated", member + 1));
  }
  // Per-GPU figures: bars per GPU (by device index; the graphs match, so do the GPU counts).
  std::vector<std::string> gpus;
  for (const auto& metrics : runs[measured].device_metrics) {
    if (metrics.device.kind == store::DeviceKind::kGpu)
      gpus.push_back(fmt::format("GPU {}", metrics.device.idx));
  }
  struct PerGpu {
    double analyze::DeviceMetrics::*member;
    const char* label;
    const char* unit;
    const char* id;
  };
  const PerGpu figures[] = {{&analyze::DeviceMetrics::power_mean_w, "mean power", "W", "power"},
                            {&analyze::DeviceMetrics::power_peak_w, "peak power", "W", "peak"},
                            {&analyze::DeviceMetrics::temp_mean_c, "mean temperature", "°C", "temp"},
                            {&analyze::DeviceMetrics::sm_clock_mean_mhz, "mean SM clock", "MHz", "clock"}};
  for (const auto& figure : figures) {
    std::vector<std::vector<double>> values;
    bool any = false;
    for (std::size_t member : members) {
      std::vector<double> row(gpus.size(), NAN);
      std::size_t column = 0;
      for (const auto& metrics : runs[member].device_metrics) {
        if (metrics.device.kind != store::DeviceKind::kGpu) continue;
        if (column < row.size()) row[column] = metrics.*figure.member;
        any = any || !std::isnan(metrics.*figure.member);
        ++column;
      }
      values.push_back(row);
    }
    if (!any || gpus.empty()) continue;
    out += anchored(id + "-" + figure.id,
                    column_chart(fmt::format("Simulated vs measured: {} per GPU", figure.label), figure.label,
                                 figure.unit, gpus, names, values));
  }
  std::vector<XySeries> steps;
  for (std::size_t member : members) {
    XySeries line{names[steps.size()], {}, member != measured};
    int step = 0;
    for (const auto& [begin, end] : runs[member].measured_steps_ns) {
      line.points.emplace_back(step++, static_cast<double>(end - begin) * 1e-6);
    }
    steps.push_back(line);
  }
  bool any_steps = false;
  for (const auto& line : steps) any_steps = any_steps || !line.points.empty();
  if (any_steps) {
    out += anchored(id + "-steps", xy_chart("Simulated vs measured: step time per step", "step", "#",
                                            "step time", "ms", steps));
  }
  return out;
}

// One finding of the verdict: its text, the chart it refers to, and how much it matters (higher first).
struct Finding {
  double weight;
  std::string text;
  std::string anchor;
};

// Index of the GPU with the largest value of `value_of` (NaN ignored), or npos.
template <typename ValueOf>
std::size_t worst_gpu(const analyze::RunAnalysis& run, ValueOf value_of) {
  std::size_t worst = std::string::npos;
  for (std::size_t index = 0; index < run.device_metrics.size(); ++index) {
    if (run.device_metrics[index].device.kind != store::DeviceKind::kGpu) continue;
    double value = value_of(run.device_metrics[index]);
    if (std::isnan(value)) continue;
    if (worst == std::string::npos || value > value_of(run.device_metrics[worst])) worst = index;
  }
  return worst;
}

// Findings about a run's own recording: throttling, power against the limit, exposed communication,
// stragglers.
void recording_findings(const analyze::RunAnalysis& run, const std::string& prefix,
                        std::vector<Finding>& out) {
  std::string clock_chart = run.series.count("clock_sm_mhz") != 0 ? prefix + "clock" : prefix + "gpus";
  std::size_t cap = worst_gpu(run, [](const auto& m) { return m.throttle_fraction[0]; });
  if (cap != std::string::npos && run.device_metrics[cap].throttle_fraction[0] >= 0.01) {
    const auto& metrics = run.device_metrics[cap];
    // The throttle counter may run past the window by its read granularity: shown as at most 100 %.
    out.push_back(
        {2 * metrics.throttle_fraction[0],
         fmt::format("GPU {} throttled by the power cap {:.0f} % of the time (SM clock mean {} MHz)",
                     metrics.device.idx, std::min(metrics.throttle_fraction[0], 1.0) * 100,
                     number(metrics.sm_clock_mean_mhz)),
         clock_chart});
  }
  auto thermal_of = [](const auto& m) {
    double sw = std::isnan(m.throttle_fraction[1]) ? 0 : m.throttle_fraction[1];
    double hw = std::isnan(m.throttle_fraction[2]) ? 0 : m.throttle_fraction[2];
    return sw + hw;
  };
  // A simulation on a CPU host: its power and heat are cpu-host's placeholder per-core figures, not findings.
  const bool placeholder_power = analyze::has_placeholder_power(run);
  std::size_t hot = placeholder_power ? std::string::npos : worst_gpu(run, thermal_of);
  if (hot != std::string::npos && thermal_of(run.device_metrics[hot]) >= 0.01) {
    const auto& metrics = run.device_metrics[hot];
    out.push_back({3 * thermal_of(metrics),
                   fmt::format("GPU {} thermally throttled {:.0f} % of the time (peak {} °C)",
                               metrics.device.idx, thermal_of(metrics) * 100, number(metrics.temp_peak_c)),
                   prefix + "temp"});
  }
  std::size_t peak = placeholder_power ? std::string::npos : worst_gpu(run, [](const auto& m) {
    return m.device.power_limit_w > 0 ? m.power_peak_w / m.device.power_limit_w : NAN;
  });
  if (peak != std::string::npos) {
    const auto& metrics = run.device_metrics[peak];
    double ratio = metrics.power_peak_w / metrics.device.power_limit_w;
    out.push_back({ratio > 1 ? 2 * (ratio - 1) + 0.2 : 0.15,
                   fmt::format("peak power {:.2f}× the {:.0f} W limit: GPU {} drew {} W in its highest power "
                               "sample (the limit holds a ~1 s average; that GPU's mean {} W)",
                               ratio, metrics.device.power_limit_w, metrics.device.idx,
                               number(metrics.power_peak_w), number(metrics.power_mean_w)),
                   prefix + "power"});
  }
  const analyze::LaneBreakdown* exposed = nullptr;
  for (const auto& lane : run.kernels) {
    if (lane.window_s <= 0) continue;
    if (exposed == nullptr ||
        lane.comm_exposed_union_s / lane.window_s > exposed->comm_exposed_union_s / exposed->window_s)
      exposed = &lane;
  }
  if (exposed != nullptr && exposed->comm_exposed_union_s > 0) {
    double share = exposed->comm_exposed_union_s / exposed->window_s;
    out.push_back(
        {2 * share,
         fmt::format("exposed communication {:.0f} % of the kernel window on rank/GPU {} ({:.2f} ms "
                     "not hidden behind compute)",
                     share * 100, exposed->lane, exposed->comm_exposed_union_s * 1e3),
         prefix + "comm"});
  }
  for (int32_t idx : run.stragglers) {
    for (const auto& metrics : run.device_metrics) {
      if (metrics.device.idx != idx) continue;
      out.push_back(
          {0.5 + metrics.straggler_fraction,
           fmt::format("{} is a straggler: last to finish {:.0f} % of the steps, +{:.2f} ms",
                       lane_label(run, idx), metrics.straggler_fraction * 100, metrics.straggler_lag_ms),
           prefix + "gpus"});
    }
  }
  auto cpu = run.series.find("cpu_util_pct");
  auto mem = run.series.find("host_mem_used_bytes");
  bool gpus = false;
  for (const auto& device : run.devices) gpus = gpus || device.kind == store::DeviceKind::kGpu;
  for (const auto& digest : cpu == run.series.end() ? std::vector<analyze::SeriesDigest>{} : cpu->second) {
    if (digest.count == 0) continue;
    out.push_back({gpus ? 0.05 : 0.3,
                   fmt::format("host CPU utilization {:.0f} % on average, {:.0f} % at most", digest.time_mean,
                               digest.values.max),
                   prefix + "cpu"});
  }
  for (const auto& digest : mem == run.series.end() ? std::vector<analyze::SeriesDigest>{} : mem->second) {
    if (digest.count == 0) continue;
    out.push_back({gpus ? 0.04 : 0.25,
                   fmt::format("host memory used {:.2f} GiB at most ({:.2f} GiB at the start)",
                               digest.values.max / (1 << 30), digest.first_value / (1 << 30)),
                   prefix + "mem"});
  }
}

// Sim run `index`'s errors against its measured run (step time, energy per step), each saying whether it is
// in-sample or out-of-sample of the cluster's calibration.
void sim_error_findings(const std::vector<analyze::RunAnalysis>& runs, const analyze::Comparison& comparison,
                        std::size_t index, std::vector<Finding>& out) {
  const int32_t reference = comparison.sim_reference[index];
  const std::string sample = analyze::describe_sample(comparison.samples[index]);
  for (const auto& row : comparison.rows) {
    const double error = row.sim_error[index];
    if (std::isnan(error)) continue;
    // The median step: a deterministic twin is set beside the typical step (calibration fits it), not a mean
    // that one host hiccup moves. A placeholder energy is no prediction: it has no error to state.
    const bool energy = row.key == "energy_per_step_j" && !analyze::has_placeholder_power(runs[index]);
    const double weight = row.key == "step_time_p50_s" ? 10 : energy ? 9 : 0;
    if (weight == 0) continue;
    const std::string what = energy ? "energy per step" : "step time (median)";
    const std::string size = std::fabs(error) < 0.0005
                                 ? fmt::format("simulated {} within 0.1 % of measured", what)
                                 : fmt::format("simulated {} {:.1f} % {} measured", what,
                                               std::fabs(error) * 100, error > 0 ? "above" : "below");
    out.push_back({weight, fmt::format("{} (run {}), {}", size, reference + 1, sample),
                   fmt::format("run{}-sim", reference + 1)});
  }
}

// The run's headline: step time, tokens/s and energy per token (and MFU), said first of every run.
Finding headline_finding(const analyze::RunAnalysis& run, const std::string& prefix) {
  std::string energy;
  if (analyze::has_placeholder_power(run))
    energy = fmt::format(", energy per token {} J (placeholder: cpu-host power, not a measurement)",
                         number(run.energy_per_token_j));
  else if (!std::isnan(run.energy_per_token_j))
    energy = fmt::format(", energy per token {} J", number(run.energy_per_token_j));
  else
    energy = ", energy per token not measured (no power readings)";
  return {
      8.5,
      fmt::format("step time {}{}{}{}", core::format_duration(run.step_time_s.mean),
                  std::isnan(run.tokens_per_s) ? "" : fmt::format(", {} tokens/s", number(run.tokens_per_s)),
                  energy, std::isnan(run.mfu) ? "" : fmt::format(", MFU {:.1f} %", run.mfu * 100)),
      prefix + "header"};
}

// A measured run some sim run's cluster was calibrated on: which, so its in-sample twins read as such.
void calibration_findings(const std::vector<analyze::RunAnalysis>& runs, std::size_t index,
                          std::vector<Finding>& out) {
  std::map<std::string, std::string> sims_of;  // cluster name -> "run 3, run 4"
  for (std::size_t sim = 0; sim < runs.size(); ++sim) {
    const analyze::CalibrationSample sample = analyze::calibration_sample(runs[sim], runs[index]);
    if (sample.kind != analyze::SampleKind::kInSample) continue;
    std::string& sims = sims_of[sample.cluster];
    sims += fmt::format("{}run {}", sims.empty() ? "" : ", ", sim + 1);
  }
  for (const auto& [cluster, sims] : sims_of) {
    out.push_back({7, fmt::format("calibration run: cluster {} ({}) was fitted to this run", cluster, sims),
                   fmt::format("run{}-header", index + 1)});
  }
}

// Every finding of run `index`, most important first.
std::vector<Finding> run_findings(const std::vector<analyze::RunAnalysis>& runs,
                                  const analyze::Comparison& comparison, std::size_t index) {
  const auto& run = runs[index];
  const std::string prefix = fmt::format("run{}-", index + 1);
  std::vector<Finding> findings;
  if (comparison.sim_reference[index] >= 0) {
    sim_error_findings(runs, comparison, index, findings);
  } else if (run.run.kind == store::RunKind::kSim) {
    findings.push_back({8, "projection: no measured run of this model and layout here, so no error is given",
                        prefix + "header"});
  } else {
    calibration_findings(runs, index, findings);
  }
  if (run.run.ended_ns == 0) {  // the writer's last act is to store the end: a killed run never does
    findings.push_back(
        {100,
         fmt::format("interrupted: the run never finished (killed or crashed); figures cover the {:.1f} s "
                     "stored before it stopped",
                     static_cast<double>(run.chart_end_ns - run.chart_begin_ns) / 1e9),
         prefix + "header"});
  }
  recording_findings(run, prefix, findings);
  if (const std::string memory = memory_verdict(run); !memory.empty())
    findings.push_back({20, memory, prefix + "memory"});
  if (!std::isnan(run.step_time_s.mean) && run.step_time_s.count > 0)
    findings.push_back(headline_finding(run, prefix));
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.weight > b.weight; });
  return findings;
}

// The order the verdict takes the runs in: simulations checked against a measurement (out-of-sample first,
// then in-sample, then on uncalibrated clusters), the measured runs, then the projections.
std::vector<std::size_t> verdict_order(const std::vector<analyze::RunAnalysis>& runs,
                                       const analyze::Comparison& comparison) {
  const auto rank = [&](std::size_t index) {
    if (comparison.sim_reference[index] < 0) return runs[index].run.kind == store::RunKind::kSim ? 5 : 4;
    switch (comparison.samples[index].kind) {
      case analyze::SampleKind::kOutOfSample:
        return 0;
      case analyze::SampleKind::kInSample:
        return 1;
      default:
        return 2;
    }
  };
  std::vector<std::size_t> order(runs.size());
  for (std::size_t index = 0; index < runs.size(); ++index) order[index] = index;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rank(a) < rank(b); });
  return order;
}

// Which run is better on throughput, energy per token and cost, against the simulator's error (empty for
// fewer than two contenders: analyze::pick_winners); each line linked to the better run's header.
std::string winner_lines(const std::vector<analyze::RunAnalysis>& runs,
                         const analyze::Comparison& comparison) {
  const std::vector<analyze::Winner> winners = analyze::pick_winners(runs, comparison);
  if (winners.empty()) return "";
  std::string out = "<div class=\"verdict-which\">Which is better?</div>\n<ol class=\"verdict winners\">\n";
  for (const analyze::Winner& winner : winners) {
    out += fmt::format("<li><a href=\"#run{}-header\">{}</a></li>\n", winner.best + 1,
                       escape_html(analyze::describe_winner(winner)));
  }
  return out + "</ol>\n";
}

// Which run is better, then per run the three findings that matter most, each linked to its chart.
std::string verdict_section(const std::vector<analyze::RunAnalysis>& runs,
                            const analyze::Comparison& comparison) {
  std::string out = "<h2 id=\"verdict\">Verdict</h2>\n" + winner_lines(runs, comparison);
  for (std::size_t index : verdict_order(runs, comparison)) {
    const std::vector<Finding> findings = run_findings(runs, comparison, index);
    out += fmt::format("<div class=\"verdict-run\">Run {}: {}</div>\n<ol class=\"verdict\">\n", index + 1,
                       escape_html(comparison.run_labels[index]));
    for (std::size_t at = 0; at < findings.size() && at < 3; ++at) {
      out += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", findings[at].anchor,
                         escape_html(findings[at].text));
    }
    if (findings.empty())
      out += "<li>nothing recorded that the report can judge (no steps, no samples)</li>\n";
    out += "</ol>\n";
  }
  return out;
}

}  // namespace

std::vector<std::string> verdict_lines(const std::vector<analyze::RunAnalysis>& runs) {
  const analyze::Comparison comparison = analyze::compare_runs(runs);
  std::vector<std::string> lines;
  for (const analyze::Winner& winner : analyze::pick_winners(runs, comparison))
    lines.push_back("which is better: " + analyze::describe_winner(winner));
  for (std::size_t index : verdict_order(runs, comparison)) {
    lines.push_back(fmt::format("run {}: {}", index + 1, comparison.run_labels[index]));
    const std::vector<Finding> findings = run_findings(runs, comparison, index);
    for (std::size_t at = 0; at < findings.size() && at < 3; ++at)
      lines.push_back(fmt::format("  {}. {}", at + 1, findings[at].text));
  }
  return lines;
}

std::string format_number(double value, const std::string& unit) {
  return number(value, unit);
}

int count_charts(const std::string& html) {
  int count = 0;
  for (std::size_t at = html.find("<figure class=\"chart\""); at != std::string::npos;
       at = html.find("<figure class=\"chart\"", at + 1)) {
    ++count;
  }
  return count;
}

std::string page_open(const std::string& title, const std::string& note) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n"
      "<meta name=\"generator\" content=\"calo {}\">\n<style>{}</style>\n<script>{}</script></head>\n<body>\n"
      "<h1>{}</h1>\n<p class=\"note\">{}</p>\n",
      escape_html(title), CALO_VERSION, kStyle, kCheckScript, escape_html(title), escape_html(note));
}

std::string render_html_report(const std::vector<analyze::RunAnalysis>& runs, const ReportOptions& options) {
  auto comparison = analyze::compare_runs(runs);
  std::string out;
  out.reserve(1 << 20);
  out += page_open(options.title,
                   "Self-contained: every chart is inline SVG; metric definitions in docs/METRICS.md. Time "
                   "series are downsampled to one min/max/mean bucket per pixel column.");
  out += verdict_section(runs, comparison);
  // Simulated vs measured: one section per measured run that a sim run of the same graph refers to.
  for (std::size_t measured = 0; measured < runs.size(); ++measured) {
    std::vector<std::size_t> sims;
    for (std::size_t index = 0; index < runs.size(); ++index) {
      if (comparison.sim_reference[index] == static_cast<int32_t>(measured)) sims.push_back(index);
    }
    if (!sims.empty()) out += sim_vs_measured_section(runs, comparison, measured, sims);
  }
  out +=
      "<h2>Runs side by side</h2>\n<p class=\"note\">Values only: runs of different models or layouts are "
      "not errors of one another.</p>\n" +
      summary_table(runs, comparison);
  out += comparison_section(runs, comparison);
  // Measured runs and the simulations that mirror one of them, then the projections.
  std::vector<std::size_t> order;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (runs[index].run.kind != store::RunKind::kSim || comparison.sim_reference[index] >= 0)
      order.push_back(index);
  }
  std::size_t first_projection = order.size();
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (runs[index].run.kind == store::RunKind::kSim && comparison.sim_reference[index] < 0)
      order.push_back(index);
  }
  for (std::size_t at = 0; at < order.size(); ++at) {
    if (at == first_projection) {
      out +=
          "<h2 id=\"projection\">Projection</h2>\n<p class=\"note\">Simulated runs with no measured run of "
          "the "
          "same model and layout here: what the simulator predicts, not checked against a measurement.</p>\n";
    }
    std::size_t index = order[at];
    const auto& run = runs[index];
    std::string prefix = fmt::format("run{}-", index + 1);
    out += fmt::format("<div id=\"{}header\"></div>\n", prefix) + run_header(run, comparison, index) +
           nodes_table(run);
    if (analyze::has_placeholder_power(run)) out += kPlaceholderNote;
    out += time_series_section(run, prefix);
    std::string heat = heatmap_section(run, prefix);
    if (!heat.empty())
      out +=
          fmt::format("<h3>Per-GPU figures{}</h3>\n",
                      analyze::has_placeholder_power(run) ? " (power and heat: cpu-host placeholders)" : "") +
          heat;
    std::string kernels = kernel_section(run, prefix);
    if (!kernels.empty()) out += "<h3>Kernel breakdown</h3>\n" + kernels;
    out += memory_section(run, prefix);
  }
  out += "</body></html>\n";
  return out;
}

}  // namespace calo::report
