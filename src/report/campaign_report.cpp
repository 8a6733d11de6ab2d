// Campaign reports, page side: tables and charts over the points of one or more campaigns (the chart
// helpers of svg_chart.h; the page head of html_report.h).
#include "report/campaign_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "report/many_gpus.h"
#include "report/svg_chart.h"

namespace calo::report {
namespace {

/// One campaign figure: how to read it from a point, its title and unit (docs/METRICS.md, "Campaigns").
struct FigureSpec {
  const char* key;               ///< id used in element ids and tests
  const char* title;             ///< chart / column title
  const char* unit;              ///< unit shown with the values
  double scale;                  ///< multiplier from the stored value to the shown one
  double CampaignPoint::*value;  ///< member holding the figure
  Better better;                 ///< which end is good (a heatmap's dark end)
};

const std::vector<FigureSpec>& headline_figures() {
  static const std::vector<FigureSpec> figures = {
      {"tokens_per_s", "Throughput", "tokens/s", 1.0, &CampaignPoint::tokens_per_s, Better::kHigher},
      {"mfu", "MFU", "%", 100.0, &CampaignPoint::mfu, Better::kHigher},
      {"energy_per_token_j", "Energy per token", "J/token", 1.0, &CampaignPoint::energy_per_token_j,
       Better::kLower},
      {"samples_per_s_mj", "Energy efficiency", "samples/(s*MJ)", 1.0, &CampaignPoint::samples_per_s_mj,
       Better::kHigher}};
  return figures;
}

const std::vector<FigureSpec>& power_figures() {
  static const std::vector<FigureSpec> figures = {
      {"peak_power_w", "Peak power (hottest GPU)", "W", 1.0, &CampaignPoint::peak_power_w, Better::kLower},
      {"power_swing_w", "Power swing within 100 ms", "W", 1.0, &CampaignPoint::power_swing_w, Better::kLower},
      {"throttle_power_cap_s", "Power-cap throttle time", "s", 1.0, &CampaignPoint::throttle_power_cap_s,
       Better::kLower},
      {"throttle_thermal_s", "Thermal throttle time", "s", 1.0, &CampaignPoint::throttle_thermal_s,
       Better::kLower},
      {"max_temp_c", "Hottest GPU temperature", "C", 1.0, &CampaignPoint::max_temp_c, Better::kLower}};
  return figures;
}

double figure_of(const CampaignPoint& point, const FigureSpec& figure) {
  return point.*figure.value * figure.scale;
}

bool done(const CampaignPoint& point) {
  return point.status == "done";
}

/// "tp4-pp4" for the layout axis, "mbs 2" / "recompute full" for the others.
std::string axis_label(const std::string& key, const std::string& value) {
  return key == "layout" ? value : key + " " + value;
}

/// The point's axis values other than `skip` (an axis key, or none), joined; "all" when nothing is left.
std::string context_label(const CampaignPoint& point, const std::string& skip) {
  std::string label;
  for (const auto& [key, value] : point.axis_values) {
    if (key == skip) continue;
    label += (label.empty() ? "" : ", ") + axis_label(key, value);
  }
  return label.empty() ? "all" : label;
}

std::optional<std::string> value_of(const CampaignPoint& point, const std::string& key) {
  for (const auto& [axis, value] : point.axis_values) {
    if (axis == key) return value;
  }
  return std::nullopt;
}

/// Distinct values of axis `key` over the points, in grid order.
std::vector<std::string> axis_values(const Campaign& campaign, const std::string& key) {
  std::vector<std::string> values;
  for (const auto& point : campaign.points) {
    const auto value = value_of(point, key);
    if (value && std::find(values.begin(), values.end(), *value) == values.end()) values.push_back(*value);
  }
  return values;
}

/// A heatmap layout of the points: columns = values of the last axis, rows = the other axes' values (one row
/// per combination, so a 3-axis sweep stays as narrow as its last axis); with one axis, a single row.
struct PointGrid {
  std::vector<std::string> rows;
  std::vector<std::string> columns;
  std::vector<std::vector<const CampaignPoint*>> cells;  ///< [row][column], nullptr where no point
  int rows_left_out = 0;                                 ///< rows without a finished point
};

PointGrid point_grid(const Campaign& campaign) {
  PointGrid grid;
  const std::string last = campaign.axes.empty() ? "" : campaign.axes.back();
  grid.columns = axis_values(campaign, last);
  for (std::string& column : grid.columns) column = axis_label(last, column);
  for (const auto& point : campaign.points) {
    const std::string row = campaign.axes.size() > 1 ? context_label(point, last) : "";
    if (std::find(grid.rows.begin(), grid.rows.end(), row) == grid.rows.end()) grid.rows.push_back(row);
  }
  grid.cells.assign(grid.rows.size(), std::vector<const CampaignPoint*>(grid.columns.size(), nullptr));
  for (const auto& point : campaign.points) {
    const auto value = value_of(point, last);
    if (!value) continue;
    const std::string row_label = campaign.axes.size() > 1 ? context_label(point, last) : "";
    const auto row = std::find(grid.rows.begin(), grid.rows.end(), row_label) - grid.rows.begin();
    const auto column =
        std::find(grid.columns.begin(), grid.columns.end(), axis_label(last, *value)) - grid.columns.begin();
    grid.cells[static_cast<std::size_t>(row)][static_cast<std::size_t>(column)] = &point;
  }
  // A row where no point finished draws nothing but blank cells: leave it out and say how many.
  PointGrid kept;
  kept.columns = grid.columns;
  for (std::size_t row = 0; row < grid.rows.size(); ++row) {
    const auto& cells = grid.cells[row];
    if (std::none_of(cells.begin(), cells.end(),
                     [](const CampaignPoint* point) { return point && done(*point); })) {
      ++kept.rows_left_out;
      continue;
    }
    kept.rows.push_back(grid.rows[row]);
    kept.cells.push_back(cells);
  }
  return kept;
}

/// The figure at every finished point, when it is the same at all of them (all zero: nothing throttled; NaN:
/// no point has it); else nullopt. A chart of one value shows nothing a sentence cannot. One point with a
/// non-zero value is charted: it is a value, not a sameness.
std::optional<double> constant_figure(const Campaign& campaign, const FigureSpec& figure) {
  std::optional<double> common;
  int valued = 0;
  for (const auto& point : campaign.points) {
    if (!done(point)) continue;
    const double value = figure_of(point, figure);
    if (std::isnan(value)) continue;
    if (common && std::fabs(value - *common) > 1e-9 * std::max(1.0, std::fabs(*common))) return std::nullopt;
    common = value;
    ++valued;
  }
  if (!common) return NAN;
  if (valued < 2 && *common != 0) return std::nullopt;
  return common;
}

/// "higher is better" / "lower is better" for a chart title.
const char* better_words(const FigureSpec& figure) {
  return figure.better == Better::kHigher ? "higher is better" : "lower is better";
}

/// One figure over the swept axes: bars over the one axis' values, or a heatmap of rows (the other axes) x
/// columns (the last axis) whose dark end is the good one.
std::string figure_chart(const Campaign& campaign, const PointGrid& grid, const FigureSpec& figure) {
  std::vector<std::vector<double>> values(grid.rows.size(), std::vector<double>(grid.columns.size(), NAN));
  for (std::size_t row = 0; row < grid.rows.size(); ++row) {
    for (std::size_t column = 0; column < grid.columns.size(); ++column) {
      const CampaignPoint* point = grid.cells[row][column];
      if (point != nullptr && done(*point)) values[row][column] = figure_of(*point, figure);
    }
  }
  if (campaign.axes.size() <= 1) {  // one axis: bars, not a one-row strip of colours
    return column_chart(fmt::format("{} ({}; {} over {})", figure.title, better_words(figure), campaign.name,
                                    campaign.axes.empty() ? "its points" : campaign.axes.front()),
                        figure.title, figure.unit, grid.columns, {campaign.name}, values, "campaign-bars");
  }
  const std::string left_out =
      grid.rows_left_out > 0 ? fmt::format("; {} rows without a finished point left out", grid.rows_left_out)
                             : "";
  const std::string title =
      fmt::format("{}, {} ({}; {} over {}{})", figure.title, figure.unit, better_words(figure), campaign.name,
                  fmt::join(campaign.axes, " x "), left_out);
  return grid_heatmap(title, figure.unit, grid.rows, grid.columns, values, "campaign-heatmap", figure.better);
}

/// The charts of `figures`, and one sentence naming those that are the same at every finished point.
std::string figure_charts(const Campaign& campaign, const PointGrid& grid,
                          const std::vector<FigureSpec>& figures) {
  std::string out;
  std::vector<std::string> constant;
  for (const auto& figure : figures) {
    const std::optional<double> common = constant_figure(campaign, figure);
    if (!common) {
      out += figure_chart(campaign, grid, figure);
    } else {
      constant.push_back(std::isnan(*common)
                             ? fmt::format("{} (no value at any point)", figure.title)
                             : fmt::format("{} {} {}", figure.title, format_number(*common), figure.unit));
    }
  }
  if (!constant.empty()) {
    const bool one_point = std::count_if(campaign.points.begin(), campaign.points.end(), done) == 1;
    out += fmt::format(
        "<p class=\"note constant-figures\">{}, so not charted: {}.</p>\n",
        one_point ? "Zero or missing at the one finished point" : "The same at every finished point",
        escape_html(fmt::format("{}", fmt::join(constant, "; "))));
  }
  return out;
}

/// The table's header and one row per point of `points` (figures for the finished ones).
std::string point_rows(const std::vector<const CampaignPoint*>& points, bool with_figures) {
  std::string out = "<table class=\"points\"><tr><th class=\"key\">point</th><th class=\"key\">status</th>";
  if (with_figures) {
    for (const auto* figures : {&headline_figures(), &power_figures()}) {
      for (const auto& figure : *figures)
        out += fmt::format("<th>{}, {}</th>", figure.title, escape_html(figure.unit));
    }
  }
  out += "<th class=\"key\">note</th></tr>\n";
  for (const CampaignPoint* point : points) {
    out += fmt::format("<tr data-point=\"{}\"><td class=\"key name\">{}</td><td class=\"key\">{}</td>",
                       escape_html(point->name), escape_html(point->name), escape_html(point->status));
    if (with_figures) {
      for (const auto* figures : {&headline_figures(), &power_figures()}) {
        for (const auto& figure : *figures)
          out += "<td>" + (done(*point) ? format_number(figure_of(*point, figure)) : std::string()) + "</td>";
      }
    }
    out += fmt::format("<td class=\"key\">{}</td></tr>\n", escape_html(point->reason));
  }
  return out + "</table>\n";
}

/// The points that ran (done, failed) with their figures; those skipped or not run yet folded below, counted
/// by reason, so they do not bury the ones with figures.
std::string points_table(const Campaign& campaign) {
  std::vector<const CampaignPoint*> ran, other;
  std::map<std::string, int> by_reason;
  for (const auto& point : campaign.points) {
    const bool has_run = done(point) || point.status == "failed";
    (has_run ? ran : other).push_back(&point);
    if (!has_run) {
      // The reason's kind: its text before the first ':' ("does not fit memory", "invalid layout", ...).
      const std::string kind =
          point.reason.empty() ? point.status : point.reason.substr(0, point.reason.find(':'));
      ++by_reason[kind];
    }
  }
  std::string out = ran.empty() ? "<p class=\"note\">No point ran yet.</p>\n" : point_rows(ran, true);
  if (other.empty()) return out;
  std::vector<std::string> counts;
  for (const auto& [kind, count] : by_reason) counts.push_back(fmt::format("{} × {}", count, kind));
  return out + fmt::format(
                   "<details class=\"skipped-points\"><summary>{} point(s) skipped or not run: "
                   "{}</summary>\n{}</details>\n",
                   other.size(), escape_html(fmt::format("{}", fmt::join(counts, "; "))),
                   point_rows(other, false));
}

/// One row per (axis, value): points done of all, best and mean throughput, mean MFU and energy per token,
/// largest peak power and temperature over the done points with that value.
std::string axis_summary_table(const Campaign& campaign) {
  std::string out =
      "<table class=\"axis-summary\"><tr><th class=\"key\">axis</th><th class=\"key\">value</th><th>points "
      "done</th><th>best tokens/s</th><th>mean tokens/s</th><th>mean MFU, %</th><th>mean energy/token, "
      "J</th><th>max peak power, W</th><th>max temperature, C</th></tr>\n";
  for (const std::string& key : campaign.axes) {
    for (const std::string& value : axis_values(campaign, key)) {
      int total = 0, finished = 0;
      double best = NAN, tokens = 0, mfu = 0, energy = 0, peak = NAN, temp = NAN;
      int mfu_n = 0, energy_n = 0;
      for (const auto& point : campaign.points) {
        if (value_of(point, key) != value) continue;
        ++total;
        if (!done(point)) continue;
        ++finished;
        tokens += point.tokens_per_s;
        best = std::isnan(best) ? point.tokens_per_s : std::max(best, point.tokens_per_s);
        if (!std::isnan(point.mfu)) mfu += point.mfu * 100, ++mfu_n;
        if (!std::isnan(point.energy_per_token_j)) energy += point.energy_per_token_j, ++energy_n;
        if (!std::isnan(point.peak_power_w))
          peak = std::isnan(peak) ? point.peak_power_w : std::max(peak, point.peak_power_w);
        if (!std::isnan(point.max_temp_c))
          temp = std::isnan(temp) ? point.max_temp_c : std::max(temp, point.max_temp_c);
      }
      out += fmt::format(
          "<tr><td class=\"key\">{}</td><td class=\"key\">{}</td><td>{} / "
          "{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
          escape_html(key), escape_html(value), finished, total, format_number(best),
          format_number(finished > 0 ? tokens / finished : NAN), format_number(mfu_n > 0 ? mfu / mfu_n : NAN),
          format_number(energy_n > 0 ? energy / energy_n : NAN), format_number(peak), format_number(temp));
    }
  }
  return out + "</table>\n";
}

/// The axis that sweeps the micro-batch size: "mbs", or "layout" when its bundles set mbs; empty if none.
std::string microbatch_axis(const Campaign& campaign) {
  if (std::find(campaign.axes.begin(), campaign.axes.end(), "mbs") != campaign.axes.end()) return "mbs";
  std::vector<std::string> sizes;
  for (const auto& point : campaign.points) {
    const auto found = point.flags.find("mbs");
    if (found != point.flags.end() && std::find(sizes.begin(), sizes.end(), found->second) == sizes.end())
      sizes.push_back(found->second);
  }
  const bool in_layout =
      std::find(campaign.axes.begin(), campaign.axes.end(), "layout") != campaign.axes.end();
  return sizes.size() > 1 && in_layout ? "layout" : "";
}

/// Micro-batch size against throughput, peak power, swing and throttle time: one line per context.
std::string microbatch_section(const Campaign& campaign) {
  const std::string axis = microbatch_axis(campaign);
  if (axis.empty()) return "";
  std::vector<FigureSpec> figures = {headline_figures()[0]};
  for (const auto& figure : power_figures()) figures.push_back(figure);
  std::string out = "<h3>Micro-batch size vs power, swing and throttling</h3>\n";
  for (const auto& figure : figures) {
    std::map<std::string, XySeries> lines;
    std::vector<std::string> order;
    for (const auto& point : campaign.points) {
      const double value = done(point) ? figure_of(point, figure) : NAN;
      const auto flag = point.flags.find("mbs");
      const std::optional<std::string> mbs =
          flag != point.flags.end() ? std::optional<std::string>(flag->second) : value_of(point, "mbs");
      if (std::isnan(value) || !mbs) continue;
      const std::string context = context_label(point, axis);
      if (!lines.count(context)) order.push_back(context), lines[context].name = context;
      lines[context].points.emplace_back(std::stod(*mbs), value);
    }
    if (order.empty()) continue;
    std::vector<XySeries> series;
    for (const std::string& context : order) {
      series.push_back(lines[context]);
      std::sort(series.back().points.begin(), series.back().points.end());
    }
    out += xy_chart(fmt::format("{} vs micro-batch size ({})", figure.title, campaign.name),
                    "micro-batch size", "sequences", figure.title, figure.unit, series);
  }
  return out;
}

struct Delta {
  std::string label;           ///< context and variant, e.g. "tp4-pp4: recompute full"
  std::vector<double> values;  ///< per delta figure
};

/// Pairs every done point whose `key` differs from the axis' first value with the done point that differs
/// only there; deltas in % (temperature in C).
std::vector<Delta> deltas_of(const Campaign& campaign, const std::string& key) {
  const std::vector<std::string> values = axis_values(campaign, key);
  std::vector<Delta> deltas;
  if (values.size() < 2) return deltas;
  for (const auto& variant : campaign.points) {
    if (!done(variant) || value_of(variant, key) == values.front()) continue;
    for (const auto& base : campaign.points) {
      if (!done(base) || value_of(base, key) != values.front() ||
          context_label(base, key) != context_label(variant, key))
        continue;
      auto change = [](double now, double before) { return (now - before) / before * 100.0; };
      deltas.push_back(
          {fmt::format("{}: {} {}", context_label(variant, key), key, *value_of(variant, key)),
           {change(variant.tokens_per_s, base.tokens_per_s),
            change(variant.energy_per_token_j, base.energy_per_token_j),
            change(variant.peak_power_w, base.peak_power_w), variant.max_temp_c - base.max_temp_c}});
    }
  }
  return deltas;
}

std::string optimization_section(const Campaign& campaign) {
  static const std::vector<std::string> kKeys = {"recompute", "overlap", "overlap-tp", "overlap-grad",
                                                 "overlap-param"};
  static const std::vector<std::string> kGroups = {"throughput", "energy per token", "peak power",
                                                   "hottest GPU"};
  static const std::vector<std::string> kUnits = {"%", "%", "%", "C"};
  std::string out;
  for (const std::string& key : kKeys) {
    if (std::find(campaign.axes.begin(), campaign.axes.end(), key) == campaign.axes.end()) continue;
    const std::vector<Delta> deltas = deltas_of(campaign, key);
    if (deltas.empty()) continue;
    const std::string base = axis_values(campaign, key).front();
    std::vector<std::string> series;
    std::vector<std::vector<double>> values(kGroups.size());
    out += fmt::format(
        "<table class=\"deltas\"><tr><th class=\"key\">{} vs {} {}</th><th>throughput, %</th><th>energy per "
        "token, %</th><th>peak power, %</th><th>hottest GPU, C</th></tr>\n",
        escape_html(key), escape_html(key), escape_html(base));
    for (const Delta& delta : deltas) {
      series.push_back(delta.label);
      out += fmt::format("<tr><td class=\"key\">{}</td>", escape_html(delta.label));
      for (std::size_t group = 0; group < kGroups.size(); ++group) {
        values[group].push_back(delta.values[group]);
        out += fmt::format("<td>{:+.2f}</td>", delta.values[group]);
      }
      out += "</tr>\n";
    }
    out += "</table>\n";
    out += grouped_bar_chart(fmt::format("Change from {} {} ({})", key, base, campaign.name), kGroups, kUnits,
                             series, values);
  }
  return out.empty() ? "" : "<h3>Recompute and overlap deltas</h3>\n" + out;
}

std::string temperature_section(const Campaign& campaign) {
  std::string out;
  for (const auto& point : campaign.points) {
    if (!done(point) || point.temp_peak_c.empty()) continue;
    out += node_slot_heatmap(fmt::format("Peak GPU temperature, C: {} / {}", campaign.name, point.name), "C",
                             point.temp_peak_c);
  }
  return out.empty() ? "" : "<h3>Per-GPU temperature (node x slot)</h3>\n" + out;
}

std::string campaign_section(const Campaign& campaign, std::size_t index) {
  int counts[3] = {0, 0, 0};
  for (const auto& point : campaign.points)
    ++counts[point.status == "done" ? 0 : point.status == "failed" ? 1 : 2];
  std::string out = fmt::format(
      "<h2 id=\"campaign{}\">Campaign {}</h2>\n<p>{} backend, model {}, cluster {}, axes {}: {} point(s) "
      "done, {} "
      "failed, {} skipped or not run. Directory <code>{}</code>.</p>\n",
      index + 1, escape_html(campaign.name), escape_html(campaign.backend), escape_html(campaign.model),
      escape_html(campaign.cluster), escape_html(fmt::format("{}", fmt::join(campaign.axes, ", "))),
      counts[0], counts[1], counts[2], escape_html(campaign.dir.string()));
  out += "<h3>Points</h3>\n" + points_table(campaign);
  out += "<h3>Per-axis summary</h3>\n" + axis_summary_table(campaign);
  if (counts[0] == 0) return out + "<p class=\"note\">No point finished: no figures to chart.</p>\n";
  const PointGrid grid = point_grid(campaign);
  out += "<h3>Throughput, MFU and energy over the swept axes</h3>\n";
  out += figure_charts(campaign, grid, headline_figures());
  out += "<h3>Power and heat over the swept axes</h3>\n";
  out += figure_charts(campaign, grid, power_figures());
  out += microbatch_section(campaign);
  out += optimization_section(campaign);
  out += temperature_section(campaign);
  return out;
}

/// Simulated vs measured: points of the same name done in a simulated and in a measured campaign.
std::string sim_vs_measured_section(const std::vector<Campaign>& campaigns) {
  static const std::vector<FigureSpec> kFigures = {headline_figures()[0], headline_figures()[2],
                                                   power_figures()[0]};
  std::vector<std::string> names;
  std::vector<std::vector<double>> measured(kFigures.size()), simulated(kFigures.size());
  for (const auto& sim_campaign : campaigns) {
    for (const auto& measured_campaign : campaigns) {
      for (const auto& sim : sim_campaign.points) {
        if (!done(sim) || !sim.simulated) continue;
        for (const auto& real : measured_campaign.points) {
          if (!done(real) || real.simulated || real.name != sim.name) continue;
          names.push_back(sim.name);
          for (std::size_t figure = 0; figure < kFigures.size(); ++figure) {
            measured[figure].push_back(figure_of(real, kFigures[figure]));
            simulated[figure].push_back(figure_of(sim, kFigures[figure]));
          }
        }
      }
    }
  }
  std::string out = "<h2 id=\"sim-vs-measured\">Simulated vs measured</h2>\n";
  if (names.empty())
    return out +
           "<p class=\"note\">No point was both simulated and measured here: give a simulated and a measured "
           "campaign with the same point names (e.g. <code>calo report campaigns/A-sim "
           "campaigns/A-cuda</code>)."
           "</p>\n";
  out += "<table class=\"sim-vs-measured\"><tr><th class=\"key\">point</th>";
  for (const auto& figure : kFigures)
    out += fmt::format("<th>measured {0}, {1}</th><th>simulated {0}, {1}</th><th>error, %</th>", figure.title,
                       escape_html(figure.unit));
  out += "</tr>\n";
  for (std::size_t row = 0; row < names.size(); ++row) {
    out += fmt::format("<tr><td class=\"key\">{}</td>", escape_html(names[row]));
    for (std::size_t figure = 0; figure < kFigures.size(); ++figure) {
      const double real = measured[figure][row], sim = simulated[figure][row];
      const double error_pct = (sim - real) / real * 100.0;
      out += fmt::format("<td>{}</td><td>{}</td><td>{}</td>", format_number(real), format_number(sim),
                         std::isfinite(error_pct) ? fmt::format("{:+.1f}", error_pct) : "–");
    }
    out += "</tr>\n";
  }
  out += "</table>\n";
  for (std::size_t figure = 0; figure < kFigures.size(); ++figure) {
    out += column_chart(fmt::format("{}: simulated vs measured", kFigures[figure].title),
                        kFigures[figure].title, kFigures[figure].unit, names, {"measured", "simulated"},
                        {measured[figure], simulated[figure]});
  }
  return out;
}

}  // namespace

std::string render_campaign_report(const std::vector<Campaign>& campaigns, const ReportOptions& options) {
  std::string out =
      page_open(options.title,
                "Campaign report: one section per campaign (calo sweep), figures per point from "
                "its stored run; definitions in docs/METRICS.md (Campaigns). Blank heatmap cells: "
                "points skipped, failed or not run.");
  // Simulated vs measured first when some point was both (the error is the first thing to know), else last.
  const std::string comparison = sim_vs_measured_section(campaigns);
  const bool compared = comparison.find("<table class=\"sim-vs-measured\">") != std::string::npos;
  if (compared) out += comparison;
  for (std::size_t index = 0; index < campaigns.size(); ++index)
    out += campaign_section(campaigns[index], index);
  if (!compared) out += comparison;
  out += "</body></html>\n";
  return out;
}

}  // namespace calo::report
