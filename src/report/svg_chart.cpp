// SVG chart rendering. Coordinates: plot area inside fixed margins; text in the page's font.
#include "report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace calo::report {
namespace {

constexpr double kWidth = 900;
constexpr double kLeft = 70;
constexpr double kRight = 170;  // legend column
constexpr double kTop = 34;
constexpr double kBottom = 46;

std::string format_tick(double value) {
  double magnitude = std::fabs(value);
  if (magnitude == 0) return "0";
  if (magnitude >= 1e6 || magnitude < 1e-3) return fmt::format("{:.2g}", value);
  if (magnitude >= 100) return fmt::format("{:.0f}", value);
  if (magnitude >= 10) return fmt::format("{:.1f}", value);
  return fmt::format("{:.3g}", value);
}

// Labels of axis ticks: as many decimals as the tick step needs, so that neighbours never read alike
// (an SM-clock axis of 1439.5, 1440, 1440.5 must not print 1440 three times).
std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  std::vector<std::string> labels;
  if (ticks.size() < 2) {
    for (double tick : ticks) labels.push_back(format_tick(tick));
    return labels;
  }
  auto distinct = [&] {
    for (std::size_t index = 1; index < labels.size(); ++index) {
      if (labels[index] == labels[index - 1]) return false;
    }
    return true;
  };
  double step = std::fabs(ticks[1] - ticks[0]);
  bool scientific = std::max(std::fabs(ticks.back()), std::fabs(ticks.front())) >= 1e6 || step < 1e-3;
  for (int digits = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))); digits <= 9;
       ++digits) {
    labels.clear();
    for (double tick : ticks) {
      labels.push_back(std::fabs(tick) < step * 1e-9 ? "0"
                       : scientific                  ? fmt::format("{:.{}g}", tick, digits + 3)
                                                     : fmt::format("{:.{}f}", tick, digits));
    }
    if (distinct()) break;
  }
  return labels;
}

std::string format_cell(double value) {
  if (std::isnan(value)) return "";
  return format_tick(value);
}

struct Frame {
  double width;
  double height;
  double x0;
  double x1;
  double y0;
  double y1;
  double plot_w() const { return width - kLeft - kRight; }
  double plot_h() const { return height - kTop - kBottom; }
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * plot_w(); }
  double py(double y) const { return kTop + plot_h() - (y - y0) / (y1 - y0) * plot_h(); }
};

std::string open_figure(const std::string& kind, int64_t points, const std::string& title, double width,
                        double height) {
  return fmt::format(
      "<figure class=\"chart\" data-chart=\"{}\" data-points=\"{}\"><figcaption>{}</figcaption>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {:.0f} {:.0f}\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" "
      "role=\"img\" aria-label=\"{}\">\n",
      kind, points, escape_html(title), width, height, width, height, escape_html(title));
}

std::string close_figure() {
  return "</svg></figure>\n";
}

// Axes, grid, tick labels and axis titles.
std::string axes(const Frame& frame, const std::string& x_title, const std::string& y_title,
                 bool x_ticks = true) {
  std::string out;
  auto y_ticks = nice_ticks(frame.y0, frame.y1, 5);
  auto y_labels = tick_labels(y_ticks);
  for (std::size_t index = 0; index < y_ticks.size(); ++index) {
    double y = frame.py(y_ticks[index]);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"tick y-tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, y, kLeft + frame.plot_w(), y, kLeft - 6, y + 4, y_labels[index]);
  }
  if (x_ticks) {
    auto ticks = nice_ticks(frame.x0, frame.x1, 8);
    auto labels = tick_labels(ticks);
    for (std::size_t index = 0; index < ticks.size(); ++index) {
      double tick = ticks[index];
      double x = frame.px(tick);
      out += fmt::format(
          "<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
          "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
          x, kTop + frame.plot_h(), x, kTop + frame.plot_h() + 5, x, kTop + frame.plot_h() + 18,
          labels[index]);
    }
  }
  out += fmt::format(
      "<rect class=\"frame\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n"
      "<text class=\"axis-title\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n"
      "<text class=\"axis-title\" transform=\"translate(16 {:.1f}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      kLeft, kTop, frame.plot_w(), frame.plot_h(), kLeft + frame.plot_w() / 2, frame.height - 8,
      escape_html(x_title), kTop + frame.plot_h() / 2, escape_html(y_title));
  return out;
}

