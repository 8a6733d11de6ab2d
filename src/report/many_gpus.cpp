// Folding thousands of GPUs into charts a person can read: bands over GPUs, outlier rows, grouped nodes.
#include "report/many_gpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/statistics.h"

namespace calo::report {
namespace {

double line_mean(const TimeSeries& line) {
  double sum = 0;
  double count = 0;
  for (const auto& bucket : line.buckets) {
    sum += bucket.mean * bucket.count;
    count += bucket.count;
  }
  return count > 0 ? sum / count : NAN;
}

std::string cell(double value) {
  if (std::isnan(value)) return "–";
  return std::fabs(value) >= 100 ? fmt::format("{:.0f}", value) : fmt::format("{:.3g}", value);
}

}  // namespace

std::vector<TimeSeries> fold_gpu_lines(std::vector<TimeSeries> lines) {
  if (lines.size() <= kMaxGpuLines) return lines;
  std::size_t buckets = 0;
  for (const auto& line : lines) buckets = std::max(buckets, line.buckets.size());
  TimeSeries all{fmt::format("{} GPUs", lines.size()), std::vector<analyze::Bucket>(buckets)};
  std::vector<double> sums(buckets, 0);
  for (const auto& line : lines) {
    for (std::size_t at = 0; at < line.buckets.size(); ++at) {
      const analyze::Bucket& bucket = line.buckets[at];
      if (bucket.count == 0) continue;
      analyze::Bucket& folded = all.buckets[at];
      folded.min = folded.count == 0 ? bucket.min : std::min(folded.min, bucket.min);
      folded.max = folded.count == 0 ? bucket.max : std::max(folded.max, bucket.max);
      folded.count += bucket.count;
      sums[at] += bucket.mean * bucket.count;
    }
  }
  for (std::size_t at = 0; at < buckets; ++at) {
    if (all.buckets[at].count > 0) all.buckets[at].mean = sums[at] / all.buckets[at].count;
  }
  std::size_t highest = 0;
  std::size_t lowest = 0;
  std::vector<double> means(lines.size());
  for (std::size_t index = 0; index < lines.size(); ++index) {
    means[index] = line_mean(lines[index]);
    if (std::isnan(means[index])) continue;
    if (std::isnan(means[highest]) || means[index] > means[highest]) highest = index;
    if (std::isnan(means[lowest]) || means[index] < means[lowest]) lowest = index;
  }
  std::vector<TimeSeries> folded{std::move(all)};
  folded.push_back({"\u2191 " + lines[highest].name, lines[highest].buckets});
  if (lowest != highest) folded.push_back({"\u2193 " + lines[lowest].name, lines[lowest].buckets});
  return folded;
}

void drop_empty_columns(std::vector<std::string>& columns, std::vector<std::vector<double>>& values) {
  for (std::size_t column = columns.size(); column-- > 0;) {
    const bool any = std::any_of(values.begin(), values.end(), [column](const std::vector<double>& row) {
      return column < row.size() && !std::isnan(row[column]);
    });
    if (any) continue;
    columns.erase(columns.begin() + static_cast<std::ptrdiff_t>(column));
    for (auto& row : values)
      if (column < row.size()) row.erase(row.begin() + static_cast<std::ptrdiff_t>(column));
  }
}

std::vector<std::size_t> outlier_rows(const std::vector<std::vector<double>>& values, std::size_t keep) {
  std::vector<std::size_t> rows(values.size());
  for (std::size_t row = 0; row < rows.size(); ++row) rows[row] = row;
  if (values.size() <= keep) return rows;
  std::size_t columns = 0;
  for (const auto& row : values) columns = std::max(columns, row.size());
  std::vector<double> score(values.size(), 0);
  for (std::size_t column = 0; column < columns; ++column) {
    std::vector<double> present;
    for (const auto& row : values)
      if (column < row.size() && !std::isnan(row[column])) present.push_back(row[column]);
    if (present.empty()) continue;
    const auto [lo, hi] = std::minmax_element(present.begin(), present.end());
    const double range = *hi - *lo;
    if (!(range > 0)) continue;
    const double median = core::upper_median(present);
    for (std::size_t row = 0; row < values.size(); ++row) {
      if (column < values[row].size() && !std::isnan(values[row][column]))
        score[row] = std::max(score[row], std::fabs(values[row][column] - median) / range);
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [&score](std::size_t a, std::size_t b) { return score[a] > score[b]; });
  rows.resize(keep);
  std::sort(rows.begin(), rows.end());
  return rows;
}

std::string spread_table(const std::vector<std::string>& columns, const std::vector<std::string>& row_labels,
                         const std::vector<std::vector<double>>& values) {
  std::string out =
      "<table class=\"spread\"><tr><th class=\"key\">figure</th><th>min</th><th>median</th><th>max</th>"
      "<th>lowest</th><th>highest</th></tr>\n";
  for (std::size_t column = 0; column < columns.size(); ++column) {
    std::vector<double> present;
    std::size_t lowest = values.size();
    std::size_t highest = values.size();
    for (std::size_t row = 0; row < values.size(); ++row) {
      if (column >= values[row].size() || std::isnan(values[row][column])) continue;
      const double value = values[row][column];
      present.push_back(value);
      if (lowest == values.size() || value < values[lowest][column]) lowest = row;
      if (highest == values.size() || value > values[highest][column]) highest = row;
    }
    if (present.empty()) continue;
    out += fmt::format(
        "<tr><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        escape_html(columns[column]), cell(values[lowest][column]), cell(core::upper_median(present)),
        cell(values[highest][column]), escape_html(row_labels[lowest]), escape_html(row_labels[highest]));
  }
  return out + "</table>\n";
}

NodeRows group_nodes(const std::vector<std::vector<double>>& values, NodeFold fold) {
  NodeRows rows;
  const std::size_t nodes = values.size();
  const std::size_t per_row = nodes <= kMaxNodeRows ? 1 : (nodes + kMaxNodeRows - 1) / kMaxNodeRows;
  for (std::size_t first = 0; first < nodes; first += per_row) {
    const std::size_t last = std::min(nodes, first + per_row) - 1;
    rows.labels.push_back(first == last ? fmt::format("node {}", first)
                                        : fmt::format("nodes {}–{}", first, last));
    std::size_t slots = 0;
    for (std::size_t node = first; node <= last; ++node) slots = std::max(slots, values[node].size());
    std::vector<double> row(slots, NAN);
    for (std::size_t slot = 0; slot < slots; ++slot) {
      double sum = 0;
      double best = -std::numeric_limits<double>::infinity();
      int count = 0;
      for (std::size_t node = first; node <= last; ++node) {
        if (slot >= values[node].size() || std::isnan(values[node][slot])) continue;
        sum += values[node][slot];
        best = std::max(best, values[node][slot]);
        ++count;
      }
      if (count > 0) row[slot] = fold == NodeFold::kMean ? sum / count : best;
    }
    rows.values.push_back(std::move(row));
  }
  return rows;
}

std::string node_slot_heatmap(const std::string& title, const std::string& unit,
                              const std::vector<std::vector<double>>& values, NodeFold fold) {
  const NodeRows rows = group_nodes(values, fold);
  std::size_t slots = 0;
  for (const auto& row : rows.values) slots = std::max(slots, row.size());
  std::vector<std::string> columns;
  for (std::size_t slot = 0; slot < slots; ++slot) columns.push_back(fmt::format("slot {}", slot));
  const std::string grouped = rows.labels.size() < values.size()
                                  ? fmt::format(" ({} nodes, {} per row: {} of each slot)", values.size(),
                                                (values.size() + rows.labels.size() - 1) / rows.labels.size(),
                                                fold == NodeFold::kMean ? "the mean" : "the highest")
                                  : "";
  return grid_heatmap(title + grouped, unit, rows.labels, columns, rows.values, "node-slot");
}

}  // namespace calo::report
