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
  for (double tick : nice_ticks(frame.y0, frame.y1, 5)) {
    double y = frame.py(tick);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, y, kLeft + frame.plot_w(), y, kLeft - 6, y + 4, format_tick(tick));
  }
  if (x_ticks) {
    for (double tick : nice_ticks(frame.x0, frame.x1, 8)) {
      double x = frame.px(tick);
      out += fmt::format(
          "<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
          "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
          x, kTop + frame.plot_h(), x, kTop + frame.plot_h() + 5, x, kTop + frame.plot_h() + 18,
          format_tick(tick));
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

std::string legend(const std::vector<std::string>& names, double width, bool dashed_last = false,
                   const std::vector<bool>& dashed = {}) {
  std::string out;
  double x = width - kRight + 14;
  for (std::size_t index = 0; index < names.size() && index < 24; ++index) {
    double y = kTop + 8 + static_cast<double>(index) * 16;
    bool dash = (!dashed.empty() && dashed[index]) || (dashed_last && index + 1 == names.size());
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"{}/>"
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        x, y, x + 18, y, palette_color(index), dash ? " stroke-dasharray=\"5 3\"" : "", x + 24, y + 4,
        legend_label(names[index]));
  }
  if (names.size() > 24) {
    out += fmt::format("<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">+{} more</text>\n", x,
                       kTop + 8 + 24 * 16 + 4, names.size() - 24);
  }
  return out;
}

std::pair<double, double> padded_range(double min, double max) {
  if (!std::isfinite(min) || !std::isfinite(max)) return {0, 1};
  if (max <= min) return {min - 1, max + 1};
  double pad = (max - min) * 0.05;
  return {min - pad, max + pad};
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
  for (double tick = std::ceil(min / step) * step; tick <= max + step * 1e-9; tick += step) {
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
    const auto& buckets = series[index].buckets;
    double bucket_w = frame.plot_w() / static_cast<double>(std::max<std::size_t>(buckets.size(), 1));
    std::string band_top;
    std::string band_bottom;
    std::string line;
    bool pen_down = false;
    for (std::size_t column = 0; column < buckets.size(); ++column) {
      const auto& bucket = buckets[column];
      if (bucket.count == 0) {
        pen_down = false;
        continue;
      }
      double x = kLeft + (static_cast<double>(column) + 0.5) * bucket_w;
      line += fmt::format("{}{:.1f} {:.1f}", pen_down ? "L" : "M", x, frame.py(bucket.mean));
      band_top += fmt::format("M{:.1f} {:.1f}V{:.1f}", x, frame.py(bucket.max), frame.py(bucket.min));
      pen_down = true;
    }
    std::string color = palette_color(index);
    out += fmt::format("<path class=\"band\" d=\"{}\" stroke=\"{}\"/>\n", band_top, color);
    out += fmt::format("<path class=\"line\" d=\"{}\" stroke=\"{}\"><title>{}</title></path>\n", line, color,
                       escape_html(series[index].name));
  }
  std::vector<std::string> names;
  for (const auto& line : series) names.push_back(line.name);
  out += legend(names, frame.width);
  out += close_figure();
  return out;
}

std::string heatmap_chart(const std::string& title, const std::vector<HeatmapRow>& rows,
                          const std::vector<std::string>& column_labels,
                          const std::vector<std::vector<double>>& values) {
  constexpr double kRowH = 22;
  constexpr double kColW = 84;
  constexpr double kLabelW = 150;
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
        out += fmt::format(
            "<rect class=\"cell-empty\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n",
            x + 1, y + 1, kColW - 2, kRowH - 2);
        continue;
      }
      double share = hi > lo ? (value - lo) / (hi - lo) : 0.0;
      // Cool (light yellow) to hot (dark red).
      int red = static_cast<int>(255 - 75 * share);
      int green = static_cast<int>(245 - 200 * share);
      int blue = static_cast<int>(200 - 170 * share);
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"rgb({},{},{})\">"
          "<title>{} {}: {}</title></rect><text class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" "
          "text-anchor=\"middle\"{}>{}"
          "</text>\n",
          x + 1, y + 1, kColW - 2, kRowH - 2, red, green, blue, escape_html(rows[row].label),
          escape_html(column_labels[column]), format_cell(value), x + kColW / 2, y + 15,
          share > 0.6 ? " fill=\"#fff\"" : "", format_cell(value));
    }
  }
  out += close_figure();
  return out;
}

std::string stacked_bar_chart(const std::string& title, const std::string& unit,
                              const std::vector<std::string>& bars, const std::vector<std::string>& segments,
                              const std::vector<std::vector<double>>& values) {
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
  out +=
      fmt::format("<text class=\"axis-title\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                  kLeft + frame.plot_w() / 2, frame.height - 8, escape_html(unit));
  out += legend(segments, frame.width);
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
    double hi = 0;
    for (double value : values[group]) {
      if (!std::isnan(value)) hi = std::max(hi, value);
    }
    double bar_w = (kPanelW - 30) / static_cast<double>(std::max<std::size_t>(series.size(), 1));
    out += fmt::format("<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
                       panel_x, panel_y + kPanelH, panel_x + kPanelW - 20, panel_y + kPanelH);
    for (std::size_t run = 0; run < series.size() && run < values[group].size(); ++run) {
      double value = values[group][run];
      double x = panel_x + 5 + bar_w * static_cast<double>(run);
      if (std::isnan(value)) {
        out +=
            fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">n/a</text>\n",
                        x + bar_w / 2, panel_y + kPanelH - 4);
        continue;
      }
      double h = hi > 0 ? value / hi * (kPanelH - 20) : 0;
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {} "
          "{}</title>"
          "</rect><text class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
          x, panel_y + kPanelH - h, bar_w - 4, h, palette_color(run), escape_html(series[run]),
          format_tick(value), escape_html(group_units[group]), x + (bar_w - 4) / 2, panel_y + kPanelH - h - 4,
          format_tick(value));
    }
    out += fmt::format(
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">({})</text>\n",
        panel_x + (kPanelW - 20) / 2, panel_y + kPanelH + 18, escape_html(groups[group]),
        panel_x + (kPanelW - 20) / 2, panel_y + kPanelH + 32, escape_html(group_units[group]));
  }
  out += legend(series, width);
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
  out += legend(names, frame.width, false, dashed);
  out += close_figure();
  return out;
}

}  // namespace calo::report