// A legend entry that fits the legend column (~22 characters at 11 px); the full name stays as a tooltip.
std::string legend_label(const std::string& name) {
  constexpr std::size_t kMaxChars = 22;
  std::size_t chars = 0;
  std::size_t cut = name.size();
  for (std::size_t at = 0; at < name.size(); ++at) {
    if ((static_cast<unsigned char>(name[at]) & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (++chars == kMaxChars) cut = at;
  }
  if (chars <= kMaxChars) return escape_html(name);
  return escape_html(name.substr(0, cut)) + "\u2026<title>" + escape_html(name) + "</title>";
}

// Legend column: as many entries as fit in `height` (16 px each), then "+N more".
std::string legend(const std::vector<std::string>& names, double width, double height,
                   bool dashed_last = false, const std::vector<bool>& dashed = {}) {
  std::string out;
  double x = width - kRight + 14;
  std::size_t fits = static_cast<std::size_t>(std::max((height - kTop - 28) / 16, 1.0));
  std::size_t shown = names.size() <= fits ? names.size() : fits - 1;
  for (std::size_t index = 0; index < shown; ++index) {
    double y = kTop + 8 + static_cast<double>(index) * 16;
    bool dash = (!dashed.empty() && dashed[index]) || (dashed_last && index + 1 == names.size());
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"{}/>"
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        x, y, x + 18, y, palette_color(index), dash ? " stroke-dasharray=\"5 3\"" : "", x + 24, y + 4,
        legend_label(names[index]));
  }
  if (shown < names.size()) {
    out += fmt::format("<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">+{} more</text>\n", x,
                       kTop + 8 + static_cast<double>(shown) * 16 + 4, names.size() - shown);
  }
  return out;
}

// Position of `value` on a colour scale from `lo` to `hi` (0..1). A spread under 1 % of the values (1483 vs
// 1488 MHz) is not worth a colour: every cell then reads as the low end.
double colour_share(double value, double lo, double hi) {
  if (!(hi > lo) || hi - lo < 0.01 * std::max(std::fabs(hi), std::fabs(lo))) return 0.0;
  return (value - lo) / (hi - lo);
}

// An empty heat-map cell (no value) at (x, y), `width` x `height` with a 1-unit gap on every side.
std::string empty_heat_cell(double x, double y, double width, double height) {
  return fmt::format(
      "<rect class=\"cell-empty\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n", x + 1,
      y + 1, width - 2, height - 2);
}

// A heat-map cell at (x, y), `width` x `height`, coloured by `share` from cool (0, light yellow) to hot (1,
// dark red), with `title` on hover and `value_text` in its middle (white on dark cells).
std::string heat_cell(double x, double y, double width, double height, double share, const std::string& title,
                      const std::string& value_text) {
  return fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"rgb({},{},{})\">"
      "<title>{}</title></rect><text class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" "
      "text-anchor=\"middle\"{}>{}</text>\n",
      x + 1, y + 1, width - 2, height - 2, static_cast<int>(255 - 75 * share),
      static_cast<int>(245 - 200 * share), static_cast<int>(200 - 170 * share), title, x + width / 2, y + 15,
      share > 0.6 ? " fill=\"#fff\"" : "", value_text);
}

// The least and greatest value of a table and how many values it has, NaN (no value) left out.
struct ValueRange {
  double lo = 0;       // least value, or the starting lo when there is none below it
  double hi = 0;       // greatest value, or the starting hi when there is none above it
  int64_t points = 0;  // values that are not NaN
};

