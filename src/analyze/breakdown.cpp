// Interval-union arithmetic for exposed vs overlapped communication.
#include "analyze/breakdown.h"

#include <algorithm>

namespace calo::analyze {
namespace {

using Interval = std::pair<int64_t, int64_t>;

int64_t measure(const std::vector<Interval>& merged) {
  int64_t total_ns = 0;
  for (const auto& [begin, end] : merged) total_ns += end - begin;
  return total_ns;
}

constexpr double kNsPerS = 1e9;

}  // namespace

double bus_bandwidth_factor(KernelCategory category, int32_t group_size) {
  if (group_size <= 1) return 1.0;
  double ranks = group_size;
  switch (category) {
    case KernelCategory::kAllReduce:
      return 2.0 * (ranks - 1.0) / ranks;
    case KernelCategory::kAllGather:
    case KernelCategory::kReduceScatter:
    case KernelCategory::kAllToAll:
      return (ranks - 1.0) / ranks;
    default:
      return 1.0;
  }
}

std::vector<Interval> interval_union(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> merged;
  for (const auto& interval : intervals) {
    if (interval.second <= interval.first) continue;
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

int64_t overlap_with_union(const std::vector<Interval>& merged, int64_t begin, int64_t end) {
  // First merged interval whose end is after `begin`.
  auto it = std::upper_bound(merged.begin(), merged.end(), begin,
                             [](int64_t value, const Interval& interval) { return value < interval.second; });
  int64_t covered_ns = 0;
  for (; it != merged.end() && it->first < end; ++it) {
    covered_ns += std::min(end, it->second) - std::max(begin, it->first);
  }
  return covered_ns;
}

std::vector<LaneBreakdown> kernel_breakdown(std::span<const KernelInterval> kernels, int32_t lane_count) {
  std::vector<LaneBreakdown> lanes(static_cast<std::size_t>(std::max(lane_count, 0)));
  std::vector<std::vector<Interval>> compute(lanes.size());
  std::vector<std::vector<Interval>> comm(lanes.size());
  std::vector<std::vector<Interval>> all(lanes.size());
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) lanes[lane].lane = static_cast<int32_t>(lane);
  for (const auto& kernel : kernels) {
    if (kernel.lane < 0 || kernel.lane >= lane_count) continue;
    auto lane = static_cast<std::size_t>(kernel.lane);
    auto slot = static_cast<std::size_t>(kernel.category);
    lanes[lane].busy_s[slot] += static_cast<double>(kernel.t_end_ns - kernel.t_begin_ns) / kNsPerS;
    lanes[lane].count[slot] += 1;
    (is_comm(kernel.category) ? comm : compute)[lane].emplace_back(kernel.t_begin_ns, kernel.t_end_ns);
    all[lane].emplace_back(kernel.t_begin_ns, kernel.t_end_ns);
  }
  std::vector<std::array<double, kKernelCategoryCount>> sized_bytes(lanes.size());
  std::vector<std::array<double, kKernelCategoryCount>> bus_bytes(lanes.size());
  std::vector<std::array<double, kKernelCategoryCount>> sized_s(lanes.size());
  std::vector<std::vector<Interval>> compute_union(lanes.size());
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) compute_union[lane] = interval_union(compute[lane]);
  for (const auto& kernel : kernels) {
    if (kernel.lane < 0 || kernel.lane >= lane_count || !is_comm(kernel.category)) continue;
    auto lane = static_cast<std::size_t>(kernel.lane);
    auto slot = static_cast<std::size_t>(kernel.category);
    int64_t covered_ns = overlap_with_union(compute_union[lane], kernel.t_begin_ns, kernel.t_end_ns);
    int64_t duration_ns = kernel.t_end_ns - kernel.t_begin_ns;
    lanes[lane].overlapped_s[slot] += static_cast<double>(covered_ns) / kNsPerS;
    lanes[lane].exposed_s[slot] += static_cast<double>(duration_ns - covered_ns) / kNsPerS;
    if (kernel.message_bytes > 0 && duration_ns > 0) {
      sized_bytes[lane][slot] += kernel.message_bytes;
      bus_bytes[lane][slot] +=
          kernel.message_bytes * bus_bandwidth_factor(kernel.category, kernel.group_size);
      sized_s[lane][slot] += static_cast<double>(duration_ns) / kNsPerS;
    }
  }
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
    auto& out = lanes[lane];
    for (std::size_t slot = 0; slot < kKernelCategoryCount; ++slot) {
      if (sized_s[lane][slot] > 0) {
        out.algbw_gbps[slot] = sized_bytes[lane][slot] / sized_s[lane][slot] / 1e9;
        out.busbw_gbps[slot] = bus_bytes[lane][slot] / sized_s[lane][slot] / 1e9;
      }
    }
    auto comm_union = interval_union(comm[lane]);
    int64_t comm_covered_ns = 0;
    for (const auto& [begin, end] : comm_union)
      comm_covered_ns += overlap_with_union(compute_union[lane], begin, end);
    out.compute_union_s = static_cast<double>(measure(compute_union[lane])) / kNsPerS;
    out.comm_union_s = static_cast<double>(measure(comm_union)) / kNsPerS;
    out.comm_exposed_union_s = static_cast<double>(measure(comm_union) - comm_covered_ns) / kNsPerS;
    auto all_union = interval_union(all[lane]);
    out.gpu_busy_union_s = static_cast<double>(measure(all_union)) / kNsPerS;
    if (!all_union.empty()) {
      out.window_s = static_cast<double>(all_union.back().second - all_union.front().first) / kNsPerS;
    }
  }
  return lanes;
}

}  // namespace calo::analyze
