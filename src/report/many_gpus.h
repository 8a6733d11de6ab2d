// Reports of thousands of GPUs: per-GPU lines, rows and node grids folded so that every chart stays readable
// (and a report of 8192 GPUs a few MB): a band over every GPU with its extremes named, the GPUs furthest from
// the median, and consecutive nodes grouped.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "report/svg_chart.h"

namespace calo::report {

/// Most per-GPU lines a time-series chart draws as they are; above it fold_gpu_lines folds them.
inline constexpr std::size_t kMaxGpuLines = 16;
/// Most GPU rows the GPUs × metrics heatmap draws; above it only the outlier_rows are drawn.
inline constexpr std::size_t kMaxGpuRows = 64;
/// Most node rows a node × slot heatmap draws; above it group_nodes groups consecutive nodes.
inline constexpr std::size_t kMaxNodeRows = 32;

/// Up to kMaxGpuLines lines: returned as they are. More: three lines, "N GPUs" (per pixel the smallest min
/// and largest max of any GPU as its band, the mean over GPUs as its line), then the GPU of the highest and
/// of the lowest mean, named with a leading "↑" / "↓" (kFoldedLinesNote says so in a caption).
std::vector<TimeSeries> fold_gpu_lines(std::vector<TimeSeries> lines);

/// Removes the columns no row has a value in (`values[row][column]`, NaN = none) from both.
void drop_empty_columns(std::vector<std::string>& columns, std::vector<std::vector<double>>& values);

/// Caption words for a chart of folded lines.
inline constexpr const char* kFoldedLinesNote =
    "band: lowest to highest of any GPU per pixel, line: mean over GPUs; ↑ / ↓: the GPU of the highest / "
    "lowest mean";

/// Of many rows (`values[row][column]`, NaN = none), the `keep` rows furthest from the median in any column
/// (distance over the column's min–max range), in their original order; all rows when there are no more.
std::vector<std::size_t> outlier_rows(const std::vector<std::vector<double>>& values, std::size_t keep);

/// An HTML table of each column's spread over the rows: min, median, max, and the rows holding the min and
/// the max (`row_labels`).
std::string spread_table(const std::vector<std::string>& columns, const std::vector<std::string>& row_labels,
                         const std::vector<std::vector<double>>& values);

/// How node_slot_heatmap merges consecutive nodes into one row when there are too many to draw one each.
enum class NodeFold {
  kMean,  ///< mean over the row's nodes (a mean power)
  kMax,   ///< largest of them (a peak temperature)
};

/// Node rows of a node × slot grid, grouped when there are more than kMaxNodeRows.
struct NodeRows {
  std::vector<std::string> labels;          ///< "node 3", or "nodes 0–31" for a group
  std::vector<std::vector<double>> values;  ///< [row][slot]
};

/// `values[node][slot]` as at most kMaxNodeRows rows of consecutive nodes, each cell folded by `fold` over
/// the group's nodes (NaN cells left out; a cell with none stays NaN).
NodeRows group_nodes(const std::vector<std::vector<double>>& values, NodeFold fold);

/// Heatmap of one metric over node (rows) x slot (columns) on one colour scale; cells show the value.
/// `values[node][slot]`; NaN: blank cell. Above 32 nodes a row is a group of consecutive nodes ("nodes
/// 0–31"), its cells folded by `fold`.
std::string node_slot_heatmap(const std::string& title, const std::string& unit,
                              const std::vector<std::vector<double>>& values,
                              NodeFold fold = NodeFold::kMean);

}  // namespace calo::report