// The range of the non-NaN `values`, starting from `lo` and `hi`.
ValueRange value_range(const std::vector<std::vector<double>>& values, double lo, double hi) {
  ValueRange range{lo, hi, 0};
  for (const auto& row : values) {
    for (double value : row) {
      if (std::isnan(value)) continue;
      range.lo = std::min(range.lo, value);
      range.hi = std::max(range.hi, value);
      ++range.points;
    }
  }
  return range;
}

std::pair<double, double> padded_range(double min, double max) {
  if (!std::isfinite(min) || !std::isfinite(max)) return {0, 1};
  if (max <= min) {  // flat series: a readable band around the value, not +-1 of a large number
    double pad = std::max(std::fabs(min) * 0.02, 1.0);
    return {min - pad, max + pad};
  }
  double pad = (max - min) * 0.05;
  return {min - pad, max + pad};
}

// Bucket columns that hold samples, and which of them continue the line from the previous one: a line joins
// consecutive non-empty columns unless a real gap (>= kGapPeriods sampling periods) lies between them. The
// sampling period is the median distance between consecutive non-empty columns (a sparse series: its sample
// interval; a dense one: one column, so only gaps of several empty columns break the line).
constexpr double kGapPeriods = 3;

std::vector<std::pair<std::size_t, bool>> joined_columns(const std::vector<analyze::Bucket>& buckets) {
  std::vector<std::pair<std::size_t, bool>> columns;
  std::vector<std::size_t> distances;
  std::size_t previous = buckets.size();
  for (std::size_t column = 0; column < buckets.size(); ++column) {
    if (buckets[column].count == 0) continue;
    if (previous < buckets.size()) distances.push_back(column - previous);
    columns.emplace_back(column, false);
    previous = column;
  }
  if (distances.empty()) return columns;
  std::nth_element(distances.begin(), distances.begin() + static_cast<std::ptrdiff_t>(distances.size() / 2),
                   distances.end());
  double period_columns = static_cast<double>(distances[distances.size() / 2]);
  for (std::size_t at = 1; at < columns.size(); ++at) {
    auto distance = static_cast<double>(columns[at].first - columns[at - 1].first);
    columns[at].second = distance <= 1 || distance < kGapPeriods * period_columns;
  }
  return columns;
}

// One series of a time-series chart: per joined segment a min-max band (filled) and a mean line; a sample
// with no joined neighbour is a dot.
std::string series_paths(const Frame& frame, const TimeSeries& series, const std::string& color) {
  const auto& buckets = series.buckets;
  double bucket_w = frame.plot_w() / static_cast<double>(std::max<std::size_t>(buckets.size(), 1));
  auto columns = joined_columns(buckets);
  std::string line;
  std::string band;
  std::string dots;
  for (std::size_t begin = 0; begin < columns.size();) {
    std::size_t end = begin + 1;
    while (end < columns.size() && columns[end].second) ++end;
    auto x_of = [&](std::size_t at) {
      return kLeft + (static_cast<double>(columns[at].first) + 0.5) * bucket_w;
    };
    if (end - begin == 1) {
      dots += fmt::format("M{:.1f} {:.1f}h0", x_of(begin), frame.py(buckets[columns[begin].first].mean));
    } else {
      std::string top;
      std::string bottom;
      for (std::size_t at = begin; at < end; ++at) {
        const auto& bucket = buckets[columns[at].first];
        line += fmt::format("{}{:.1f} {:.1f}", at == begin ? "M" : "L", x_of(at), frame.py(bucket.mean));
        top += fmt::format("{}{:.1f} {:.1f}", at == begin ? "M" : "L", x_of(at), frame.py(bucket.max));
      }
      for (std::size_t at = end; at-- > begin;) {
        bottom += fmt::format("L{:.1f} {:.1f}", x_of(at), frame.py(buckets[columns[at].first].min));
      }
      band += top + bottom + "Z";
    }
    begin = end;
  }
  std::string out;
  if (!band.empty()) out += fmt::format("<path class=\"band\" d=\"{}\" fill=\"{}\"/>\n", band, color);
  if (!line.empty()) {
    out += fmt::format("<path class=\"line\" d=\"{}\" stroke=\"{}\"><title>{}</title></path>\n", line, color,
                       escape_html(series.name));
  }
  if (!dots.empty()) {
    out += fmt::format("<path class=\"dots\" d=\"{}\" stroke=\"{}\"><title>{}</title></path>\n", dots, color,
                       escape_html(series.name));
  }
  return out;
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string palette_color(std::size_t index) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"};
  return kColors[index % (sizeof(kColors) / sizeof(kColors[0]))];
}

