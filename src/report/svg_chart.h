// Inline SVG charts with axes, units and legends. Every chart is a <figure class="chart" data-chart=KIND
// data-points=N> so a browser test can check that each chart drew data. No scripts, no network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyze/metrics.h"

namespace calo::report {

/// One device's downsampled series for a time-series chart.
struct TimeSeries {
  std::string name;                      ///< legend entry, e.g. "GPU 3 (node 0)"
  std::vector<analyze::Bucket> buckets;  ///< equal-width pixel buckets over the chart's x range
};

/// Time-series chart: a min/max band and a mean line per series, vertical step markers.
/// `x_end_s`: x range [0, x_end_s]; `step_marks_s`: step begin times (s).
std::string time_series_chart(const std::string& title, const std::string& y_label, const std::string& y_unit,
                              double x_end_s, const std::vector<TimeSeries>& series,
                              const std::vector<double>& step_marks_s);

/// One heatmap row: a GPU with a group label (its node).
struct HeatmapRow {
  std::string label;  ///< e.g. "GPU 3"
  std::string group;  ///< e.g. "node 0"; consecutive rows of one group are framed together
};

/// Heatmap rows x columns; colour per column scaled from its min to max; cells show the value. NaN: blank.
std::string heatmap_chart(const std::string& title, const std::vector<HeatmapRow>& rows,
                          const std::vector<std::string>& column_labels,
                          const std::vector<std::vector<double>>& values);

/// A labelled vertical line across a bar chart at `value` (in the chart's unit), e.g. a memory limit.
struct ChartMarker {
  std::string label;  ///< drawn at the top of the line, e.g. "usable 73.26"
  double value = 0;   ///< where the line stands, in the chart's unit
};

/// Stacked horizontal bars: one bar per label, segments per name (values in `unit`), with dashed `markers`.
std::string stacked_bar_chart(const std::string& title, const std::string& unit,
                              const std::vector<std::string>& bars, const std::vector<std::string>& segments,
                              const std::vector<std::vector<double>>& values,
                              const std::vector<ChartMarker>& markers = {});

/// Grouped vertical bars: one panel per group (metric, own scale), one bar per series (run) in each.
std::string grouped_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                              const std::vector<std::string>& group_units,
                              const std::vector<std::string>& series,
                              const std::vector<std::vector<double>>& values);

/// Vertical bars from zero: one cluster per category (e.g. a GPU), one bar per series (e.g. a run) in each,
/// a y axis with distinct ticks. `values[series][category]`; NaN: no bar. `kind` names the chart in
/// data-chart.
std::string column_chart(const std::string& title, const std::string& y_label, const std::string& y_unit,
                         const std::vector<std::string>& categories, const std::vector<std::string>& series,
                         const std::vector<std::vector<double>>& values, const std::string& kind = "columns");

/// Which end of a figure is the good one: it decides what a heatmap's dark end means.
enum class Better {
  kNeither,  ///< a quantity, not a score (a temperature map): dark = high
  kHigher,   ///< throughput, MFU, efficiency: dark = high = better
  kLower,    ///< energy per token, peak power, throttle time: dark = low = better
};

/// Heatmap of one metric over labelled rows x columns on one colour scale (light = low, dark = high; with
/// `better`, dark = better and the legend says which end that is); cells show the value, the legend the unit
/// and range. `values[row][column]`; NaN: blank cell. `kind` names the chart in data-chart.
std::string grid_heatmap(const std::string& title, const std::string& unit,
                         const std::vector<std::string>& row_labels,
                         const std::vector<std::string>& column_labels,
                         const std::vector<std::vector<double>>& values, const std::string& kind = "grid",
                         Better better = Better::kNeither);

/// One line of an x-y overlay chart.
struct XySeries {
  std::string name;                               ///< legend entry
  std::vector<std::pair<double, double>> points;  ///< (x, y) in order of x
  bool dashed = false;                            ///< dashed line (e.g. simulated)
};

/// Overlay of x-y lines (e.g. simulated vs measured).
std::string xy_chart(const std::string& title, const std::string& x_label, const std::string& x_unit,
                     const std::string& y_label, const std::string& y_unit,
                     const std::vector<XySeries>& series);

/// Escapes &, <, >, " and ' for HTML/SVG text and attributes.
std::string escape_html(const std::string& text);

/// Colour k of the categorical palette (cycles).
std::string palette_color(std::size_t index);

/// Tick values from `min` to `max` on a 1-2-5 grid, about `target` of them.
std::vector<double> nice_ticks(double min, double max, int target);

}  // namespace calo::report