std::vector<double> nice_ticks(double min, double max, int target) {
  std::vector<double> ticks;
  if (!(max > min) || target < 1) return ticks;
  double raw = (max - min) / target;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (step >= raw) break;
  }
  if (!std::isfinite(step) || step <= 0) return ticks;
  // Counted, not stepped: at a range far from zero, tick += step stops moving (or runs past the labels).
  const double first = std::ceil(min / step);
  const double count = std::floor((max + step * 1e-9) / step) - first + 1;
  if (!(count >= 0 && count <= 4.0 * target + 4)) return ticks;
  for (int index = 0; index < static_cast<int>(count); ++index) {
    const double tick = (first + index) * step;
    ticks.push_back(std::fabs(tick) < step * 1e-9 ? 0.0 : tick);
  }
  return ticks;
}

std::string time_series_chart(const std::string& title, const std::string& y_label, const std::string& y_unit,
                              double x_end_s, const std::vector<TimeSeries>& series,
                              const std::vector<double>& step_marks_s) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  int64_t points = 0;
  for (const auto& line : series) {
    for (const auto& bucket : line.buckets) {
      if (bucket.count == 0) continue;
      lo = std::min(lo, bucket.min);
      hi = std::max(hi, bucket.max);
      points += bucket.count;
    }
  }
  auto [y0, y1] = padded_range(lo, hi);
  Frame frame{kWidth, 300, 0, std::max(x_end_s, 1e-9), y0, y1};
  std::string out = open_figure("timeseries", points, title, frame.width, frame.height);
  out += axes(frame, "time since run start (s)", fmt::format("{} ({})", y_label, y_unit));
  // Step markers: at most one per 3 px so thousands of steps stay readable.
  double last_x = -1e9;
  std::string marks;
  for (double mark : step_marks_s) {
    double x = frame.px(mark);
    if (x - last_x < 3) continue;
    last_x = x;
    marks += fmt::format("M{:.1f} {:.1f}V{:.1f}", x, kTop, kTop + frame.plot_h());
  }
  if (!marks.empty())
    out += fmt::format("<path class=\"step-mark\" d=\"{}\"><title>step begin</title></path>\n", marks);
  for (std::size_t index = 0; index < series.size(); ++index) {
    out += series_paths(frame, series[index], palette_color(index));
  }
  std::vector<std::string> names;
  for (const auto& line : series) names.push_back(line.name);
  out += legend(names, frame.width, frame.height);
  out += close_figure();
  return out;
}

std::string heatmap_chart(const std::string& title, const std::vector<HeatmapRow>& rows,
                          const std::vector<std::string>& column_labels,
                          const std::vector<std::vector<double>>& values) {
  constexpr double kRowH = 22;
  constexpr double kColW = 84;
  // Room for a group label ("node 960", bold) left of the longest row label ("GPU 7680 (slot 0)",
  // right-aligned).
  std::size_t group_chars = 0;
  std::size_t label_chars = 0;
  for (const HeatmapRow& row : rows) {
    group_chars = std::max(group_chars, row.group.size());
    label_chars = std::max(label_chars, row.label.size());
  }
  const double kLabelW = std::max(150.0, 24.0 + 7.2 * static_cast<double>(group_chars + label_chars));
  constexpr double kHeader = 58;
  double width = kLabelW + kColW * static_cast<double>(column_labels.size()) + 20;
  double height = kHeader + kRowH * static_cast<double>(rows.size()) + 20;
  int64_t points = 0;
  for (const auto& row : values) {
    for (double value : row) points += std::isnan(value) ? 0 : 1;
  }
  std::string out = open_figure("heatmap", points, title, width, height);
  for (std::size_t column = 0; column < column_labels.size(); ++column) {
    out += fmt::format("<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                       kLabelW + kColW * (static_cast<double>(column) + 0.5), kHeader - 10,
                       escape_html(column_labels[column]));
  }
  std::string previous_group;
  for (std::size_t row = 0; row < rows.size(); ++row) {
    double y = kHeader + kRowH * static_cast<double>(row);
    if (rows[row].group != previous_group) {
      out += fmt::format(
          "<line class=\"group-rule\" x1=\"4\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
          "<text class=\"group\" x=\"6\" y=\"{:.1f}\">{}</text>\n",
          y, width - 10, y, y + 15, escape_html(rows[row].group));
      previous_group = rows[row].group;
    }
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       kLabelW - 8, y + 15, escape_html(rows[row].label));
  }
  for (std::size_t column = 0; column < column_labels.size(); ++column) {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -lo;
    for (const auto& row : values) {
      if (column < row.size() && !std::isnan(row[column])) {
        lo = std::min(lo, row[column]);
        hi = std::max(hi, row[column]);
      }
    }
    for (std::size_t row = 0; row < rows.size() && row < values.size(); ++row) {
      double value = column < values[row].size() ? values[row][column] : std::nan("");
      double x = kLabelW + kColW * static_cast<double>(column);
      double y = kHeader + kRowH * static_cast<double>(row);
      if (std::isnan(value)) {
        out += empty_heat_cell(x, y, kColW, kRowH);
        continue;
      }
      const double share = colour_share(value, lo, hi);
      const std::string hover = fmt::format("{} {}: {}", escape_html(rows[row].label),
                                            escape_html(column_labels[column]), format_cell(value));
      out += heat_cell(x, y, kColW, kRowH, share, hover, format_cell(value));
    }
  }
  out += close_figure();
  return out;
}

std::string stacked_bar_chart(const std::string& title, const std::string& unit,
                              const std::vector<std::string>& bars, const std::vector<std::string>& segments,
                              const std::vector<std::vector<double>>& values,
                              const std::vector<ChartMarker>& markers) {
  constexpr double kBarH = 18;
  constexpr double kGap = 6;
  double height = kTop + kBottom + (kBarH + kGap) * static_cast<double>(bars.size()) + 10;
  height = std::max(height, kTop + kBottom + 16.0 * static_cast<double>(segments.size()) + 10);
  double total_max = 0;
  int64_t points = 0;
  for (const auto& row : values) {
    double total = 0;
    for (double value : row) {
      if (value > 0) {
        total += value;
        ++points;
      }
    }
    total_max = std::max(total_max, total);
  }
  for (const ChartMarker& marker : markers) total_max = std::max(total_max, marker.value);
  Frame frame{kWidth, height, 0, total_max > 0 ? total_max * 1.05 : 1, 0, 1};
  std::string out = open_figure("stacked", points, title, frame.width, frame.height);
  for (double tick : nice_ticks(frame.x0, frame.x1, 8)) {
    double x = frame.px(tick);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
        x, kTop, x, kTop + frame.plot_h(), x, kTop + frame.plot_h() + 18, format_tick(tick));
  }
  for (std::size_t bar = 0; bar < bars.size(); ++bar) {
    double y = kTop + 5 + (kBarH + kGap) * static_cast<double>(bar);
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       kLeft - 6, y + 13, escape_html(bars[bar]));
    double cursor = 0;
    for (std::size_t segment = 0; segment < segments.size() && bar < values.size(); ++segment) {
      double value = segment < values[bar].size() ? values[bar][segment] : 0;
      if (!(value > 0)) continue;
      double x = frame.px(cursor);
      double w = frame.px(cursor + value) - x;
      out += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}: {} {}"
          "</title></rect>\n",
          x, y, std::max(w, 0.5), kBarH, palette_color(segment), escape_html(bars[bar]),
          escape_html(segments[segment]), format_tick(value), escape_html(unit));
      cursor += value;
    }
  }
  for (std::size_t index = 0; index < markers.size(); ++index) {
    const double x = frame.px(markers[index].value);
    // Labels alternate above the plot so two close markers (usable, card) stay readable.
    out += fmt::format(
        "<line class=\"marker\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\" "
        "stroke-dasharray=\"4 3\"/><text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" "
        "text-anchor=\"{}\">{}</text>\n",
        x, kTop - 2, x, kTop + frame.plot_h(), x, kTop - 6 - 11.0 * static_cast<double>(index % 2),
        index % 2 == 0 ? "end" : "start", escape_html(markers[index].label));
  }
  out +=
      fmt::format("<text class=\"axis-title\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                  kLeft + frame.plot_w() / 2, frame.height - 8, escape_html(unit));
  out += legend(segments, frame.width, frame.height);
  out += close_figure();
  return out;
}

std::string grouped_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                              const std::vector<std::string>& group_units,
                              const std::vector<std::string>& series,
                              const std::vector<std::vector<double>>& values) {
  constexpr double kPanelW = 150;
  constexpr double kPanelH = 170;
  constexpr double kPanelTop = 40;
  std::size_t per_row = 5;
  std::size_t rows = (groups.size() + per_row - 1) / per_row;
  double width = std::max(kWidth, kPanelW * static_cast<double>(std::min(per_row, groups.size())) + kRight);
  double height = kPanelTop + (kPanelH + 60) * static_cast<double>(std::max<std::size_t>(rows, 1));
  int64_t points = 0;
  for (const auto& row : values) {
    for (double value : row) points += std::isnan(value) ? 0 : 1;
  }
  std::string out = open_figure("bars", points, title, width, height);
  for (std::size_t group = 0; group < groups.size(); ++group) {
    double panel_x = 20 + kPanelW * static_cast<double>(group % per_row);
    double panel_y = kPanelTop + (kPanelH + 60) * static_cast<double>(group / per_row);
    // Bars grow from zero, up for positive values and down for negative ones (e.g. changes in %).
    double hi = 0;
    double lo = 0;
    for (double value : values[group]) {
      if (!std::isnan(value)) hi = std::max(hi, value), lo = std::min(lo, value);
    }
    const double bar_span = kPanelH - 20 - (lo < 0 ? 14 : 0);
    const double zero_y = hi - lo > 0 ? panel_y + 20 + bar_span * hi / (hi - lo) : panel_y + kPanelH;
    double bar_w = (kPanelW - 30) / static_cast<double>(std::max<std::size_t>(series.size(), 1));
    out += fmt::format("<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
                       panel_x, zero_y, panel_x + kPanelW - 20, zero_y);
    for (std::size_t run = 0; run < series.size() && run < values[group].size(); ++run) {
      double value = values[group][run];
      double x = panel_x + 5 + bar_w * static_cast<double>(run);
      if (std::isnan(value)) {
        out +=
            fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">n/a</text>\n",
                        x + bar_w / 2, panel_y + kPanelH - 4);
        continue;
      }
      const double h = hi - lo > 0 ? std::fabs(value) / (hi - lo) * bar_span : 0;
      const double top = value >= 0 ? zero_y - h : zero_y;
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {} "
          "{}</title>"
          "</rect><text class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
          x, top, bar_w - 4, h, palette_color(run), escape_html(series[run]), format_tick(value),
          escape_html(group_units[group]), x + (bar_w - 4) / 2, value >= 0 ? top - 4 : top + h + 12,
          format_tick(value));
    }
    out += fmt::format(
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">({})</text>\n",
        panel_x + (kPanelW - 20) / 2, panel_y + kPanelH + 18, escape_html(groups[group]),
        panel_x + (kPanelW - 20) / 2, panel_y + kPanelH + 32, escape_html(group_units[group]));
  }
  out += legend(series, width, height);
  out += close_figure();
  return out;
}

std::string column_chart(const std::string& title, const std::string& y_label, const std::string& y_unit,
                         const std::vector<std::string>& categories, const std::vector<std::string>& series,
                         const std::vector<std::vector<double>>& values, const std::string& kind) {
  const ValueRange range = value_range(values, 0, 0);
  const double hi = range.hi;
  const double lo = range.lo;
  const int64_t points = range.points;
  Frame frame{kWidth, 230, 0, 1, lo, hi > lo ? hi * 1.12 : 1};
  std::string out = open_figure(kind, points, title, frame.width, frame.height);
  out += axes(frame, "", fmt::format("{} ({})", y_label, y_unit), false);
  double cluster_w = frame.plot_w() / static_cast<double>(std::max<std::size_t>(categories.size(), 1));
  double bar_w =
      std::min(cluster_w * 0.8 / static_cast<double>(std::max<std::size_t>(series.size(), 1)), 56.0);
  double bars_w = bar_w * static_cast<double>(series.size());
  // Category labels: every k-th so that they never overlap (about 7 px per character at 11 px).
  std::size_t longest = 1;
  for (const auto& category : categories) longest = std::max(longest, category.size());
  auto every = static_cast<std::size_t>(std::ceil(static_cast<double>(longest) * 7.0 / cluster_w));
  every = std::max<std::size_t>(every, 1);
  for (std::size_t category = 0; category < categories.size(); ++category) {
    double x0 = kLeft + cluster_w * (static_cast<double>(category) + 0.5) - bars_w / 2;
    for (std::size_t run = 0; run < series.size() && run < values.size(); ++run) {
      double value = category < values[run].size() ? values[run][category] : std::nan("");
      if (std::isnan(value)) continue;
      double top = frame.py(std::max(value, 0.0));
      double bottom = frame.py(std::min(value, 0.0));
      out += fmt::format(
          "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
          "<title>{} {}: {} {}</title></rect>\n",
          x0 + bar_w * static_cast<double>(run), top, std::max(bar_w - 1, 1.0), std::max(bottom - top, 0.5),
          palette_color(run), escape_html(series[run]), escape_html(categories[category]), format_tick(value),
          escape_html(y_unit));
      if (bar_w >= 28) {  // the value above the bar where it fits
        out +=
            fmt::format("<text class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                        x0 + bar_w * (static_cast<double>(run) + 0.5), top - 4, format_tick(value));
      }
    }
    if (category % every == 0) {
      out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                         kLeft + cluster_w * (static_cast<double>(category) + 0.5),
                         kTop + frame.plot_h() + 16, escape_html(categories[category]));
    }
  }
  out += legend(series, frame.width, frame.height);
  out += close_figure();
  return out;
}

std::string grid_heatmap(const std::string& title, const std::string& unit,
                         const std::vector<std::string>& row_labels,
                         const std::vector<std::string>& column_labels,
                         const std::vector<std::vector<double>>& values, const std::string& kind,
                         Better better) {
  constexpr double kCellH = 22;
  constexpr double kHeader = 40;
  double label_w = 60;
  double cell_w = 70;
  for (const std::string& label : row_labels) label_w = std::max(label_w, 16.0 + 6.2 * label.size());
  for (const std::string& label : column_labels) cell_w = std::max(cell_w, 12.0 + 6.2 * label.size());
  const ValueRange range =
      value_range(values, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity());
  const double lo = range.lo;
  const double hi = range.hi;
  const int64_t points = range.points;
  const double columns = static_cast<double>(column_labels.size());
  // Wide enough for the legend line under the cells (better-worse legends run to ~75 characters).
  const double legend_w = better == Better::kNeither ? 300.0 : 480.0;
  double width = std::max(label_w + cell_w * columns + 20, label_w + legend_w);
  double height = kHeader + kCellH * static_cast<double>(row_labels.size()) + 34;
  std::string out = open_figure(kind, points, title, width, height);
  for (std::size_t column = 0; column < column_labels.size(); ++column) {
    out += fmt::format("<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                       label_w + cell_w * (static_cast<double>(column) + 0.5), kHeader - 8,
                       escape_html(column_labels[column]));
  }
  for (std::size_t row = 0; row < row_labels.size(); ++row) {
    double y = kHeader + kCellH * static_cast<double>(row);
    out += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       label_w - 8, y + 15, escape_html(row_labels[row]));
    for (std::size_t column = 0; column < column_labels.size(); ++column) {
      double value = row < values.size() && column < values[row].size() ? values[row][column] : std::nan("");
      double x = label_w + cell_w * static_cast<double>(column);
      if (std::isnan(value)) {
        out += empty_heat_cell(x, y, cell_w, kCellH);
        continue;
      }
      double share = colour_share(value, lo, hi);
      if (better == Better::kLower && colour_share(hi, lo, hi) > 0) share = 1 - share;  // dark = the good end
      const std::string hover =
          fmt::format("{} {}: {} {}", escape_html(row_labels[row]), escape_html(column_labels[column]),
                      format_cell(value), escape_html(unit));
      out += heat_cell(x, y, cell_w, kCellH, share, hover, format_cell(value));
    }
  }
  const std::string low = points > 0 ? format_cell(lo) : "-";
  const std::string high = points > 0 ? format_cell(hi) : "-";
  const std::string legend =
      better == Better::kNeither
          ? fmt::format("{}: light = {}, dark = {} (one scale)", escape_html(unit), low, high)
          : fmt::format("{}: dark = better ({} is best), light = worse ({}); one scale", escape_html(unit),
                        better == Better::kHigher ? "higher, " + high : "lower, " + low,
                        better == Better::kHigher ? low : high);
  out += fmt::format("<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", label_w, height - 10,
                     legend);
  out += close_figure();
  return out;
}

std::string xy_chart(const std::string& title, const std::string& x_label, const std::string& x_unit,
                     const std::string& y_label, const std::string& y_unit,
                     const std::vector<XySeries>& series) {
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -x_lo;
  double y_lo = x_lo;
  double y_hi = -x_lo;
  int64_t points = 0;
  for (const auto& line : series) {
    for (const auto& [x, y] : line.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
      ++points;
    }
  }
  auto [y0, y1] = padded_range(y_lo, y_hi);
  auto [x0, x1] = padded_range(x_lo, x_hi);
  Frame frame{kWidth, 300, x0, x1, y0, y1};
  std::string out = open_figure("xy", points, title, frame.width, frame.height);
  out += axes(frame, fmt::format("{} ({})", x_label, x_unit), fmt::format("{} ({})", y_label, y_unit));
  std::vector<std::string> names;
  std::vector<bool> dashed;
  for (std::size_t index = 0; index < series.size(); ++index) {
    std::string path;
    for (const auto& [x, y] : series[index].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      path += fmt::format("{}{:.1f} {:.1f}", path.empty() ? "M" : "L", frame.px(x), frame.py(y));
    }
    if (series[index].points.size() == 1) path += "h1";
    out += fmt::format("<path class=\"line\" d=\"{}\" stroke=\"{}\"{}><title>{}</title></path>\n", path,
                       palette_color(index), series[index].dashed ? " stroke-dasharray=\"6 4\"" : "",
                       escape_html(series[index].name));
    names.push_back(series[index].name);
    dashed.push_back(series[index].dashed);
  }
  out += legend(names, frame.width, frame.height, false, dashed);
  out += close_figure();
  return out;
}

}  // namespace calo::report
